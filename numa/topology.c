/* Topology loading, the layout snapshot, drive locality (topology.h). */
#include "numa/topology.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <hwloc.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

struct k3numa_topo {
    hwloc_topology_t h;
    bool real;
    char *sysfs; /* k3numa_topo_set_sysfs's root, NULL: none set */
    struct k3numa_layout layout;
};

static void say(char *buf, size_t len, const char *fmt, ...)
{
    if (!buf || !len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------ layout */

/* The core a PU belongs to; a PU without a Core ancestor counts as its own core. */
static hwloc_obj_t core_of(hwloc_topology_t h, hwloc_obj_t pu)
{
    hwloc_obj_t c = hwloc_get_ancestor_obj_by_type(h, HWLOC_OBJ_CORE, pu);
    return c ? c : pu;
}

static int llc_of(hwloc_obj_t core)
{
    hwloc_obj_t llc = NULL;
    for (hwloc_obj_t o = core->parent; o; o = o->parent)
        if (hwloc_obj_type_is_cache(o->type))
            llc = o;
    return llc ? (int)(llc->gp_index & INT_MAX) : -1;
}

/* PUs usable by placement: on this machine the process's affinity at load time. */
static hwloc_bitmap_t usable_pus(struct k3numa_topo *t)
{
    hwloc_bitmap_t set = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(t->h));
    if (!set)
        return NULL;
    if (t->real) {
        hwloc_bitmap_t bound = hwloc_bitmap_alloc();
        if (bound && hwloc_get_cpubind(t->h, bound, HWLOC_CPUBIND_PROCESS) == 0 &&
            hwloc_bitmap_intersects(bound, set))
            hwloc_bitmap_and(set, set, bound);
        hwloc_bitmap_free(bound);
    }
    return set;
}

static int build_layout(struct k3numa_topo *t)
{
    hwloc_topology_t h = t->h;
    struct k3numa_layout *l = &t->layout;
    int n_pu_objs = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_PU);
    int n_node_objs = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_NUMANODE);
    if (n_pu_objs <= 0 || n_node_objs <= 0)
        return -ENODEV;

    hwloc_bitmap_t usable = usable_pus(t);
    /* Per usable PU, in logical order: its OS index, its core object, its node index. */
    int *pu_os = malloc(sizeof *pu_os * (size_t)n_pu_objs);
    hwloc_obj_t *pu_core = malloc(sizeof *pu_core * (size_t)n_pu_objs);
    int *core_node = malloc(sizeof *core_node * (size_t)n_pu_objs);
    int *core_first = malloc(sizeof *core_first * (size_t)(n_pu_objs + 1));
    hwloc_obj_t *cores = malloc(sizeof *cores * (size_t)n_pu_objs);
    l->nodes = calloc((size_t)n_node_objs, sizeof *l->nodes);
    l->cores = calloc((size_t)n_pu_objs, sizeof *l->cores);
    l->pus = malloc(sizeof *l->pus * (size_t)n_pu_objs);
    int rc = -ENOMEM;
    if (!usable || !pu_os || !pu_core || !core_node || !core_first || !cores || !l->nodes ||
        !l->cores || !l->pus)
        goto out;

    int n = 0;
    for (hwloc_obj_t pu = NULL; (pu = hwloc_get_next_obj_by_type(h, HWLOC_OBJ_PU, pu));) {
        if (!hwloc_bitmap_isset(usable, pu->os_index))
            continue;
        pu_os[n] = (int)pu->os_index;
        pu_core[n] = core_of(h, pu);
        n++;
    }
    rc = -ENODEV;
    if (n == 0)
        goto out;

    /* Distinct cores in order of first appearance (a core's PUs are consecutive in
     * logical order), each with the first NUMA node whose cpuset holds it. */
    int nc = 0;
    for (int i = 0; i < n; i++) {
        if (nc > 0 && pu_core[i] == cores[nc - 1])
            continue;
        cores[nc] = pu_core[i];
        core_first[nc] = i;
        core_node[nc] = 0;
        for (int k = 0; k < n_node_objs; k++) {
            hwloc_obj_t node = hwloc_get_obj_by_type(h, HWLOC_OBJ_NUMANODE, (unsigned)k);
            if (node->cpuset && hwloc_bitmap_intersects(node->cpuset, cores[nc]->cpuset)) {
                core_node[nc] = k;
                break;
            }
        }
        nc++;
    }
    core_first[nc] = n;

    l->n_packages = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_PACKAGE);
    if (l->n_packages < 0)
        l->n_packages = 0;
    l->n_nodes = n_node_objs;
    int cj = 0, pj = 0;
    for (int k = 0; k < n_node_objs; k++) {
        hwloc_obj_t obj = hwloc_get_obj_by_type(h, HWLOC_OBJ_NUMANODE, (unsigned)k);
        struct k3numa_node *nd = &l->nodes[k];
        hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(h, HWLOC_OBJ_PACKAGE, obj);
        nd->os_index = (int)obj->os_index;
        nd->package = pkg ? (int)pkg->logical_index : -1;
        nd->memory_bytes = obj->attr ? obj->attr->numanode.local_memory : 0;
        nd->first_core = cj;
        for (int c = 0; c < nc; c++) {
            if (core_node[c] != k)
                continue;
            struct k3numa_core *co = &l->cores[cj++];
            co->first_pu = pj;
            co->n_pus = core_first[c + 1] - core_first[c];
            co->llc = llc_of(cores[c]);
            for (int i = core_first[c]; i < core_first[c + 1]; i++)
                l->pus[pj++] = pu_os[i];
            nd->n_pus += co->n_pus;
        }
        nd->n_cores = cj - nd->first_core;
    }
    l->n_cores = cj;
    l->n_pus = pj;
    rc = 0;
out:
    hwloc_bitmap_free(usable);
    free(pu_os);
    free(pu_core);
    free(core_node);
    free(core_first);
    free(cores);
    return rc;
}

/* ------------------------------------------------------------------ loading */

/* hwloc unloads its plugins (hwloc_pci.so, ...) when the last topology is destroyed;
 * what libpciaccess allocated is then reachable from no mapped memory, and ASan reports
 * it as a leak at exit (make test-asan).  Keeping the plugins loaded for the life of the
 * process (RTLD_NODELETE) costs nothing and keeps those reports meaningful. */
static int pin_plugin(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    if (info->dlpi_name && strstr(info->dlpi_name, "/hwloc_")) {
        void *h = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
        if (h)
            dlclose(h);
    }
    return 0;
}

static void pin_plugins(void)
{
    dl_iterate_phdr(pin_plugin, NULL);
}

int k3numa_topo_load(struct k3numa_topo **out, enum k3numa_source src, const char *arg)
{
    *out = NULL;
    if (src != K3NUMA_THIS_SYSTEM && !arg)
        return -EINVAL;
    struct k3numa_topo *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    int rc = -ENOMEM;
    if (hwloc_topology_init(&t->h) < 0) {
        free(t);
        return rc;
    }
    /* Before the load, or block devices never appear (and XML ones are dropped). */
    hwloc_topology_set_io_types_filter(t->h, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    rc = -EINVAL;
    if (src == K3NUMA_SYNTHETIC && hwloc_topology_set_synthetic(t->h, arg) < 0)
        goto fail;
    if (src == K3NUMA_XML && hwloc_topology_set_xml(t->h, arg) < 0)
        goto fail;
    if (hwloc_topology_load(t->h) < 0)
        goto fail;
    static pthread_once_t pinned = PTHREAD_ONCE_INIT;
    pthread_once(&pinned, pin_plugins);
    t->real = hwloc_topology_is_thissystem(t->h) != 0;
    rc = build_layout(t);
    if (rc < 0)
        goto fail;
    *out = t;
    return 0;
fail:
    k3numa_topo_destroy(t);
    return rc;
}

void k3numa_topo_destroy(struct k3numa_topo *t)
{
    if (!t)
        return;
    free(t->layout.nodes);
    free(t->layout.cores);
    free(t->layout.pus);
    free(t->sysfs);
    if (t->h)
        hwloc_topology_destroy(t->h);
    free(t);
}

const struct k3numa_layout *k3numa_topo_layout(const struct k3numa_topo *t)
{
    return &t->layout;
}

bool k3numa_topo_is_real(const struct k3numa_topo *t)
{
    return t->real;
}

struct hwloc_topology *k3numa_topo_hwloc(const struct k3numa_topo *t)
{
    return t->h;
}

int k3numa_layout_node_index(const struct k3numa_layout *l, int os_index)
{
    for (int i = 0; i < l->n_nodes; i++)
        if (l->nodes[i].os_index == os_index)
            return i;
    return -1;
}

/* ------------------------------------------------------------------ drives */

int k3numa_topo_set_sysfs(struct k3numa_topo *t, const char *root)
{
    char *copy = root ? strdup(root) : NULL;
    if (root && !copy)
        return -ENOMEM;
    free(t->sysfs);
    t->sysfs = copy;
    return 0;
}

/* Where to read sysfs for the whole-disk step (the path is on this machine). */
static const char *sysfs_for_paths(const struct k3numa_topo *t)
{
    return t->sysfs ? t->sysfs : "/sys";
}

/* Where to read sysfs for stacked devices: only where it describes this topology. */
static const char *sysfs_for_stacks(const struct k3numa_topo *t)
{
    return t->sysfs ? t->sysfs : t->real ? "/sys" : NULL;
}

static hwloc_obj_t find_block_dev(hwloc_topology_t h, const char *dev)
{
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(h, o));) {
        if (o->attr->osdev.type != HWLOC_OBJ_OSDEV_BLOCK)
            continue;
        const char *id = hwloc_obj_get_info_by_name(o, "LinuxDeviceID");
        if ((o->name && strcmp(o->name, dev) == 0) || (id && strcmp(id, dev) == 0))
            return o;
    }
    return NULL;
}

/* The single node of a block OS device, or -1 with the reason. */
static int osdev_node(const struct k3numa_topo *t, hwloc_obj_t o, const char *dev, char *why,
                      size_t why_len)
{
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t->h, o);
    int w = anc && anc->nodeset ? hwloc_bitmap_weight(anc->nodeset) : 0;
    const char *name = o->name ? o->name : dev;
    if (w == 1)
        return hwloc_bitmap_first(anc->nodeset);
    if (w > 1) {
        char list[128];
        hwloc_bitmap_list_snprintf(list, sizeof list, anc->nodeset);
        say(why, why_len, "%s attaches to nodes %s", name, list);
    } else {
        say(why, why_len, "%s has no NUMA locality", name);
    }
    return -1;
}

#define STACK_DEPTH 4

static int lookup_node(const struct k3numa_topo *t, const char *dev, int depth, char *why,
                       size_t why_len);

/* A device hwloc does not list, made of others: an NVMe multipath head (the per-controller
 * paths it lists under multipath/), a dm or md device (its slaves/).  Its node is theirs
 * when they all share one.  Returns the node, or -1 with the reason; *found tells whether
 * the device had any component at all. */
static int stacked_node(const struct k3numa_topo *t, const char *dev, int depth, bool *found,
                        char *why, size_t why_len)
{
    const char *root = sysfs_for_stacks(t);
    *found = false;
    if (!root || depth >= STACK_DEPTH || strchr(dev, '/') || strchr(dev, ':'))
        return -1;
    static const char *const subdirs[] = {"multipath", "slaves"};
    for (size_t s = 0; s < sizeof subdirs / sizeof subdirs[0]; s++) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s/class/block/%s/%s", root, dev, subdirs[s]);
        struct dirent **names;
        int n_names = scandir(dir, &names, NULL, alphasort); /* sorted: stable reasons */
        if (n_names < 0)
            continue;
        int node = -1;
        bool done = false;
        for (int i = 0; i < n_names; i++) {
            const char *sub = names[i]->d_name;
            if (done || sub[0] == '.')
                continue;
            char sub_why[128];
            int n = lookup_node(t, sub, depth + 1, sub_why, sizeof sub_why);
            if (n < 0) {
                say(why, why_len, "%s is on %s: %s", dev, sub, sub_why);
                node = -1;
                done = true;
            } else if (*found && n != node) {
                say(why, why_len, "%s spans nodes %d and %d", dev, node, n);
                node = -1;
                done = true;
            } else {
                node = n;
            }
            *found = true;
        }
        for (int i = 0; i < n_names; i++)
            free(names[i]);
        free(names);
        if (*found)
            return node;
    }
    return -1;
}

/* A partition's whole disk by name, through sysfs; dev itself when it is none. */
static void whole_by_name(const struct k3numa_topo *t, const char *dev, char *out, size_t len)
{
    say(out, len, "%s", dev);
    const char *root = sysfs_for_stacks(t);
    if (!root || strchr(dev, '/') || strchr(dev, ':'))
        return;
    char path[PATH_MAX], real[PATH_MAX];
    snprintf(path, sizeof path, "%s/class/block/%s/partition", root, dev);
    if (access(path, F_OK) != 0)
        return;
    snprintf(path, sizeof path, "%s/class/block/%s/..", root, dev);
    if (!realpath(path, real))
        return;
    const char *base = strrchr(real, '/');
    say(out, len, "%s", base ? base + 1 : real);
}

static int lookup_node(const struct k3numa_topo *t, const char *dev, int depth, char *why,
                       size_t why_len)
{
    char whole[256];
    whole_by_name(t, dev, whole, sizeof whole);
    hwloc_obj_t o = find_block_dev(t->h, whole);
    if (o)
        return osdev_node(t, o, whole, why, why_len);
    bool found;
    int node = stacked_node(t, whole, depth, &found, why, why_len);
    if (!found)
        say(why, why_len, "%s not in the topology", whole);
    return node;
}

int k3numa_topo_device_node(const struct k3numa_topo *t, const char *dev, int *node,
                            char *why, size_t why_len)
{
    say(why, why_len, "%s", "");
    *node = lookup_node(t, dev, 0, why, why_len);
    if (*node >= 0)
        say(why, why_len, "%s", "");
    return 0;
}

static int read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    int rc = fgets(buf, (int)len, f) ? 0 : -EIO;
    fclose(f);
    buf[strcspn(buf, "\n")] = 0;
    return rc;
}

static int whole_disk_in(const char *root, const char *path, char *name, size_t name_len,
                         unsigned *major_out, unsigned *minor_out)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return -errno;
    dev_t dev = S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev;
    if (major(dev) == 0) /* anonymous: tmpfs, overlay, btrfs subvolumes, NFS */
        return -ENODEV;
    char link[PATH_MAX], sys[PATH_MAX], file[PATH_MAX + 16];
    snprintf(link, sizeof link, "%s/dev/block/%u:%u", root, major(dev), minor(dev));
    if (!realpath(link, sys))
        return -ENODEV;
    snprintf(file, sizeof file, "%s/partition", sys);
    if (access(file, F_OK) == 0) {
        char *slash = strrchr(sys, '/');
        if (!slash || slash == sys)
            return -ENODEV;
        *slash = 0;
    }
    unsigned ma, mi;
    char line[64];
    snprintf(file, sizeof file, "%s/dev", sys);
    if (read_line(file, line, sizeof line) < 0 || sscanf(line, "%u:%u", &ma, &mi) != 2)
        return -ENODEV;
    const char *base = strrchr(sys, '/');
    say(name, name_len, "%s", base ? base + 1 : sys);
    if (major_out)
        *major_out = ma;
    if (minor_out)
        *minor_out = mi;
    return 0;
}

int k3numa_whole_disk(const char *path, char *name, size_t name_len, unsigned *major_out,
                      unsigned *minor_out)
{
    return whole_disk_in("/sys", path, name, name_len, major_out, minor_out);
}

int k3numa_topo_path_node(const struct k3numa_topo *t, const char *path, int *node, char *why,
                          size_t why_len)
{
    *node = -1;
    say(why, why_len, "%s", "");
    char name[256], id[32];
    unsigned ma, mi;
    int rc = whole_disk_in(sysfs_for_paths(t), path, name, sizeof name, &ma, &mi);
    if (rc == -ENODEV) {
        say(why, why_len, "not on a block device");
        return 0;
    }
    if (rc < 0)
        return rc;
    snprintf(id, sizeof id, "%u:%u", ma, mi);
    /* By number first: names can be reused by a later device, numbers are what stat saw. */
    if (find_block_dev(t->h, id))
        return k3numa_topo_device_node(t, id, node, why, why_len);
    return k3numa_topo_device_node(t, name, node, why, why_len);
}
