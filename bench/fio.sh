#!/bin/bash
# The fio ceiling on a set of drives: random O_DIRECT reads through io_uring (registered
# buffers and files), one job per drive on the same file name, summed. This is the
# bandwidth the engine's read path is divided by: same drives, same block size and
# depth, same run. With --name the jobs run inside an emulated box's throttled cgroup
# (bench/emulate.sh).
#
#   bench/fio.sh --drives D0,D1,.. [--bs 1M] [--iodepth 64] [--runtime 6]
#                [--file k3-uring.data] [--size SIZE] [--name NAME] [--json FILE]
#
# Prints one number on stdout: the aggregate read bandwidth in bytes/s. Every knob and a
# readable summary go to stderr. Exit codes: 0 ok, 1 error, 2 usage, 77 no fio (or the
# box's exec could not run here).
set -euo pipefail
prog=fio.sh
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"

def_bs=1M
def_iodepth=64
def_runtime=6
def_file="k3-uring.data"
def_rw=randread

usage() {
  cat <<EOF
usage: bench/fio.sh --drives D0,D1,.. [options]
options (default):
  --drives LIST    comma-separated folders, one fio job each (required)
  --bs SIZE        block size of each read ($def_bs)
  --iodepth N      reads in flight per drive ($def_iodepth)
  --runtime S      seconds of reading ($def_runtime)
  --rw MODE        fio's rw: randread or read ($def_rw)
  --file NAME      the file read on every drive ($def_file)
  --size SIZE      create the file with this size on drives that lack it (none: a
                   missing file is an error); K M G = 2^10.., KB MB GB = 10^3..
  --name NAME      run inside the throttled cgroup of emulated box NAME (none)
  --json FILE      also keep fio's JSON output there (none)
prints: aggregate read bandwidth in bytes/s, one number on stdout
EOF
}
usage_error() { echo "$prog: $*" >&2; echo "$prog: see bench/fio.sh --help" >&2; exit 2; }

drives='' bs=$def_bs iodepth=$def_iodepth runtime=$def_runtime file=$def_file rw=$def_rw
size='' name='' json=''
while (($#)); do
  case $1 in
    --drives) need_value "$1" $#; drives=$2; shift 2 ;;
    --bs) need_value "$1" $#; bs=$2; shift 2 ;;
    --iodepth) need_value "$1" $#; iodepth=$2; shift 2 ;;
    --runtime) need_value "$1" $#; runtime=$2; shift 2 ;;
    --rw) need_value "$1" $#; rw=$2; shift 2 ;;
    --file) need_value "$1" $#; file=$2; shift 2 ;;
    --size) need_value "$1" $#; size=$2; shift 2 ;;
    --name) need_value "$1" $#; name=$2; shift 2 ;;
    --json) need_value "$1" $#; json=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage_error "unknown option '$1'" ;;
  esac
done
[[ -n $drives ]] || usage_error "--drives is required"
to_bytes "$bs" >/dev/null || usage_error "--bs: want a size like 1M, got '$bs'"
check_uint --iodepth "$iodepth"
check_uint --runtime "$runtime"
[[ $rw == randread || $rw == read ]] || usage_error "--rw: randread or read, got '$rw'"
[[ $file != */* ]] || usage_error "--file: a name inside each drive, got '$file'"
[[ -z $size ]] || to_bytes "$size" >/dev/null || usage_error "--size: want a size like 1G, got '$size'"
command -v fio >/dev/null || skip "needs fio (apt-get install fio)"
IFS=, read -r -a dirs <<<"$drives"
for d in "${dirs[@]}"; do [[ -d $d ]] || die "drive $d: no such folder"; done

knob() { printf '%s:   %-10s %s%s\n' "$prog" "$1" "$2" "$([[ $2 == "$3" ]] && echo " (default)")" >&2; }
say "every knob:"
knob --drives "$drives (${#dirs[@]})" ""
knob --bs "$bs" "$def_bs"
knob --iodepth "$iodepth" "$def_iodepth"
knob --runtime "$runtime" "$def_runtime"
knob --rw "$rw" "$def_rw"
knob --file "$file" "$def_file"
knob --size "${size:-none}" none
knob --name "${name:-none (not throttled)}" ""
knob --json "${json:-none}" none
knob fixed "direct=1 ioengine=io_uring fixedbufs registerfiles time_based group_reporting" ""

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# fio splits --filename on ':'; a path that has one must escape it.
fio_path() { local p=$1; echo "${p//:/\\:}"; }

# Writes the missing files, all drives at once, with O_DIRECT so the page cache keeps
# none of it. Outside the cgroup: only reads are throttled there anyway.
create_missing() {
  local jobs=() d
  for d in "${dirs[@]}"; do
    [[ -f $d/$file ]] && continue
    [[ -n $size ]] || die "drive $d: no $file (give --size to create one)"
    jobs+=(--name="create-$(basename "$d")" --filename="$(fio_path "$d/$file")")
  done
  ((${#jobs[@]})) || return 0
  say "creating $file ($size) on $((${#jobs[@]} / 2)) drive(s)"
  fio --rw=write --bs=1M --direct=1 --ioengine=psync --size="$size" --output=/dev/null \
    "${jobs[@]}" 2>"$tmp/create.err" || die "creating $file failed: $(tr '\n' ' ' <"$tmp/create.err")"
}

create_missing
args=(--rw="$rw" --bs="$bs" --iodepth="$iodepth" --direct=1 --ioengine=io_uring
  --fixedbufs=1 --registerfiles=1 --runtime="$runtime" --time_based --group_reporting
  --output-format=json --output="$tmp/fio.json")
for i in "${!dirs[@]}"; do args+=(--name="drive$i" --filename="$(fio_path "${dirs[$i]}/$file")"); done
runner=()
[[ -n $name ]] && runner=("$here/emulate.sh" exec --name "$name" --)
drop_caches
rc=0
"${runner[@]}" fio "${args[@]}" 2>"$tmp/fio.err" || rc=$?
if ((rc == 77)); then skip "$(tail -1 "$tmp/fio.err")"; fi
((rc == 0)) || die "fio failed (exit $rc): $(tr '\n' ' ' <"$tmp/fio.err")"
bw=$(fio_read_bw "$tmp/fio.json") || die "no read bandwidth in fio's output ($tmp/fio.json)"
if [[ -n $json ]]; then cp "$tmp/fio.json" "$json"; fi
say "$(awk -v b="$bw" -v n="${#dirs[@]}" 'BEGIN { printf "%d drive(s): %.1f MB/s in all, %.1f MB/s per drive", n, b / 1e6, b / 1e6 / n }')"
echo "$bw"
