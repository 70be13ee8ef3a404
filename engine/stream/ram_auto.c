/* What this process may use of the machine's memory: see ram_auto.h. */
#include "engine/stream/ram_auto.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct k3_ram_paths k3_ram_paths_system = {
    .proc_cgroup = "/proc/self/cgroup",
    .v2_root = "/sys/fs/cgroup",
    .v1_root = "/sys/fs/cgroup/memory",
    .meminfo = "/proc/meminfo",
};

static const double GIB = 1073741824.0;

/* cgroup v1 writes "no limit" as the largest page count in bytes (9223372036854771712);
 * anything this large is no limit. */
#define NO_LIMIT (1ull << 62)

/* The start of a file, NUL-terminated; false when it cannot be read. */
static bool read_text(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, len - 1, f);
    bool ok = !ferror(f);
    fclose(f);
    buf[n] = 0;
    return ok && n > 0;
}

/* A whole number alone on its line (trailing blanks allowed). */
static bool parse_u64(const char *s, uint64_t *v)
{
    if (*s < '0' || *s > '9')
        return false;
    char *end;
    unsigned long long x = strtoull(s, &end, 10);
    end += strspn(end, " \t");
    if (*end && *end != '\n')
        return false;
    *v = x;
    return true;
}

/* A limit file's value: true with *v for a number below NO_LIMIT; "max" or a huge value
 * is no limit (false), as is a missing file or garbage. */
static bool limit_file(const char *path, uint64_t *v)
{
    char text[64];
    return read_text(path, text, sizeof text) && parse_u64(text, v) && *v < NO_LIMIT;
}

/* The group of one hierarchy in /proc/self/cgroup: v2's "0::PATH", or the v1 line whose
 * controllers include "memory". */
static bool group_of(const char *proc_cgroup, bool v2, char *out, size_t len)
{
    FILE *f = fopen(proc_cgroup, "r");
    if (!f)
        return false;
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/')
            continue;
        *c1 = *c2 = 0;
        const char *ctrl = c1 + 1;
        if (v2)
            found = !strcmp(line, "0") && !*ctrl;
        else
            for (const char *t = ctrl; *t && !found; t += strcspn(t, ","), t += *t == ',')
                found = !strncmp(t, "memory", 6) && (t[6] == ',' || !t[6]);
        if (found)
            snprintf(out, len, "%s", strcmp(c2 + 1, "/") ? c2 + 1 : "");
    }
    fclose(f);
    return found;
}

struct limit {
    uint64_t bytes; /* UINT64_MAX: none found */
    char where[300];
};

static void take(struct limit *l, uint64_t v, const char *file, const char *group)
{
    if (v < l->bytes) {
        l->bytes = v;
        snprintf(l->where, sizeof l->where, "%s of %s", file, *group ? group : "/");
    }
}

/* v2: memory.max of the group and of each ancestor (a parent's limit binds its
 * children), up to the mount's root (which, in a container's namespace, is its group). */
static void v2_limit(const struct k3_ram_paths *p, struct limit *l)
{
    char group[256], path[1024];
    if (!group_of(p->proc_cgroup, true, group, sizeof group))
        return;
    for (;;) {
        uint64_t v;
        snprintf(path, sizeof path, "%s%s/memory.max", p->v2_root, group);
        if (limit_file(path, &v))
            take(l, v, "memory.max", group);
        char *slash = strrchr(group, '/');
        if (!slash)
            return;
        *slash = 0;
    }
}

/* memory.stat's "hierarchical_memory_limit N": the least limit over the group's
 * ancestors. */
static bool hierarchical(const char *dir, uint64_t *v)
{
    char path[1100], text[8192];
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    if (!read_text(path, text, sizeof text))
        return false;
    const char *at = strstr(text, "hierarchical_memory_limit ");
    return at && (at == text || at[-1] == '\n') &&
           parse_u64(at + strlen("hierarchical_memory_limit "), v) && *v < NO_LIMIT;
}

/* v1: the group's memory.limit_in_bytes and hierarchical limit; where the group's folder
 * is not there (a container without a cgroup namespace mounts its own group as the
 * root), the root's. */
static void v1_limit(const struct k3_ram_paths *p, struct limit *l)
{
    char group[256], dir[1024], path[1100];
    if (!group_of(p->proc_cgroup, false, group, sizeof group))
        return;
    snprintf(dir, sizeof dir, "%s%s", p->v1_root, group);
    snprintf(path, sizeof path, "%s/memory.limit_in_bytes", dir);
    FILE *f = fopen(path, "r");
    if (f) {
        fclose(f);
    } else {
        snprintf(dir, sizeof dir, "%s", p->v1_root);
        group[0] = 0;
    }
    uint64_t v;
    snprintf(path, sizeof path, "%s/memory.limit_in_bytes", dir);
    if (limit_file(path, &v))
        take(l, v, "memory.limit_in_bytes", group);
    if (hierarchical(dir, &v))
        take(l, v, "hierarchical_memory_limit", group);
}

static bool mem_available(const char *meminfo, uint64_t *v)
{
    char text[8192];
    if (!read_text(meminfo, text, sizeof text))
        return false;
    const char *at = strstr(text, "MemAvailable:");
    unsigned long long kib;
    char unit[4] = "";
    if (!at || sscanf(at, "MemAvailable: %llu %3s", &kib, unit) != 2 || strcmp(unit, "kB"))
        return false;
    *v = (uint64_t)kib * 1024;
    return *v > 0;
}

void k3_ram_machine_read(struct k3_ram_machine *m, const struct k3_ram_paths *paths,
                         int box_ranks)
{
    *m = (struct k3_ram_machine){.box_ranks = box_ranks > 1 ? box_ranks : 1};
    struct limit cg = {.bytes = UINT64_MAX};
    v2_limit(paths, &cg);
    v1_limit(paths, &cg);
    uint64_t avail = 0;
    bool have_avail = mem_available(paths->meminfo, &avail);
    if (cg.bytes != UINT64_MAX && (!have_avail || cg.bytes <= avail)) {
        m->source = K3_RAM_CGROUP;
        m->bytes = cg.bytes;
        snprintf(m->from, sizeof m->from, "cgroup limit %.2f GiB (%s)", cg.bytes / GIB, cg.where);
    } else if (have_avail) {
        m->source = K3_RAM_AVAILABLE;
        m->bytes = avail;
        snprintf(m->from, sizeof m->from, "MemAvailable %.2f GiB", avail / GIB);
    }
}

uint64_t k3_ram_share(const struct k3_ram_machine *m)
{
    return m->bytes / (uint64_t)m->box_ranks;
}

/* A sixteenth, at least 256 MiB and at most 4 GiB: what the budget does not count and
 * the kernel still charges or needs.  Page tables and io_uring's tables of pinned pages,
 * the page cache of files read without O_DIRECT (the manifest, the tokenizer, a drive
 * that refuses O_DIRECT), socket buffers (serve, mpirun), and the other processes of the
 * group or the box (a shell, mpirun's daemon); MemAvailable itself is an estimate that
 * moves as they run. */
uint64_t k3_ram_margin(uint64_t share)
{
    const uint64_t lo = 256ull << 20, hi = 4ull << 30;
    uint64_t m = share / 16;
    return m < lo ? lo : m > hi ? hi : m;
}

void k3_ram_describe(const struct k3_ram_machine *m, char *out, size_t len)
{
    int n = snprintf(out, len, "%s", m->from);
    if (m->box_ranks > 1 && n >= 0 && (size_t)n < len)
        snprintf(out + n, len - (size_t)n, " / %d ranks on this box", m->box_ranks);
}
