/* A sequence's state in a file: see seq_file.h for the format. */
#include "engine/forward/seq_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine/pack/packed.h"

/* The per-layer sizes of struct k3_seq (scratch.c allocates them; checked against
 * k3_seq_state_bytes below). */
static uint64_t kda_floats(const struct k3_config *c)
{
    return (uint64_t)c->kda_heads * (uint64_t)c->kda_head_dim * (uint64_t)c->kda_head_dim;
}

static uint64_t conv_floats(const struct k3_config *c)
{
    return 3 * (uint64_t)k3_kda_width(c) * (uint64_t)(c->conv_kernel - 1);
}

static uint64_t mla_row_floats(const struct k3_config *c)
{
    return (uint64_t)(c->kv_lora + c->qk_rope);
}

/* Floats of state at pos positions. */
static uint64_t state_floats(const struct k3_config *c, int pos)
{
    uint64_t n = 0;
    for (int l = 0; l < c->n_layers; l++)
        n += c->attn[l] == K3_ATTN_KDA ? kda_floats(c) + conv_floats(c)
                                       : (uint64_t)pos * mla_row_floats(c);
    return n;
}

uint64_t k3_seq_file_bytes(const struct k3_config *c, int pos)
{
    return sizeof(struct k3_seq_file_header) + sizeof(int32_t) * (uint64_t)pos +
           sizeof(float) * ((uint64_t)c->vocab + state_floats(c, pos)) + sizeof(uint64_t);
}

int k3_seq_file_model_of(const struct k3_model *m, struct k3_seq_file_model *out,
                         struct k3_err *err)
{
    out->id = k3_model_id(m);
    out->pack_xxh64 = m->packed && !m->packed->checkpoint ? m->packed->header.model_xxh64 : 0;
    return out->id ? 0 : k3_errf(err, "out of memory");
}

static struct k3_seq_file_header header_for(const struct k3_config *c,
                                            const struct k3_seq_file_model *model, int pos)
{
    struct k3_seq_file_header h = {
        .version = K3_SEQ_FILE_VERSION,
        .header_bytes = sizeof h,
        .file_bytes = k3_seq_file_bytes(c, pos),
        .model_id = model->id,
        .pack_xxh64 = model->pack_xxh64,
        .pos = (uint32_t)pos,
        .n_layers = (uint32_t)c->n_layers,
        .vocab = (uint32_t)c->vocab,
        .kda_floats = kda_floats(c),
        .conv_floats = conv_floats(c),
        .mla_row_floats = mla_row_floats(c),
    };
    memcpy(h.magic, K3_SEQ_FILE_MAGIC, sizeof h.magic);
    return h;
}

/* The pieces of q's state in file order: calls fn(ctx, p, bytes) for each. */
static int each_piece(const struct k3_config *c, const struct k3_seq *q, int pos,
                      int (*fn)(void *ctx, void *p, size_t bytes), void *ctx)
{
    for (int l = 0; l < c->n_layers; l++) {
        int rc = c->attn[l] == K3_ATTN_KDA
                     ? fn(ctx, q->kda_state[l], sizeof(float) * kda_floats(c)) ||
                           fn(ctx, q->conv_ring[l], sizeof(float) * conv_floats(c))
                     : fn(ctx, q->mla_cache[l], sizeof(float) * (size_t)pos * mla_row_floats(c));
        if (rc)
            return -1;
    }
    return 0;
}

/* ---- writing ------------------------------------------------------------------------- */

/* A file being written or read, and the hash of its bytes so far. */
struct hashed {
    int fd;
    const char *name;
    XXH3_state_t *hash;
    struct k3_err *err;
};

static int write_all(int fd, const void *p, size_t bytes, const char *name, struct k3_err *err)
{
    for (const char *at = p; bytes;) {
        ssize_t n = write(fd, at, bytes);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return k3_errf(err, "%s: write failed: %s", name, n < 0 ? strerror(errno) : "no progress");
        at += n;
        bytes -= (size_t)n;
    }
    return 0;
}

static int put(void *ctx, void *p, size_t bytes)
{
    struct hashed *s = ctx;
    XXH3_64bits_update(s->hash, p, bytes);
    return write_all(s->fd, p, bytes, s->name, s->err);
}

int k3_seq_writer_begin(struct k3_seq_writer *w, const char *path, struct k3_err *err)
{
    *w = (struct k3_seq_writer){.path = path, .fd = -1};
    int n = snprintf(w->tmp, sizeof w->tmp, "%s.tmp.%ld", path, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof w->tmp)
        return k3_errf(err, "%s: path too long", path);
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0)
        return k3_errf(err, "%s: cannot write beside it (%s): %s", path, w->tmp, strerror(errno));
    return 0;
}

int k3_seq_writer_save(struct k3_seq_writer *w, const struct k3_config *c,
                       const struct k3_seq_file_model *model, const struct k3_seq *q,
                       const int32_t *ids, const float *logits, struct k3_err *err)
{
    if (w->fd < 0 || w->saved)
        return k3_errf(err, "%s: no temporary file to save into", w->path);
    if (q->pos <= 0 || q->pos > q->max_ctx)
        return k3_errf(err, "%s: a state at position %d is not saved", w->path, q->pos);
    struct k3_seq_file_header h = header_for(c, model, q->pos);
    struct hashed s = {.fd = w->fd, .name = w->tmp, .hash = XXH3_createState(), .err = err};
    if (!s.hash)
        return k3_errf(err, "out of memory");
    XXH3_64bits_reset(s.hash);
    int rc = put(&s, &h, sizeof h) || put(&s, (void *)ids, sizeof(int32_t) * (size_t)q->pos) ||
             put(&s, (void *)logits, sizeof(float) * (size_t)c->vocab) ||
             each_piece(c, q, q->pos, put, &s);
    uint64_t sum = XXH3_64bits_digest(s.hash);
    XXH3_freeState(s.hash);
    if (!rc)
        rc = write_all(w->fd, &sum, sizeof sum, w->tmp, err);
    if (!rc && fsync(w->fd))
        rc = k3_errf(err, "%s: fsync: %s", w->tmp, strerror(errno));
    if (rc)
        return -1;
    w->saved = true;
    return 0;
}

/* fsync of path's folder, so that the rename survives a crash. */
static int sync_folder(const char *path, struct k3_err *err)
{
    char buf[K3_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    const char *dir = dirname(buf);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return k3_errf(err, "%s: %s", dir, strerror(errno));
    int rc = fsync(fd) && errno != EINVAL ? k3_errf(err, "%s: fsync: %s", dir, strerror(errno)) : 0;
    close(fd);
    return rc;
}

int k3_seq_writer_end(struct k3_seq_writer *w, bool abandon, struct k3_err *err)
{
    if (!w->path || w->fd < 0)
        return 0;
    bool commit = w->saved && !abandon;
    int rc = close(w->fd);
    w->fd = -1;
    if (commit && rc)
        rc = k3_errf(err, "%s: close: %s", w->tmp, strerror(errno));
    else if (commit && rename(w->tmp, w->path))
        rc = k3_errf(err, "%s: %s", w->path, strerror(errno));
    else if (commit)
        return sync_folder(w->path, err);
    unlink(w->tmp);
    return commit ? rc : 0;
}

/* ---- reading ------------------------------------------------------------------------- */

static int get(void *ctx, void *p, size_t bytes)
{
    struct hashed *s = ctx;
    for (char *at = p; bytes;) {
        ssize_t n = read(s->fd, at, bytes);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return k3_errf(s->err, "%s: %s", s->name,
                           n < 0 ? strerror(errno) : "truncated (shorter than it was when opened)");
        XXH3_64bits_update(s->hash, at, (size_t)n);
        at += n;
        bytes -= (size_t)n;
    }
    return 0;
}

/* The header read and checked against this model and sequence, before anything else is. */
static int check_header(const struct k3_seq_file_header *h, uint64_t size, const char *path,
                        const struct k3_config *c, const struct k3_seq_file_model *model,
                        struct k3_err *err)
{
    if (size < sizeof h->magic || memcmp(h->magic, K3_SEQ_FILE_MAGIC, sizeof h->magic))
        return k3_errf(err, "%s: not a k3-uring prompt cache (no magic)", path);
    if (size < sizeof *h)
        return k3_errf(err, "%s: truncated: %llu bytes, shorter than its header", path,
                       (unsigned long long)size);
    if (h->version != K3_SEQ_FILE_VERSION)
        return k3_errf(err, "%s: format version %u, this build reads version %d", path,
                       h->version, K3_SEQ_FILE_VERSION);
    if (h->model_id != model->id)
        return k3_errf(err, "%s: saved for model %016llx, this is %016llx", path,
                       (unsigned long long)h->model_id, (unsigned long long)model->id);
    if (h->pack_xxh64 && model->pack_xxh64 && h->pack_xxh64 != model->pack_xxh64)
        return k3_errf(err, "%s: saved for model %016llx packed as %016llx, this is packed as "
                       "%016llx (the same small tensors, other weights)", path,
                       (unsigned long long)h->model_id, (unsigned long long)h->pack_xxh64,
                       (unsigned long long)model->pack_xxh64);
    struct k3_seq_file_header want = header_for(c, model, (int)(h->pos > INT32_MAX ? 0 : h->pos));
    want.pack_xxh64 = h->pack_xxh64;
    if (h->pos == 0 || h->pos > INT32_MAX || memcmp(h, &want, sizeof *h))
        return k3_errf(err, "%s: damaged (its header does not describe a state of this model)",
                       path);
    if (size != h->file_bytes)
        return k3_errf(err, "%s: %s: %llu bytes, its header says %llu", path,
                       size < h->file_bytes ? "truncated" : "damaged", (unsigned long long)size,
                       (unsigned long long)h->file_bytes);
    return 0;
}

/* bytes of the file read through a bounce buffer, hashed: a state not loaded is still
 * checked. */
static int skip(struct hashed *s, uint64_t bytes)
{
    size_t cap = bytes < ((size_t)1 << 20) ? (size_t)bytes : (size_t)1 << 20;
    void *buf = malloc(cap ? cap : 1);
    if (!buf)
        return k3_errf(s->err, "out of memory");
    int rc = 0;
    for (uint64_t left = bytes; !rc && left; left -= cap < left ? cap : left)
        rc = get(s, buf, cap < left ? cap : (size_t)left);
    free(buf);
    return rc;
}

/* Everything after the header, hashed, and the hash compared: the ids, then (when they
 * are a prefix of ids[0, n)) the logits row and the state into logits and q, else read
 * past. */
static int read_body(struct hashed *s, const struct k3_seq_file_header *h,
                     const struct k3_config *c, struct k3_seq *q, const int32_t *ids, int n,
                     float *logits, bool *prefix)
{
    int32_t *saved = malloc(sizeof(int32_t) * h->pos);
    if (!saved)
        return k3_errf(s->err, "out of memory");
    int rc = get(s, saved, sizeof(int32_t) * h->pos);
    *prefix = !rc && h->pos <= (uint32_t)n && !memcmp(saved, ids, sizeof(int32_t) * h->pos);
    free(saved);
    if (rc)
        return -1;
    if (*prefix && h->pos > (uint32_t)q->max_ctx)
        return k3_errf(s->err, "%s: its prompt of %u tokens is longer than the context (%d "
                       "positions)", s->name, h->pos, q->max_ctx);
    uint64_t rest = h->file_bytes - sizeof *h - sizeof(int32_t) * h->pos - sizeof(uint64_t);
    if (*prefix ? get(s, logits, sizeof(float) * (size_t)c->vocab) ||
                      each_piece(c, q, (int)h->pos, get, s)
                : skip(s, rest))
        return -1;
    uint64_t sum, want = XXH3_64bits_digest(s->hash);
    if (get(s, &sum, sizeof sum))
        return -1;
    if (sum != want)
        return k3_errf(s->err, "%s: damaged (checksum %016llx, its contents give %016llx)",
                       s->name, (unsigned long long)sum, (unsigned long long)want);
    return 0;
}

int k3_seq_file_load(const char *path, const struct k3_config *c,
                     const struct k3_seq_file_model *model, struct k3_seq *q, const int32_t *ids,
                     int n, float *logits, enum k3_seq_file_found *found, int *saved_pos,
                     struct k3_err *err)
{
    *found = K3_SEQ_FILE_NONE;
    *saved_pos = 0;
    /* The sizes above are struct k3_seq's own. */
    if (k3_seq_state_bytes(c, q->max_ctx) != sizeof(float) * state_floats(c, q->max_ctx))
        return k3_errf(err, "%s: this build's sequence state does not match seq_file.c", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        return 0;
    if (fd < 0)
        return k3_errf(err, "%s: %s", path, strerror(errno));
    struct k3_seq_file_header h;
    memset(&h, 0, sizeof h);
    struct stat st;
    struct hashed s = {.fd = fd, .name = path, .hash = XXH3_createState(), .err = err};
    bool prefix = false;
    int rc = fstat(fd, &st) ? k3_errf(err, "%s: %s", path, strerror(errno))
             : !s.hash      ? k3_errf(err, "out of memory")
                            : 0;
    if (!rc) {
        XXH3_64bits_reset(s.hash);
        size_t head = (uint64_t)st.st_size < sizeof h ? (size_t)st.st_size : sizeof h;
        rc = get(&s, &h, head) ||
             check_header(&h, (uint64_t)st.st_size, path, c, model, err);
    }
    if (!rc)
        rc = read_body(&s, &h, c, q, ids, n, logits, &prefix);
    if (!rc) {
        *saved_pos = (int)h.pos;
        *found = prefix ? K3_SEQ_FILE_RESUMED : K3_SEQ_FILE_OTHER_PROMPT;
        q->pos = prefix ? (int)h.pos : 0;
    }
    if (rc && prefix)
        k3_seq_reset(q, c);
    XXH3_freeState(s.hash);
    close(fd);
    return rc ? -1 : 0;
}
