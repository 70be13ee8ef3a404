/* numa/topology: the layout of synthetic, XML and real topologies, and drive locality. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "tests/unit/test_numa.h"

static void epyc_nps1(void)
{
    struct k3numa_topo *t = load_synthetic(TOPO_NPS1);
    const struct k3numa_layout *l = k3numa_topo_layout(t);
    CHECK(!k3numa_topo_is_real(t), "a synthetic topology is not this machine");
    CHECK(l->n_packages == 2 && l->n_nodes == 2, "%d packages, %d nodes", l->n_packages,
          l->n_nodes);
    CHECK(l->n_cores == 128 && l->n_pus == 256, "%d cores, %d PUs", l->n_cores, l->n_pus);
    for (int i = 0; i < 2; i++) {
        const struct k3numa_node *nd = &l->nodes[i];
        CHECK(nd->os_index == i && nd->package == i, "node %d: os %d package %d", i,
              nd->os_index, nd->package);
        CHECK(nd->n_cores == 64 && nd->n_pus == 128, "node %d: %d cores %d PUs", i,
              nd->n_cores, nd->n_pus);
        CHECK(nd->memory_bytes == 256ull << 30, "node %d: %llu bytes", i,
              (unsigned long long)nd->memory_bytes);
    }
    CHECK(strcmp(node_pus(l, 0), "0-63,128-191") == 0, "node 0 PUs %s", node_pus(l, 0));
    CHECK(strcmp(node_pus(l, 1), "64-127,192-255") == 0, "node 1 PUs %s", node_pus(l, 1));
    /* Core 5 of node 1 is OS core 69: PUs 69 and 197, in the 8-core L3 of cores 64-71. */
    const struct k3numa_core *c = &l->cores[l->nodes[1].first_core + 5];
    CHECK(c->n_pus == 2 && l->pus[c->first_pu] == 69 && l->pus[c->first_pu + 1] == 197,
          "core 69's PUs %d %d", l->pus[c->first_pu], l->pus[c->first_pu + 1]);
    CHECK(c->llc == l->cores[l->nodes[1].first_core].llc &&
              c->llc != l->cores[l->nodes[1].first_core + 8].llc,
          "cores 64 and 69 share an L3, 72 has another");
    CHECK(k3numa_layout_node_index(l, 1) == 1 && k3numa_layout_node_index(l, 2) == -1,
          "node index lookup");
    /* Synthetic topologies have no I/O objects. */
    int node = 7;
    char why[128];
    k3numa_topo_device_node(t, "nvme0n1", &node, why, sizeof why);
    CHECK(node == -1 && strstr(why, "not in the topology"), "nvme0n1: %d (%s)", node, why);
    k3numa_topo_destroy(t);
}

static void epyc_nps4(void)
{
    struct k3numa_topo *t = load_synthetic(TOPO_NPS4);
    const struct k3numa_layout *l = k3numa_topo_layout(t);
    CHECK(l->n_packages == 2 && l->n_nodes == 8 && l->n_cores == 128 && l->n_pus == 256,
          "%d packages %d nodes %d cores %d PUs", l->n_packages, l->n_nodes, l->n_cores,
          l->n_pus);
    for (int i = 0; i < 8; i++) {
        const struct k3numa_node *nd = &l->nodes[i];
        char want[64];
        snprintf(want, sizeof want, "%d-%d,%d-%d", 16 * i, 16 * i + 15, 128 + 16 * i,
                 128 + 16 * i + 15);
        CHECK(nd->os_index == i && nd->package == i / 4 && nd->n_cores == 16,
              "node %d: os %d package %d cores %d", i, nd->os_index, nd->package, nd->n_cores);
        CHECK(strcmp(node_pus(l, i), want) == 0, "node %d PUs %s, want %s", i,
              node_pus(l, i), want);
    }
    k3numa_topo_destroy(t);
}

/* Drive locality from the XML fixtures: by name and by LinuxDeviceID. */
static void xml_drives(void)
{
    struct k3numa_topo *t = load_fixture("epyc7763-nps4.xml");
    const struct k3numa_layout *l = k3numa_topo_layout(t);
    CHECK(l->n_nodes == 8 && l->n_cores == 128, "nps4 xml: %d nodes %d cores", l->n_nodes,
          l->n_cores);
    struct {
        const char *dev;
        int node;
        const char *why;
    } want[] = {
        {"nvme0n1", 1, ""},  {"nvme1n1", 3, ""},  {"259:2", 5, ""},  {"nvme3n1", 7, ""},
        {"nvme4n1", -1, "nvme4n1 attaches to nodes 4-7"},
        {"sda", -1, "sda not in the topology"},  {"259:9", -1, "259:9 not in the topology"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int node = 99;
        char why[128] = "junk";
        int rc = k3numa_topo_device_node(t, want[i].dev, &node, why, sizeof why);
        CHECK(rc == 0 && node == want[i].node && strcmp(why, want[i].why) == 0,
              "%s: rc %d node %d (%s), want %d (%s)", want[i].dev, rc, node, why,
              want[i].node, want[i].why);
    }
    k3numa_topo_destroy(t);

    t = load_fixture("epyc7763-nps1.xml");
    l = k3numa_topo_layout(t);
    CHECK(l->n_nodes == 2 && l->n_cores == 128, "nps1 xml: %d nodes %d cores", l->n_nodes,
          l->n_cores);
    const char *devs[] = {"nvme0n1", "nvme1n1", "nvme2n1", "259:3"};
    for (int i = 0; i < 4; i++) {
        int node = 99;
        k3numa_topo_device_node(t, devs[i], &node, NULL, 0);
        CHECK(node == i / 2, "nps1 %s: node %d, want %d", devs[i], node, i / 2);
    }
    k3numa_topo_destroy(t);
}

static void odd_cores(void)
{
    struct k3numa_topo *t = load_fixture("odd-3-5.xml");
    const struct k3numa_layout *l = k3numa_topo_layout(t);
    CHECK(l->n_nodes == 2 && l->nodes[0].n_cores == 3 && l->nodes[1].n_cores == 5,
          "odd: %d nodes, %d and %d cores", l->n_nodes, l->nodes[0].n_cores,
          l->nodes[1].n_cores);
    CHECK(strcmp(node_pus(l, 0), "0-2,10-12") == 0, "node 0 PUs %s", node_pus(l, 0));
    CHECK(strcmp(node_pus(l, 1), "5-9,15-19") == 0, "node 1 PUs %s", node_pus(l, 1));
    for (int i = 0; i < 2; i++) {
        int node = 99;
        char dev[32];
        snprintf(dev, sizeof dev, "nvme%dn1", i);
        k3numa_topo_device_node(t, dev, &node, NULL, 0);
        CHECK(node == 1, "%s on node %d, want 1", dev, node);
    }
    k3numa_topo_destroy(t);
}

/* A package with two NUMA nodes of one cpuset (e.g. DRAM and HBM): cores go to the first;
 * a topology without Core objects: each PU is a core. */
static void shared_and_coreless(void)
{
    struct k3numa_topo *t = load_synthetic("pack:2 [numa(memory=1GiB)] [numa(memory=2GiB)] "
                                           "core:2 pu:2");
    const struct k3numa_layout *l = k3numa_topo_layout(t);
    CHECK(l->n_nodes == 4, "%d nodes", l->n_nodes);
    int cores[4] = {2, 0, 2, 0};
    for (int i = 0; i < l->n_nodes && i < 4; i++)
        CHECK(l->nodes[i].n_cores == cores[i] && l->nodes[i].package == i / 2,
              "node %d: %d cores (want %d), package %d", i, l->nodes[i].n_cores, cores[i],
              l->nodes[i].package);
    CHECK(l->nodes[1].memory_bytes == 2ull << 30, "node 1 memory %llu",
          (unsigned long long)l->nodes[1].memory_bytes);
    k3numa_topo_destroy(t);

    t = load_synthetic("pack:2 [numa] pu:3");
    l = k3numa_topo_layout(t);
    CHECK(l->n_nodes == 2 && l->n_cores == 6 && l->n_pus == 6, "%d nodes %d cores %d PUs",
          l->n_nodes, l->n_cores, l->n_pus);
    for (int c = 0; c < l->n_cores; c++)
        CHECK(l->cores[c].n_pus == 1 && l->pus[l->cores[c].first_pu] == c, "core %d", c);
    k3numa_topo_destroy(t);
}

static void bad_sources(void)
{
    struct k3numa_topo *t = (struct k3numa_topo *)1;
    CHECK(k3numa_topo_load(&t, K3NUMA_SYNTHETIC, "pack:two") == -EINVAL && t == NULL,
          "a bad synthetic string is -EINVAL");
    CHECK(k3numa_topo_load(&t, K3NUMA_XML, "/nonexistent/topo.xml") == -EINVAL,
          "a missing XML file is -EINVAL");
    CHECK(k3numa_topo_load(&t, K3NUMA_XML, NULL) == -EINVAL, "a NULL path is -EINVAL");
}

/* This machine: the layout honours the process's affinity; drive folders map to nodes. */
static void this_system(void)
{
    struct k3numa_topo *t;
    int rc = k3numa_topo_load(&t, K3NUMA_THIS_SYSTEM, NULL);
    REQUIRE(rc == 0, "load this system: %d", rc);
    const struct k3numa_layout *l = k3numa_topo_layout(t);
    CHECK(k3numa_topo_is_real(t), "this system is real");
    cpu_set_t set;
    REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0, "sched_getaffinity");
    CHECK(l->n_pus == CPU_COUNT(&set), "layout has %d PUs, the affinity %d", l->n_pus,
          CPU_COUNT(&set));
    for (int i = 0; i < l->n_pus; i++)
        CHECK(CPU_ISSET(l->pus[i], &set), "PU %d is outside the affinity", l->pus[i]);
    CHECK(l->n_nodes >= 1 && l->n_cores >= 1, "%d nodes %d cores", l->n_nodes, l->n_cores);

    /* The repository's own folder: its whole disk, and that disk's node when hwloc
     * knows the device. */
    const char *root = getenv("K3_ROOT");
    root = root && *root ? root : ".";
    char name[256], id[32], why[256];
    unsigned ma = 0, mi = 0;
    int node = 99, dnode = 99;
    rc = k3numa_whole_disk(root, name, sizeof name, &ma, &mi);
    CHECK(rc == 0 || rc == -ENODEV, "whole disk of %s: %d", root, rc);
    rc = k3numa_topo_path_node(t, root, &node, why, sizeof why);
    CHECK(rc == 0, "path node of %s: %d", root, rc);
    if (k3numa_whole_disk(root, name, sizeof name, &ma, &mi) == 0) {
        snprintf(id, sizeof id, "%u:%u", ma, mi);
        k3numa_topo_device_node(t, id, &dnode, NULL, 0);
        CHECK(node == dnode, "%s: path says node %d, device %s (%s) says %d", root, node, id,
              name, dnode);
        fprintf(stderr, "%s is on %s (%s): node %d %s\n", root, name, id, node, why);
    }

    /* No locality: tmpfs, procfs; an error: no such path. */
    const char *none[] = {"/dev/shm", "/proc/self"};
    for (int i = 0; i < 2; i++) {
        struct stat st;
        if (stat(none[i], &st) != 0)
            continue;
        node = 99;
        rc = k3numa_topo_path_node(t, none[i], &node, why, sizeof why);
        CHECK(rc == 0 && node == -1 && strcmp(why, "not on a block device") == 0,
              "%s: rc %d node %d (%s)", none[i], rc, node, why);
    }
    CHECK(k3numa_topo_path_node(t, "/nonexistent/drive", &node, NULL, 0) == -ENOENT,
          "a missing folder is -ENOENT");
    /* A loop device is in no PCI hierarchy: no locality. */
    struct stat st;
    if (stat("/dev/loop0", &st) == 0 && S_ISBLK(st.st_mode)) {
        rc = k3numa_whole_disk("/dev/loop0", name, sizeof name, &ma, &mi);
        CHECK(rc == 0 && strcmp(name, "loop0") == 0 && ma == 7 && mi == 0,
              "/dev/loop0: rc %d name %s %u:%u", rc, name, ma, mi);
        node = 99;
        k3numa_topo_path_node(t, "/dev/loop0", &node, why, sizeof why);
        CHECK(node == -1 && strcmp(why, "loop0 not in the topology") == 0,
              "/dev/loop0: node %d (%s)", node, why);
    }
    k3numa_topo_destroy(t);
}

/* ------------------------------------------------------------------ stacked devices */

static char fake_root[4096];

/* root/rel/file: the folders leading to it, then an empty file ("1") or a symlink;
 * file NULL: the folder root/rel. */
static void fake(const char *rel, const char *file, const char *link_to)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/%s%s%s", fake_root, rel, file ? "/" : "", file ? file : "");
    char *last = file ? strrchr(path, '/') : path + strlen(path);
    for (char *p = path + strlen(fake_root) + 1; p <= last; p++)
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            mkdir(path, 0755);
            *p = c;
        }
    if (!file)
        return;
    if (link_to) {
        REQUIRE(symlink(link_to, path) == 0, "symlink %s: %s", path, strerror(errno));
    } else {
        FILE *fp = fopen(path, "w");
        REQUIRE(fp, "create %s", path);
        fputs("1\n", fp);
        fclose(fp);
    }
}

static void fake_dev(const char *rel, const char *numbers)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/%s/dev", fake_root, rel);
    FILE *fp = fopen(path, "w");
    REQUIRE(fp, "create %s", path);
    fprintf(fp, "%s\n", numbers);
    fclose(fp);
}

static void remove_tree(const char *path)
{
    char cmd[8300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", path);
}

/* NVMe multipath heads, dm and md devices over the NPS4 fixture's NVMe paths, with a
 * fake sysfs tree standing in for this machine's. */
static void stacked(void)
{
    const char *tmp = getenv("K3_TEST_TMP");
    snprintf(fake_root, sizeof fake_root, "%s/numa-sysfs-%d", tmp && *tmp ? tmp : "/tmp",
             (int)getpid());
    remove_tree(fake_root);
    REQUIRE(mkdir(fake_root, 0755) == 0 || errno == EEXIST, "mkdir %s", fake_root);

    const char *head5 = "devices/virtual/nvme-subsystem/nvme-subsys5/nvme5n1";
    fake(head5, NULL, NULL);
    fake_dev(head5, "259:20");
    fake(head5, "multipath/nvme5c5n1", "../../../../../pci0000:50/0000:51:00.0/nvme5c5n1");
    fake(head5, "multipath/nvme5c6n1", "../../../../../pci0000:54/0000:55:00.0/nvme5c6n1");
    fake("class/block", "nvme5n1", "../../devices/virtual/nvme-subsystem/nvme-subsys5/nvme5n1");
    fake("class/block/nvme6n1/multipath", "nvme6c6n1", NULL);
    fake("class/block/nvme6n1/multipath", "nvme6c7n1", NULL);
    const char *disk0 = "devices/pci0000:40/0000:40:01.1/0000:41:00.0/nvme/nvme0/nvme0n1";
    fake(disk0, "nvme0n1p1/partition", NULL);
    fake(disk0, "nvme0n1p2/partition", NULL);
    fake("class/block", "nvme0n1p1", "../../devices/pci0000:40/0000:40:01.1/0000:41:00.0/nvme/"
                                     "nvme0/nvme0n1/nvme0n1p1");
    fake("class/block", "nvme0n1p2", "../../devices/pci0000:40/0000:40:01.1/0000:41:00.0/nvme/"
                                     "nvme0/nvme0n1/nvme0n1p2");
    fake("class/block/dm-0/slaves", "nvme5n1", NULL);            /* LVM on a multipath head */
    fake("class/block/dm-1/slaves", "nvme4n1", NULL);            /* on a package, not a node */
    fake("class/block/md0/slaves", "nvme0n1p1", NULL);           /* nodes 1 and 3 */
    fake("class/block/md0/slaves", "nvme1n1", NULL);
    fake("class/block/md1/slaves", "nvme0n1p1", NULL);           /* two partitions of one disk */
    fake("class/block/md1/slaves", "nvme0n1p2", NULL);
    fake("class/block/md2/slaves", "loop3", NULL);
    fake("class/block/dm-2/slaves", "md1", NULL);                /* dm on md on partitions */

    struct k3numa_topo *t = load_fixture("epyc7763-nps4.xml");
    int node = 99;
    char why[256];
    /* Without a sysfs that describes it, an XML topology cannot see through stacks. */
    k3numa_topo_device_node(t, "nvme5n1", &node, why, sizeof why);
    CHECK(node == -1 && strcmp(why, "nvme5n1 not in the topology") == 0, "no sysfs: %d (%s)",
          node, why);
    REQUIRE(k3numa_topo_set_sysfs(t, fake_root) == 0, "set sysfs");
    struct {
        const char *dev;
        int node;
        const char *why;
    } want[] = {
        {"nvme5n1", 2, ""},
        {"nvme6n1", -1, "nvme6n1 spans nodes 2 and 6"},
        {"nvme0n1p1", 1, ""},
        {"dm-0", 2, ""},
        {"dm-1", -1, "dm-1 is on nvme4n1: nvme4n1 attaches to nodes 4-7"},
        {"md0", -1, "md0 spans nodes 1 and 3"},
        {"md1", 1, ""},
        {"md2", -1, "md2 is on loop3: loop3 not in the topology"},
        {"dm-2", 1, ""},
        {"nvme2n1", 5, ""},
        {"sdz", -1, "sdz not in the topology"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        node = 99;
        strcpy(why, "junk");
        k3numa_topo_device_node(t, want[i].dev, &node, why, sizeof why);
        CHECK(node == want[i].node && strcmp(why, want[i].why) == 0,
              "%s: node %d (%s), want %d (%s)", want[i].dev, node, why, want[i].node,
              want[i].why);
    }

    /* A drive folder whose device is the multipath head: stat, dev/block/M:m, the head. */
    char file[4200];
    snprintf(file, sizeof file, "%s/drive-file", fake_root);
    int fd = open(file, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    REQUIRE(fd >= 0, "create %s", file);
    close(fd);
    struct stat st;
    REQUIRE(stat(file, &st) == 0, "stat %s", file);
    if (major(st.st_dev) != 0) {
        char numbers[32];
        snprintf(numbers, sizeof numbers, "%u:%u", major(st.st_dev), minor(st.st_dev));
        fake("dev/block", numbers, "../../devices/virtual/nvme-subsystem/nvme-subsys5/nvme5n1");
        node = 99;
        int rc = k3numa_topo_path_node(t, file, &node, why, sizeof why);
        CHECK(rc == 0 && node == 2 && why[0] == 0, "drive on nvme5n1: rc %d node %d (%s)", rc,
              node, why);
    }
    k3numa_topo_destroy(t);
    remove_tree(fake_root);
}

int main(void)
{
    numa_test_env();
    epyc_nps1();
    epyc_nps4();
    xml_drives();
    odd_cores();
    shared_and_coreless();
    bad_sources();
    stacked();
    this_system();
    return check_result();
}
