/* What --ram auto reads (engine/stream/ram_auto.c), from fixture files: cgroup v1's limit
 * and its hierarchical limit, v2's memory.max of the group and of an ancestor, "max" and
 * v1's "no limit" as no limit, the smaller of a limit and MemAvailable, unreadable and
 * garbage files as saying nothing; a box's ranks sharing the figure; the margin's rule. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/stream/ram_auto.h"
#include "tests/check.h"

#define GiB (1ull << 30)
#define MiB (1ull << 20)

static char root[512];

/* Writes text to root/rel, making its folders. */
static void put(const char *rel, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *at = path + strlen(root) + 1; (at = strchr(at, '/')); at++) {
        *at = 0;
        REQUIRE(mkdir(path, 0755) == 0 || errno == EEXIST, "mkdir %s", path);
        *at = '/';
    }
    FILE *f = fopen(path, "w");
    REQUIRE(f && fputs(text, f) >= 0 && fclose(f) == 0, "write %s", path);
}

/* A fresh fixture tree for one case. */
static struct k3_ram_paths fixture(const char *name)
{
    static char dirs[4][1024];
    snprintf(root, sizeof root, "%s/ram_auto/%s", getenv("K3_TEST_TMP") ? getenv("K3_TEST_TMP") : "/tmp", name);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", root, root);
    REQUIRE(system(cmd) == 0, "%s", cmd);
    const char *rel[4] = {"proc_cgroup", "v2", "v1", "meminfo"};
    for (int i = 0; i < 4; i++)
        snprintf(dirs[i], sizeof dirs[i], "%s/%s", root, rel[i]);
    return (struct k3_ram_paths){dirs[0], dirs[1], dirs[2], dirs[3]};
}

static const char *v1_proc = "9:name=systemd:/\n4:memory:/jobs/j1\n3:cpuset:/\n0::/\n";
static const char *meminfo_20g = "MemTotal:       24683548 kB\nMemFree:        1 kB\n"
                                 "MemAvailable:   20971520 kB\nBuffers:        44576 kB\n";

static struct k3_ram_machine read_case(const struct k3_ram_paths *p, int ranks)
{
    struct k3_ram_machine m;
    k3_ram_machine_read(&m, p, ranks);
    return m;
}

static void expect(const char *name, const struct k3_ram_machine *m, enum k3_ram_source src,
                   uint64_t bytes, const char *from)
{
    CHECK(m->source == src, "%s: source %d, want %d", name, m->source, src);
    CHECK(m->bytes == bytes, "%s: %llu bytes, want %llu", name, (unsigned long long)m->bytes,
          (unsigned long long)bytes);
    CHECK(strstr(m->from, from) != NULL, "%s: \"%s\" does not say \"%s\"", name, m->from, from);
}

static void cgroup_v1(void)
{
    struct k3_ram_paths p = fixture("v1");
    put("proc_cgroup", v1_proc);
    put("v1/jobs/j1/memory.limit_in_bytes", "6442450944\n");
    put("v1/jobs/j1/memory.stat", "cache 0\nhierarchical_memory_limit 9223372036854771712\n");
    put("meminfo", meminfo_20g);
    struct k3_ram_machine m = read_case(&p, 1);
    expect("v1", &m, K3_RAM_CGROUP, 6 * GiB, "cgroup limit 6.00 GiB (memory.limit_in_bytes of /jobs/j1)");

    /* The group itself unlimited; a parent's limit shows in the hierarchical one. */
    put("v1/jobs/j1/memory.limit_in_bytes", "9223372036854771712\n");
    put("v1/jobs/j1/memory.stat", "cache 0\nhierarchical_memory_limit 3221225472\n");
    m = read_case(&p, 1);
    expect("v1 hierarchical", &m, K3_RAM_CGROUP, 3 * GiB, "hierarchical_memory_limit of /jobs/j1");

    /* A container without a cgroup namespace: its own group is the mount's root. */
    p = fixture("v1-root");
    put("proc_cgroup", v1_proc);
    put("v1/memory.limit_in_bytes", "1610612736\n");
    put("meminfo", meminfo_20g);
    m = read_case(&p, 1);
    expect("v1 at the mount's root", &m, K3_RAM_CGROUP, 3 * GiB / 2, "cgroup limit 1.50 GiB");
}

static void cgroup_v2(void)
{
    struct k3_ram_paths p = fixture("v2");
    put("proc_cgroup", "0::/user.slice/job\n");
    put("v2/user.slice/job/memory.max", "max\n");
    put("v2/user.slice/memory.max", "2147483648\n");
    put("meminfo", meminfo_20g);
    struct k3_ram_machine m = read_case(&p, 1);
    expect("v2 ancestor", &m, K3_RAM_CGROUP, 2 * GiB, "memory.max of /user.slice");

    /* "max" all the way up: MemAvailable. */
    put("v2/user.slice/memory.max", "max\n");
    m = read_case(&p, 1);
    expect("v2 max", &m, K3_RAM_AVAILABLE, 20 * GiB, "MemAvailable 20.00 GiB");

    /* A limit above what the box has free: MemAvailable is what there is. */
    put("v2/user.slice/job/memory.max", "107374182400\n");
    m = read_case(&p, 1);
    expect("v2 above MemAvailable", &m, K3_RAM_AVAILABLE, 20 * GiB, "MemAvailable");
}

static void unreadable(void)
{
    struct k3_ram_paths p = fixture("none"); /* no files at all */
    struct k3_ram_machine m = read_case(&p, 1);
    expect("unreadable", &m, K3_RAM_UNKNOWN, 0, "");

    p = fixture("garbage");
    put("proc_cgroup", "0::/g\n4:memory:/g\n");
    put("v2/g/memory.max", "lots\n");
    put("v1/g/memory.limit_in_bytes", "12abc\n");
    put("meminfo", "MemTotal: 100 kB\nMemAvailable: many kB\n");
    m = read_case(&p, 1);
    expect("garbage", &m, K3_RAM_UNKNOWN, 0, "");

    /* Garbage in the cgroup's files, a good meminfo: MemAvailable. */
    put("meminfo", meminfo_20g);
    m = read_case(&p, 1);
    expect("garbage cgroup", &m, K3_RAM_AVAILABLE, 20 * GiB, "MemAvailable");
}

static void shared_box(void)
{
    struct k3_ram_paths p = fixture("ranks");
    put("proc_cgroup", v1_proc);
    put("v1/jobs/j1/memory.limit_in_bytes", "6442450944\n");
    put("meminfo", meminfo_20g);
    struct k3_ram_machine m = read_case(&p, 2);
    CHECK(k3_ram_share(&m) == 3 * GiB, "2 ranks: share %llu, want 3 GiB",
          (unsigned long long)k3_ram_share(&m));
    char text[512];
    k3_ram_describe(&m, text, sizeof text);
    CHECK(strstr(text, "cgroup limit 6.00 GiB") && strstr(text, " / 2 ranks on this box"),
          "2 ranks: \"%s\"", text);
}

static void margin(void)
{
    CHECK(k3_ram_margin(6 * GiB) == 384 * MiB, "6 GiB: margin %llu MiB",
          (unsigned long long)(k3_ram_margin(6 * GiB) / MiB));
    CHECK(k3_ram_margin(1 * GiB) == 256 * MiB, "1 GiB: the least margin is 256 MiB");
    CHECK(k3_ram_margin(512 * GiB) == 4 * GiB, "512 GiB: the most margin is 4 GiB");
}

int main(void)
{
    cgroup_v1();
    cgroup_v2();
    unreadable();
    shared_box();
    margin();
    return check_result();
}
