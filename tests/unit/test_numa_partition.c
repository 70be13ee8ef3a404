/* numa/topology: a drive folder on a partition maps to its whole disk.  No device here
 * has partitions, so the test makes one: a loop device over a small file, partition 1
 * added with BLKPG (no partition table or tool needed), a device node for it made in
 * the test's temporary folder.  Needs root and /dev/loop-control; everything is undone. */
#include <errno.h>
#include <fcntl.h>
#include <linux/blkpg.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "tests/unit/test_numa.h"

static int loop_fd = -1, loop_nr = -1, part_added;
static char dir[4096], img[4200], node[4200];

static void undo(void)
{
    if (loop_fd >= 0 && part_added) {
        struct blkpg_partition part = {.pno = 1};
        struct blkpg_ioctl_arg arg = {.op = BLKPG_DEL_PARTITION, .datalen = sizeof part,
                                      .data = &part};
        ioctl(loop_fd, BLKPG, &arg);
    }
    if (loop_fd >= 0) {
        ioctl(loop_fd, LOOP_CLR_FD, 0);
        close(loop_fd);
    }
    loop_fd = -1;
    part_added = 0;
    if (dir[0]) {
        unlink(node);
        unlink(img);
        rmdir(dir);
    }
}

int main(void)
{
    numa_test_env();
    if (geteuid() != 0)
        SKIP("needs root for a loop device");
    int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (ctl < 0)
        SKIP("no /dev/loop-control: %s", strerror(errno));

    const char *tmp = getenv("K3_TEST_TMP");
    snprintf(dir, sizeof dir, "%s/numa-partition-%d", tmp && *tmp ? tmp : "/tmp", getpid());
    REQUIRE(mkdir(dir, 0700) == 0, "mkdir %s: %s", dir, strerror(errno));
    snprintf(img, sizeof img, "%s/disk.img", dir);
    snprintf(node, sizeof node, "%s/part1", dir);
    atexit(undo);

    int img_fd = open(img, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    REQUIRE(img_fd >= 0 && ftruncate(img_fd, 8 << 20) == 0, "image %s", img);
    loop_nr = ioctl(ctl, LOOP_CTL_GET_FREE);
    close(ctl);
    if (loop_nr < 0)
        SKIP("no free loop device: %s", strerror(errno));
    char loop[64];
    snprintf(loop, sizeof loop, "/dev/loop%d", loop_nr);
    loop_fd = open(loop, O_RDWR | O_CLOEXEC);
    if (loop_fd < 0)
        SKIP("%s: %s", loop, strerror(errno));
    if (ioctl(loop_fd, LOOP_SET_FD, img_fd) < 0) {
        int e = errno;
        close(loop_fd);
        loop_fd = -1;
        SKIP("LOOP_SET_FD on %s: %s", loop, strerror(e));
    }
    close(img_fd);

    struct blkpg_partition part = {.start = 1 << 20, .length = 4 << 20, .pno = 1};
    struct blkpg_ioctl_arg arg = {.op = BLKPG_ADD_PARTITION, .datalen = sizeof part,
                                  .data = &part};
    if (ioctl(loop_fd, BLKPG, &arg) < 0)
        SKIP("BLKPG_ADD_PARTITION on %s: %s", loop, strerror(errno));
    part_added = 1;

    /* The partition's numbers, from sysfs once the kernel has registered it. */
    char sys[128], line[64] = "";
    snprintf(sys, sizeof sys, "/sys/block/loop%d/loop%dp1/dev", loop_nr, loop_nr);
    unsigned pma = 0, pmi = 0;
    for (int i = 0; i < 100; i++) {
        FILE *f = fopen(sys, "r");
        if (f) {
            int ok = fgets(line, sizeof line, f) && sscanf(line, "%u:%u", &pma, &pmi) == 2;
            fclose(f);
            if (ok)
                break;
        }
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    REQUIRE(pma != 0, "%s never appeared", sys);
    REQUIRE(mknod(node, S_IFBLK | 0600, makedev(pma, pmi)) == 0, "mknod %s: %s", node,
            strerror(errno));

    char name[256];
    unsigned ma = 0, mi = 0;
    int rc = k3numa_whole_disk(node, name, sizeof name, &ma, &mi);
    char want[32];
    snprintf(want, sizeof want, "loop%d", loop_nr);
    CHECK(rc == 0 && strcmp(name, want) == 0 && ma == 7,
          "partition %u:%u: rc %d whole disk %s %u:%u, want %s", pma, pmi, rc, name, ma, mi,
          want);
    struct stat st;
    REQUIRE(stat(loop, &st) == 0, "stat %s", loop);
    CHECK(ma == major(st.st_rdev) && mi == minor(st.st_rdev),
          "whole disk %u:%u, %s is %u:%u", ma, mi, loop, major(st.st_rdev), minor(st.st_rdev));
    CHECK(pma != ma || pmi != mi, "the partition has numbers of its own");
    fprintf(stderr, "partition %u:%u -> whole disk %s (%u:%u)\n", pma, pmi, name, ma, mi);

    /* And its locality: a loop device is in no PCI hierarchy. */
    struct k3numa_topo *t;
    REQUIRE(k3numa_topo_load(&t, K3NUMA_THIS_SYSTEM, NULL) == 0, "load");
    int n = 99;
    char why[256];
    rc = k3numa_topo_path_node(t, node, &n, why, sizeof why);
    char want_why[64];
    snprintf(want_why, sizeof want_why, "loop%d not in the topology", loop_nr);
    CHECK(rc == 0 && n == -1 && strcmp(why, want_why) == 0, "rc %d node %d (%s)", rc, n, why);
    k3numa_topo_destroy(t);
    undo();
    return check_result();
}
