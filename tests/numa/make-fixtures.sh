#!/bin/bash
# Regenerates the hwloc XML topologies that tests/unit/test_numa_*.c load.
#
# Synthetic topologies have no I/O objects (../shared/io-notes.md §4), so each fixture is
# a synthetic string exported by lstopo, with PCI NVMe drives inserted under the
# Package or NUMA Group they attach to: Bridge -> PCIDev -> OSDev (block, subtype Disk,
# info LinuxDeviceID), as hwloc's own tests/hwloc/xml/*-pci.xml fixtures do.
#
#   epyc7763-nps1.xml  dual EPYC 7763, NPS1: 2 nodes of 64 cores (PUs k and k+128);
#                      nvme0n1, nvme1n1 on node 0; nvme2n1, nvme3n1 on node 1
#   epyc7763-nps4.xml  dual EPYC 7763, NPS4: 8 nodes of 16 cores; nvme0n1 on node 1,
#                      nvme1n1 on node 3, nvme2n1 on node 5, nvme3n1 on node 7, and
#                      nvme4n1 under package 1 as a whole (nodes 4-7: no single node);
#                      NVMe multipath paths as hwloc lists them (the heads nvme5n1 and
#                      nvme6n1 are virtual devices it skips): nvme5c5n1 and nvme5c6n1 on
#                      node 2, nvme6c6n1 on node 2 and nvme6c7n1 on node 6
#   odd-3-5.xml        2 nodes of 3 and 5 cores (PUs k and k+10; cores 3 and 4 removed
#                      with --restrict); nvme0n1 and nvme1n1 both on node 1
#
# Usage: tests/numa/make-fixtures.sh   (needs lstopo-no-graphics from hwloc, python3)
set -euo pipefail
cd "$(dirname "$0")"

NPS1="pack:2 [numa(memory=256GiB)] l3:8(size=32MiB) l2:8(size=512KiB) l1d:1(size=32KiB) core:1 pu:2(indexes=2*128:1*2)"
NPS4="pack:2 numa:4(memory=64GiB) l3:2(size=32MiB) l2:8(size=512KiB) l1d:1(size=32KiB) core:1 pu:2(indexes=2*128:1*2)"
ODD="pack:2 [numa(memory=8GiB)] l3:1(size=16MiB) core:5 pu:2(indexes=2*10:1*2)"
ODD_KEEP=0xf9fe7 # all 20 PUs but 3, 4, 13, 14: cores 3 and 4 of package 0

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

lstopo-no-graphics -i "$NPS1" --of xml "$tmp/nps1.xml"
lstopo-no-graphics -i "$NPS4" --of xml "$tmp/nps4.xml"
lstopo-no-graphics -i "$ODD" --restrict "$ODD_KEEP" --of xml "$tmp/odd.xml"

# add_drives IN OUT WHERE:NAME:MAJOR:MINOR:PCI-BUSID...
#   WHERE is node=N (the object the NUMA node N hangs from: a Group under NPS4, the
#   Package under NPS1) or package=N.
add_drives() {
  python3 - "$@" <<'PY'
import sys
import xml.etree.ElementTree as ET

src, dst, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
tree = ET.parse(src)
root = tree.getroot()
parent_of = {c: p for p in root.iter() for c in p}
gp = max(int(o.get("gp_index", "0")) for o in root.iter("object"))

def container(where):
    kind, n = where.split("=")
    for o in root.iter("object"):
        if kind == "node" and o.get("type") == "NUMANode" and o.get("os_index") == n:
            return parent_of[o]
        if kind == "package" and o.get("type") == "Package" and o.get("os_index") == n:
            return o
    sys.exit(f"{src}: no {where}")

def obj(parent, **attrs):
    global gp
    gp += 1
    attrs["gp_index"] = str(gp)
    return ET.SubElement(parent, "object", attrs)

for spec in specs:
    where, name, major, minor, busid = spec.split(":", 4)
    bus = busid.split(":")[1]
    bridge = obj(container(where), type="Bridge", bridge_type="0-1", depth="0",
                 bridge_pci=f"0000:[{bus}-{bus}]")
    pci = obj(bridge, type="PCIDev", pci_busid=busid,
              pci_type="0108 [144d:a80a] [144d:a801] 00", pci_link_speed="7.876923")
    osdev = obj(pci, type="OSDev", name=name, subtype="Disk", osdev_type="0")
    for k, v in (("Size", "3750738264"), ("SectorSize", "512"),
                 ("LinuxDeviceID", f"{major}:{minor}")):
        ET.SubElement(osdev, "info", name=k, value=v)

ET.indent(tree, space="  ")
with open(dst, "w") as f:
    f.write('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n')
    f.write(ET.tostring(root, encoding="unicode"))
    f.write("\n")
PY
}

add_drives "$tmp/nps1.xml" epyc7763-nps1.xml \
  node=0:nvme0n1:259:0:0000:01:00.0 node=0:nvme1n1:259:1:0000:02:00.0 \
  node=1:nvme2n1:259:2:0000:81:00.0 node=1:nvme3n1:259:3:0000:82:00.0
add_drives "$tmp/nps4.xml" epyc7763-nps4.xml \
  node=1:nvme0n1:259:0:0000:41:00.0 node=3:nvme1n1:259:1:0000:61:00.0 \
  node=5:nvme2n1:259:2:0000:c1:00.0 node=7:nvme3n1:259:3:0000:e1:00.0 \
  package=1:nvme4n1:259:4:0000:a1:00.0 \
  node=2:nvme5c5n1:259:10:0000:51:00.0 node=2:nvme5c6n1:259:11:0000:55:00.0 \
  node=2:nvme6c6n1:259:12:0000:52:00.0 node=6:nvme6c7n1:259:13:0000:d2:00.0
add_drives "$tmp/odd.xml" odd-3-5.xml \
  node=1:nvme0n1:259:0:0000:81:00.0 node=1:nvme1n1:259:1:0000:82:00.0

# Each fixture must load and show its drives where intended.
for f in epyc7763-nps1.xml epyc7763-nps4.xml odd-3-5.xml; do
  n=$(lstopo-no-graphics -i "$f" --of console | grep -c 'Block.*nvme')
  echo "$f: $n NVMe drives"
done
