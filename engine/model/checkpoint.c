#include "engine/model/checkpoint.h"

#include "engine/base/files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *join(const char *dir, const char *file)
{
    size_t n = strlen(dir) + strlen(file) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, file);
    return p;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct k3_ckpt_tensor *)a)->t->name,
                  ((const struct k3_ckpt_tensor *)b)->t->name);
}

static int open_shard(struct k3_shard *s, const char *dir, const char *file, struct k3_err *err)
{
    s->fd = -1;
    s->file = strdup(file);
    s->path = join(dir, file);
    if (!s->file || !s->path)
        return k3_errf(err, "out of memory");
    s->fd = open(s->path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (s->fd < 0 || fstat(s->fd, &st))
        return k3_errf(err, "%s: %s", s->path, strerror(errno));
    s->size = (uint64_t)st.st_size;
    return k3_st_read_header(&s->header, s->path, s->fd, s->size, err);
}

/* Position of an already opened shard by file name, or -1. */
static int shard_index(struct k3_checkpoint *ck, const char *file)
{
    for (int i = 0; i < ck->n_shards; i++)
        if (!strcmp(ck->shards[i].file, file))
            return i;
    return -1;
}

static int open_indexed(struct k3_checkpoint *ck, const char *index_path, struct k3_err *err)
{
    char *text;
    size_t len;
    if (k3_read_small_file(index_path, &text, &len, err))
        return -1;
    struct k3_st_index_entry *entries;
    int n_entries;
    int rc = k3_st_parse_index(index_path, text, len, &entries, &n_entries, err);
    free(text);
    if (rc)
        return rc;
    ck->shards = calloc((size_t)n_entries + 1, sizeof *ck->shards);
    if (!ck->shards)
        rc = k3_errf(err, "out of memory");
    for (int i = 0; !rc && i < n_entries; i++) {
        if (shard_index(ck, entries[i].shard) >= 0)
            continue;
        rc = open_shard(&ck->shards[ck->n_shards++], ck->dir, entries[i].shard, err);
    }
    /* Both directions: every indexed tensor is in its shard, every shard tensor is indexed
     * to that shard. */
    size_t total = 0;
    for (int s = 0; !rc && s < ck->n_shards; s++)
        total += (size_t)ck->shards[s].header.n_tensors;
    if (!rc && total != (size_t)n_entries)
        rc = k3_errf(err, "%s: weight_map names %d tensors but the shards hold %zu", index_path,
                     n_entries, total);
    if (!rc) {
        ck->tensors = calloc(total + 1, sizeof *ck->tensors);
        if (!ck->tensors)
            rc = k3_errf(err, "out of memory");
    }
    for (int s = 0; !rc && s < ck->n_shards; s++)
        for (int i = 0; i < ck->shards[s].header.n_tensors; i++)
            ck->tensors[ck->n_tensors++] =
                (struct k3_ckpt_tensor){&ck->shards[s].header.tensors[i], s};
    if (!rc)
        qsort(ck->tensors, (size_t)ck->n_tensors, sizeof *ck->tensors, by_name);
    for (int i = 0; !rc && i < n_entries; i++) {
        const struct k3_ckpt_tensor *t = &ck->tensors[i];
        if (strcmp(t->t->name, entries[i].name) || strcmp(ck->shards[t->shard].file, entries[i].shard))
            rc = k3_errf(err, "%s: weight_map.%s: tensor not found in shard %s", index_path,
                         entries[i].name, entries[i].shard);
    }
    k3_st_index_free(entries, n_entries);
    return rc;
}

static int open_single(struct k3_checkpoint *ck, struct k3_err *err)
{
    ck->shards = calloc(1, sizeof *ck->shards);
    if (!ck->shards)
        return k3_errf(err, "out of memory");
    ck->n_shards = 1;
    if (open_shard(&ck->shards[0], ck->dir, "model.safetensors", err))
        return -1;
    const struct k3_st_header *h = &ck->shards[0].header;
    ck->tensors = calloc((size_t)h->n_tensors + 1, sizeof *ck->tensors);
    if (!ck->tensors)
        return k3_errf(err, "out of memory");
    for (int i = 0; i < h->n_tensors; i++)
        ck->tensors[ck->n_tensors++] = (struct k3_ckpt_tensor){&h->tensors[i], 0};
    qsort(ck->tensors, (size_t)ck->n_tensors, sizeof *ck->tensors, by_name);
    return 0;
}

int k3_ckpt_open(struct k3_checkpoint **out, const char *dir, struct k3_err *err)
{
    *out = NULL;
    struct k3_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck || !(ck->dir = strdup(dir))) {
        free(ck);
        return k3_errf(err, "out of memory");
    }
    char *index = join(dir, "model.safetensors.index.json");
    int rc;
    if (!index)
        rc = k3_errf(err, "out of memory");
    else if (access(index, F_OK) == 0)
        rc = open_indexed(ck, index, err);
    else
        rc = open_single(ck, err);
    free(index);
    if (rc) {
        k3_ckpt_close(ck);
        return rc;
    }
    *out = ck;
    return 0;
}

void k3_ckpt_close(struct k3_checkpoint *ck)
{
    if (!ck)
        return;
    for (int i = 0; i < ck->n_shards; i++) {
        struct k3_shard *s = &ck->shards[i];
        if (s->fd >= 0)
            close(s->fd);
        k3_st_header_free(&s->header);
        free(s->file);
        free(s->path);
    }
    free(ck->shards);
    free(ck->tensors);
    free(ck->dir);
    free(ck);
}

const struct k3_ckpt_tensor *k3_ckpt_find(const struct k3_checkpoint *ck, const char *name)
{
    size_t lo = 0, hi = (size_t)ck->n_tensors;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(ck->tensors[mid].t->name, name);
        if (!c)
            return &ck->tensors[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int k3_ckpt_read(const struct k3_checkpoint *ck, const struct k3_ckpt_tensor *t, void *dst,
                 uint64_t off, uint64_t len, struct k3_err *err)
{
    const struct k3_shard *s = &ck->shards[t->shard];
    uint64_t at = t->t->offset + off;
    uint64_t done = 0;
    while (done < len) {
        ssize_t n = pread(s->fd, (char *)dst + done, len - done, (off_t)(at + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return k3_errf(err, "%s: tensor %s: read at offset %llu: %s", s->path, t->t->name,
                           (unsigned long long)(at + done), n ? strerror(errno) : "unexpected EOF");
        done += (uint64_t)n;
    }
    return 0;
}
