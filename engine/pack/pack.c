#include "engine/pack/pack.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine/model/checkpoint.h"
#include "engine/base/files.h"
#include "engine/model/model.h"
#include "engine/pack/pack_format.h"
#include "iouring/file.h"

/* Room for a manifest beyond the data, checked with the free space. */
#define MANIFEST_SLACK (1u << 20)

/* One contiguous run of an object's logical bytes, taken from a checkpoint tensor. */
struct extent {
    uint64_t at, len;
    const struct k3_ckpt_tensor *t;
};

struct packer {
    const struct k3_pack_opts *o;
    struct k3_config cfg;
    struct k3_checkpoint *ck;
    struct k3_ckpt_plan plan;
    struct k3_record_layout rec;
    int n_drives;
    struct k3io_file *files;       /* [n_drives] data files */
    uint64_t *data_bytes;          /* [n_drives] */
    struct k3_pack_object *objects;
    struct k3_pack_piece *pieces;
    struct k3_pack_replica *replicas; /* [n_pieces] with --replicas 2, else NULL */
    uint64_t n_objects, n_pieces, n_trunk;
    uint8_t *buf;                  /* one piece */
    uint64_t buf_bytes;
    char *config_text, *tiktoken, *tokconfig;
    size_t config_len, tiktoken_len, tokconfig_len;
    /* progress */
    uint64_t total_bytes, done_bytes;
    double start, last_report;
    bool tty;
    bool warned_buffered;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void progress(struct packer *pk, const char *phase, bool final)
{
    double t = now(), el = t - pk->start;
    if (!pk->tty || !pk->o->progress) {
        if (final)
            fprintf(stderr, "pack: %s: %.2f GB in %.1f s (%.0f MB/s)\n", phase,
                    pk->done_bytes / 1e9, el, el > 0 ? pk->done_bytes / 1e6 / el : 0);
        return;
    }
    if (!final && t - pk->last_report < 0.25)
        return;
    pk->last_report = t;
    double frac = pk->total_bytes ? (double)pk->done_bytes / pk->total_bytes : 1;
    double rate = el > 0 ? pk->done_bytes / el : 0;
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++)
        bar[i] = i < fill ? '#' : ' ';
    bar[30] = 0;
    fprintf(stderr, "\rpack: [%s] %5.1f%% %.2f/%.2f GB %4.0f MB/s ETA %4.0f s ", bar, 100 * frac,
            pk->done_bytes / 1e9, pk->total_bytes / 1e9, rate / 1e6,
            rate > 0 ? (pk->total_bytes - pk->done_bytes) / rate : 0);
    if (final)
        fputc('\n', stderr);
}

/* ---- planning ------------------------------------------------------------------- */

/* The extents of object o, in logical order; returns how many (at most cap). */
static int object_extents(const struct packer *pk, uint64_t o, struct extent *ex, int cap)
{
    int n = 0;
    if (o < pk->n_trunk) {
        const struct k3_trunk_layout *t = &pk->plan.layout;
        for (int i = 0; i < pk->plan.n_specs && n < cap; i++)
            if (t->segment[i] == (int)o)
                ex[n++] = (struct extent){t->offset[i], pk->plan.trunk[i]->t->nbytes,
                                          pk->plan.trunk[i]};
        return n;
    }
    const struct k3_pack_object *x = &pk->objects[o];
    const struct k3_expert_loc *loc =
        &pk->plan.experts[(size_t)x->layer * pk->cfg.n_experts + (size_t)x->expert];
    for (int p = 0; p < K3_EXPERT_PARTS; p++)
        ex[n++] = (struct extent){pk->rec.off[p], pk->rec.len[p], loc->part[p]};
    return n;
}

static int plan(struct packer *pk, struct k3_err *err)
{
    const struct k3_config *c = &pk->cfg;
    uint32_t N = (uint32_t)pk->n_drives;
    uint64_t record_piece = k3_pack_record_piece_bytes(
        pk->rec.bytes, pk->o->whole_records ? 0 : pk->o->chunk ? pk->o->chunk
                                                               : (pk->rec.bytes + N - 1) / N,
        N);
    /* Trunk segments use the stripe unit of a striped record (whole-record packs too). */
    uint64_t trunk_piece = pk->o->chunk ? k3_pack_round_up(pk->o->chunk, K3_PACK_ALIGN)
                                        : k3_pack_record_piece_bytes(pk->rec.bytes,
                                                                     (pk->rec.bytes + N - 1) / N, N);
    pk->n_trunk = (uint64_t)pk->plan.layout.n_segments;
    uint64_t n_records = (uint64_t)k3_moe_layer_count(c) * (uint64_t)c->n_experts;
    pk->n_objects = pk->n_trunk + n_records;
    pk->objects = calloc(pk->n_objects, sizeof *pk->objects);
    if (!pk->objects)
        return k3_errf(err, "out of memory planning %llu objects",
                       (unsigned long long)pk->n_objects);
    uint64_t n_pieces = 0;
    for (uint64_t o = 0; o < pk->n_objects; o++) {
        struct k3_pack_object *x = &pk->objects[o];
        if (o < pk->n_trunk) {
            x->bytes = pk->plan.layout.segment_bytes[o];
            x->piece_bytes = (uint32_t)trunk_piece;
            x->layer = (int32_t)o - 1;
            x->expert = -1;
        } else {
            uint64_t r = o - pk->n_trunk;
            int moe = (int)(r / (uint64_t)c->n_experts), l = 0;
            for (int k = -1; l < c->n_layers; l++)
                if (k3_layer_is_moe(c, l) && ++k == moe)
                    break;
            x->bytes = pk->rec.bytes;
            x->piece_bytes = (uint32_t)record_piece;
            x->layer = l;
            x->expert = (int32_t)(r % (uint64_t)c->n_experts);
        }
        if (!x->bytes) /* an empty segment still gets one (empty) piece */
            x->n_pieces = 1;
        else
            x->n_pieces = (uint32_t)((x->bytes + x->piece_bytes - 1) / x->piece_bytes);
        x->first_piece = n_pieces;
        n_pieces += x->n_pieces;
    }
    pk->n_pieces = n_pieces;
    pk->pieces = calloc(n_pieces + 1, sizeof *pk->pieces);
    pk->data_bytes = calloc(N, sizeof *pk->data_bytes);
    if (!pk->pieces || !pk->data_bytes)
        return k3_errf(err, "out of memory planning %llu pieces", (unsigned long long)n_pieces);
    /* A drive's pieces of one object sit back to back: piece j is the (j / N)-th of its
     * drive's run, and every piece but the object's last is piece_bytes long. */
    uint64_t *run = calloc(N, sizeof *run);
    if (!run)
        return k3_errf(err, "out of memory");
    for (uint64_t o = 0; o < pk->n_objects; o++) {
        const struct k3_pack_object *x = &pk->objects[o];
        memset(run, 0, N * sizeof *run);
        for (uint32_t j = 0; j < x->n_pieces; j++) {
            struct k3_pack_piece *pc = &pk->pieces[x->first_piece + j];
            pc->drive = k3_pack_piece_drive(o, j, N);
            pc->bytes = j + 1 < x->n_pieces ? x->piece_bytes
                                            : (uint32_t)(x->bytes - (uint64_t)j * x->piece_bytes);
            pc->offset = pk->data_bytes[pc->drive] + (uint64_t)(j / N) * x->piece_bytes;
            run[pc->drive] += k3_pack_round_up(pc->bytes, K3_PACK_ALIGN);
        }
        for (uint32_t d = 0; d < N; d++)
            pk->data_bytes[d] += run[d];
    }
    /* Replicas: the same layout again after every primary, each piece on the next drive. */
    if (pk->o->replicas > 1) {
        pk->replicas = calloc(pk->n_pieces + 1, sizeof *pk->replicas);
        if (!pk->replicas) {
            free(run);
            return k3_errf(err, "out of memory planning replicas");
        }
        for (uint64_t o = 0; o < pk->n_objects; o++) {
            const struct k3_pack_object *x = &pk->objects[o];
            memset(run, 0, N * sizeof *run);
            for (uint32_t j = 0; j < x->n_pieces; j++) {
                const struct k3_pack_piece *pc = &pk->pieces[x->first_piece + j];
                struct k3_pack_replica *rp = &pk->replicas[x->first_piece + j];
                rp->drive = (pc->drive + 1) % N;
                rp->offset = pk->data_bytes[rp->drive] + run[rp->drive];
                run[rp->drive] += k3_pack_round_up(pc->bytes, K3_PACK_ALIGN);
            }
            for (uint32_t d = 0; d < N; d++)
                pk->data_bytes[d] += run[d];
        }
    }
    free(run);
    pk->buf_bytes = trunk_piece > record_piece ? trunk_piece : record_piece;
    pk->buf = k3io_alloc(pk->buf_bytes);
    pk->total_bytes = 0;
    for (uint64_t o = 0; o < pk->n_objects; o++)
        pk->total_bytes += pk->objects[o].bytes;
    return pk->buf ? 0 : k3_errf(err, "out of memory");
}

/* ---- the drives ------------------------------------------------------------------ */

/* Everything that can be checked before writing: a writable folder with room for the
 * plan, on every drive. */
static int check_drives(struct packer *pk, struct k3_err *err)
{
    for (int d = 0; d < pk->n_drives; d++) {
        const char *dir = pk->o->drives[d];
        struct stat st;
        if (stat(dir, &st) || !S_ISDIR(st.st_mode))
            return k3_errf(err, "drive %s: %s", dir, errno ? strerror(errno) : "not a folder");
        if (access(dir, W_OK))
            return k3_errf(err, "drive %s: not writable: %s", dir, strerror(errno));
        for (int e = 0; e < d; e++)
            if (!strcmp(pk->o->drives[e], dir))
                return k3_errf(err, "drive %s: given twice", dir);
        struct statvfs vfs;
        if (statvfs(dir, &vfs))
            return k3_errf(err, "drive %s: %s", dir, strerror(errno));
        /* An old data file's space comes back when it is replaced. */
        char path[K3_PATH_MAX];
        uint64_t reusable = 0;
        if (!k3_path_join(path, sizeof path, dir, K3_PACK_DATA_FILE, NULL) && !stat(path, &st))
            reusable = (uint64_t)st.st_blocks * 512;
        uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize + reusable;
        uint64_t need = pk->data_bytes[d] + MANIFEST_SLACK +
                        pk->n_pieces * sizeof(struct k3_pack_piece);
        /* A filesystem without a size (ramfs reports zero blocks) cannot be checked. */
        if (vfs.f_blocks && avail < need)
            return k3_errf(err, "drive %s: needs %.1f MB, %.1f MB free", dir, need / 1e6,
                           avail / 1e6);
    }
    return 0;
}

static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) ? -errno : 0;
    close(fd);
    return rc;
}

/* Removes any old manifest first (made durable), so that from here until the new
 * manifests land, no drive opens as a model. */
static int open_drives(struct packer *pk, struct k3_err *err)
{
    pk->files = calloc((size_t)pk->n_drives, sizeof *pk->files);
    if (!pk->files)
        return k3_errf(err, "out of memory");
    for (int d = 0; d < pk->n_drives; d++)
        pk->files[d].fd = -1;
    for (int d = 0; d < pk->n_drives; d++) {
        const char *dir = pk->o->drives[d];
        char path[K3_PATH_MAX];
        if (k3_path_join(path, sizeof path, dir, K3_PACK_MANIFEST_FILE, err))
            return -1;
        if (unlink(path) && errno != ENOENT)
            return k3_errf(err, "drive %s: removing the old manifest: %s", dir, strerror(errno));
        int e = sync_dir(dir);
        if (e)
            return k3_errf(err, "drive %s: %s", dir, strerror(-e));
        if (k3_path_join(path, sizeof path, dir, K3_PACK_DATA_FILE, err))
            return -1;
        /* Opened for O_DIRECT to learn whether the drive allows it (the engine reads it
         * that way), then written through the page cache: buffered writes measured
         * faster here (bench/pack.sh), and the data is synced before the manifest. */
        e = k3io_open(&pk->files[d], path, O_RDWR | O_CREAT | O_TRUNC, true);
        if (e)
            return k3_errf(err, "drive %s: %s: %s", dir, path, strerror(-e));
        if (!pk->files[d].direct)
            fprintf(stderr, "pack: warning: drive %s refuses O_DIRECT; the engine will read it "
                            "through the page cache\n", dir);
        else if (fcntl(pk->files[d].fd, F_SETFL, fcntl(pk->files[d].fd, F_GETFL) & ~O_DIRECT))
            return k3_errf(err, "drive %s: %s", dir, strerror(errno));
        if (fallocate(pk->files[d].fd, 0, 0, (off_t)pk->data_bytes[d]) && errno != EOPNOTSUPP)
            return k3_errf(err, "drive %s: reserving %.2f GB: %s", dir, pk->data_bytes[d] / 1e9,
                           strerror(errno));
        if (ftruncate(pk->files[d].fd, (off_t)pk->data_bytes[d]))
            return k3_errf(err, "drive %s: %s", dir, strerror(errno));
    }
    return 0;
}

/* ---- streaming the input ----------------------------------------------------------- */

/* Fills dst with logical bytes [at, at+len) of object o; gaps between tensors are zero. */
static int fill(struct packer *pk, uint64_t o, uint64_t at, uint64_t len, uint8_t *dst,
                struct k3_err *err)
{
    struct extent ex[64];
    int n = object_extents(pk, o, ex, 64);
    memset(dst, 0, len);
    for (int i = 0; i < n; i++) {
        uint64_t a = ex[i].at > at ? ex[i].at : at;
        uint64_t b = ex[i].at + ex[i].len < at + len ? ex[i].at + ex[i].len : at + len;
        if (a < b && k3_ckpt_read(pk->ck, ex[i].t, dst + (a - at), a - ex[i].at, b - a, err))
            return -1;
    }
    return 0;
}

static int write_objects(struct packer *pk, struct k3_err *err)
{
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return k3_errf(err, "out of memory");
    int rc = 0;
    for (uint64_t o = 0; !rc && o < pk->n_objects; o++) {
        struct k3_pack_object *x = &pk->objects[o];
        XXH3_64bits_reset(st);
        for (uint32_t j = 0; !rc && j < x->n_pieces; j++) {
            struct k3_pack_piece *pc = &pk->pieces[x->first_piece + j];
            rc = fill(pk, o, (uint64_t)j * x->piece_bytes, pc->bytes, pk->buf, err);
            if (rc)
                break;
            pc->xxh64 = XXH3_64bits(pk->buf, pc->bytes);
            XXH3_64bits_update(st, pk->buf, pc->bytes);
            size_t len = (size_t)k3_pack_round_up(pc->bytes, K3_PACK_ALIGN);
            memset(pk->buf + pc->bytes, 0, len - pc->bytes);
            int e = k3io_pwrite_full(&pk->files[pc->drive], pk->buf, len, pc->offset);
            if (e)
                rc = k3_errf(err, "drive %s: writing %zu bytes at offset %llu: %s",
                             pk->o->drives[pc->drive], len, (unsigned long long)pc->offset,
                             strerror(-e));
            const struct k3_pack_replica *rp =
                pk->replicas ? &pk->replicas[x->first_piece + j] : NULL;
            if (!rc && rp && (e = k3io_pwrite_full(&pk->files[rp->drive], pk->buf, len, rp->offset)))
                rc = k3_errf(err, "drive %s: writing a replica at offset %llu: %s",
                             pk->o->drives[rp->drive], (unsigned long long)rp->offset,
                             strerror(-e));
            pk->done_bytes += pc->bytes;
            progress(pk, "data", false);
        }
        x->xxh64 = XXH3_64bits_digest(st);
    }
    XXH3_freeState(st);
    for (int d = 0; !rc && d < pk->n_drives; d++)
        if (fdatasync(pk->files[d].fd))
            rc = k3_errf(err, "drive %s: sync: %s", pk->o->drives[d], strerror(errno));
    if (!rc)
        progress(pk, "data", true);
    return rc;
}

/* ---- manifests ---------------------------------------------------------------------- */

struct blob {
    uint8_t *data;
    size_t len, cap;
};

static int put(struct blob *b, const void *p, size_t len)
{
    size_t need = (b->len + len + 7) / 8 * 8;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < need)
            cap *= 2;
        uint8_t *nd = realloc(b->data, cap);
        if (!nd)
            return -1;
        b->data = nd;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, len);
    memset(b->data + b->len + len, 0, need - b->len - len);
    b->len = need;
    return 0;
}

/* The tensor table and its names section. */
static int tensor_tables(struct packer *pk, struct blob *tensors, struct blob *names)
{
    int rc = 0;
    uint32_t at = 0;
    for (int i = 0; !rc && i < pk->plan.n_specs; i++) {
        const struct k3_st_tensor *t = pk->plan.trunk[i]->t;
        struct k3_pack_tensor pt = {
            .offset = pk->plan.layout.offset[i],
            .bytes = t->nbytes,
            .object = (uint32_t)pk->plan.layout.segment[i],
            .dtype = (uint32_t)t->dtype,
            .ndim = (uint32_t)t->ndim,
            .name_offset = at,
        };
        for (int d = 0; d < t->ndim && d < 3; d++)
            pt.shape[d] = t->shape[d];
        size_t len = strlen(t->name) + 1;
        /* names are packed without padding: append raw */
        if (names->len + len > names->cap) {
            size_t cap = names->cap ? names->cap : 1 << 16;
            while (cap < names->len + len)
                cap *= 2;
            uint8_t *nd = realloc(names->data, cap);
            if (!nd)
                return -1;
            names->data = nd;
            names->cap = cap;
        }
        memcpy(names->data + names->len, t->name, len);
        names->len += len;
        at += (uint32_t)len;
        rc = put(tensors, &pt, sizeof pt);
    }
    return rc;
}

static int write_manifests(struct packer *pk, struct k3_err *err)
{
    struct blob tensors = {0}, names = {0};
    if (tensor_tables(pk, &tensors, &names)) {
        free(tensors.data);
        free(names.data);
        return k3_errf(err, "out of memory");
    }
    struct {
        uint32_t kind;
        const void *p;
        size_t len;
    } secs[] = {
        {K3_SEC_CONFIG, pk->config_text, pk->config_len},
        {K3_SEC_TIKTOKEN, pk->tiktoken, pk->tiktoken_len},
        {K3_SEC_TOKCONFIG, pk->tokconfig, pk->tokconfig_len},
        {K3_SEC_OBJECTS, pk->objects, pk->n_objects * sizeof *pk->objects},
        {K3_SEC_PIECES, pk->pieces, pk->n_pieces * sizeof *pk->pieces},
        {K3_SEC_TENSORS, tensors.data, tensors.len},
        {K3_SEC_NAMES, names.data, names.len},
        {K3_SEC_REPLICAS, pk->replicas, pk->replicas ? pk->n_pieces * sizeof *pk->replicas : 0},
    };
    int n_secs = (int)(sizeof secs / sizeof secs[0]) - (pk->replicas ? 0 : 1);
    struct k3_pack_header h = {0};
    memcpy(h.magic, K3_PACK_MAGIC, sizeof h.magic);
    h.version = K3_PACK_VERSION;
    h.header_bytes = sizeof h;
    h.drive_count = (uint32_t)pk->n_drives;
    h.chunk_bytes = pk->o->whole_records ? 0 : pk->objects[pk->n_trunk < pk->n_objects ? pk->n_trunk : 0].piece_bytes;
    h.n_objects = pk->n_objects;
    h.n_pieces = pk->n_pieces;
    h.n_tensors = (uint64_t)pk->plan.n_specs;
    h.n_trunk_objects = (uint32_t)pk->n_trunk;
    h.n_sections = (uint32_t)n_secs;
    if (getrandom(h.pack_id, sizeof h.pack_id, 0) != (ssize_t)sizeof h.pack_id)
        return k3_errf(err, "getrandom: %s", strerror(errno));
    struct blob body = {0};
    int rc = 0;
    uint64_t off = sizeof h;
    XXH64_state_t *sec_hash = XXH64_createState(), *model_hash = XXH64_createState();
    XXH64_reset(sec_hash, 0);
    XXH64_reset(model_hash, 0);
    XXH64_update(model_hash, pk->config_text, pk->config_len);
    for (uint64_t o = 0; o < pk->n_objects; o++)
        XXH64_update(model_hash, &pk->objects[o].xxh64, sizeof pk->objects[o].xxh64);
    h.model_xxh64 = XXH64_digest(model_hash);
    for (int i = 0; !rc && i < n_secs; i++) {
        h.sections[i] = (struct k3_pack_section){secs[i].kind, 0, off + body.len, secs[i].len};
        XXH64_update(sec_hash, secs[i].p, secs[i].len);
        rc = put(&body, secs[i].p ? secs[i].p : "", secs[i].len) ? k3_errf(err, "out of memory") : 0;
    }
    h.sections_xxh64 = XXH64_digest(sec_hash);
    h.manifest_bytes = sizeof h + body.len;
    XXH64_freeState(sec_hash);
    XXH64_freeState(model_hash);

    for (int d = 0; !rc && d < pk->n_drives; d++) {
        const char *dir = pk->o->drives[d];
        h.drive_index = (uint32_t)d;
        h.data_bytes = pk->data_bytes[d];
        h.manifest_xxh64 = 0;
        XXH64_state_t *mh = XXH64_createState();
        XXH64_reset(mh, 0);
        XXH64_update(mh, &h, sizeof h);
        XXH64_update(mh, body.data, body.len);
        h.manifest_xxh64 = XXH64_digest(mh);
        XXH64_freeState(mh);
        char tmp[K3_PATH_MAX], final[K3_PATH_MAX];
        if (k3_path_join(tmp, sizeof tmp, dir, K3_PACK_MANIFEST_FILE ".partial", err) ||
            k3_path_join(final, sizeof final, dir, K3_PACK_MANIFEST_FILE, err)) {
            rc = -1;
            break;
        }
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        struct k3io_file f = {.fd = fd};
        int e = fd < 0 ? -errno : k3io_pwrite_full(&f, &h, sizeof h, 0);
        if (!e)
            e = k3io_pwrite_full(&f, body.data, body.len, sizeof h);
        if (!e && fsync(fd))
            e = -errno;
        if (fd >= 0)
            close(fd);
        if (!e && rename(tmp, final))
            e = -errno;
        if (!e)
            e = sync_dir(dir);
        if (e)
            rc = k3_errf(err, "drive %s: writing the manifest: %s", dir, strerror(-e));
    }
    free(body.data);
    free(tensors.data);
    free(names.data);
    return rc;
}

/* ---- the whole job ------------------------------------------------------------------- */

static int read_optional(const char *dir, const char *file, char **text, size_t *len,
                         struct k3_err *err)
{
    char path[K3_PATH_MAX];
    if (k3_path_join(path, sizeof path, dir, file, err))
        return -1;
    if (access(path, F_OK)) {
        *text = NULL;
        *len = 0;
        return 0;
    }
    return k3_read_small_file(path, text, len, err);
}

int k3_pack(const struct k3_pack_opts *o, struct k3_err *err)
{
    struct packer pk = {.o = o, .n_drives = o->n_drives, .tty = isatty(2) != 0};
    pk.start = pk.last_report = now();
    char path[K3_PATH_MAX];
    int rc = k3_path_join(path, sizeof path, o->checkpoint, "config.json", err);
    if (!rc)
        rc = k3_read_small_file(path, &pk.config_text, &pk.config_len, err);
    if (!rc)
        rc = k3_config_parse(&pk.cfg, path, pk.config_text, pk.config_len, err);
    if (!rc)
        rc = read_optional(o->checkpoint, "tiktoken.model", &pk.tiktoken, &pk.tiktoken_len, err);
    if (!rc)
        rc = read_optional(o->checkpoint, "tokenizer_config.json", &pk.tokconfig,
                           &pk.tokconfig_len, err);
    if (!rc)
        rc = k3_ckpt_open(&pk.ck, o->checkpoint, err);
    /* The input is read once, front to back within each shard: ask for deep readahead. */
    for (int s = 0; !rc && s < pk.ck->n_shards; s++)
        posix_fadvise(pk.ck->shards[s].fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    if (!rc)
        rc = k3_ckpt_plan_init(&pk.plan, pk.ck, &pk.cfg, err);
    if (!rc) {
        k3_record_layout_init(&pk.rec, &pk.cfg);
        rc = plan(&pk, err);
    }
    if (!rc && o->replicas > 1 && o->n_drives < 2)
        rc = k3_errf(err, "--replicas 2 needs at least 2 drives (a copy goes to another drive)");
    if (!rc)
        rc = check_drives(&pk, err);
    if (!rc) {
        fprintf(stderr, "pack: %llu objects in %llu pieces over %d drives, record %llu B in "
                        "pieces of %u B\n",
                (unsigned long long)pk.n_objects, (unsigned long long)pk.n_pieces, pk.n_drives,
                (unsigned long long)pk.rec.bytes,
                pk.n_objects > pk.n_trunk ? pk.objects[pk.n_trunk].piece_bytes : 0);
        rc = open_drives(&pk, err);
    }
    if (!rc)
        rc = write_objects(&pk, err);
    if (!rc)
        rc = write_manifests(&pk, err);
    if (!rc)
        fprintf(stderr, "pack: done: %.2f GB in %.1f s\n", pk.total_bytes / 1e9, now() - pk.start);
    for (int d = 0; pk.files && d < pk.n_drives; d++)
        k3io_close(&pk.files[d]);
    free(pk.files);
    free(pk.data_bytes);
    free(pk.objects);
    free(pk.pieces);
    free(pk.replicas);
    free(pk.buf);
    free(pk.config_text);
    free(pk.tiktoken);
    free(pk.tokconfig);
    k3_ckpt_plan_free(&pk.plan);
    k3_ckpt_close(pk.ck);
    k3_config_free(&pk.cfg);
    return rc;
}
