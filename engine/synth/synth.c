/* `synth`: a checkpoint folder in K3's shipped layout.  The tensors and their shards
 * (plan_items), the shard files, the index and the folder's atomic appearance are
 * here; the values are weights.c's, the vocabulary vocab.c's.  See synth.h. */
#include "engine/synth/synth.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/files.h"
#include "engine/base/line.h"
#include "engine/kernels/mxfp4.h"
#include "engine/model/quant_config.h"
#include "engine/model/safetensors.h"
#include "engine/model/tensors.h"
#include "engine/synth/vocab.h"
#include "engine/synth/weights.h"

/* Elements generated per write. */
#define WRITE_ELEMS (1 << 22)
/* Typical shard size; K3 ships 96 shards of about 16 GB. */
#define SHARD_TARGET_BYTES (4ull << 30)
#define MIN_SHARDS 3

/* One tensor to write: a trunk spec, or one part of a routed expert. */
struct item {
    char name[192];
    enum k3_dtype dtype;
    int ndim;
    int64_t shape[3];
    int64_t numel;
    const struct k3_tensor_spec *spec; /* NULL for expert parts */
    int expert_fan_in;                 /* expert scale parts: inputs the scales cover */
    bool is_scale;
    int shard;
};

static int dtype_rank(enum k3_dtype t)
{
    /* safetensors writers order tensors by dtype (wider first), then by name. */
    return t == K3_DT_F32 ? 0 : t == K3_DT_BF16 ? 1 : 2;
}

static int by_shard_dtype_name(const void *a, const void *b)
{
    const struct item *x = a, *y = b;
    if (x->shard != y->shard)
        return x->shard - y->shard;
    if (dtype_rank(x->dtype) != dtype_rank(y->dtype))
        return dtype_rank(x->dtype) - dtype_rank(y->dtype);
    return strcmp(x->name, y->name);
}

static uint64_t item_bytes(const struct item *it)
{
    return (uint64_t)it->numel * (uint64_t)k3_dtype_size(it->dtype);
}

/* Every tensor of the checkpoint with its shard: layers go to shards in contiguous
 * runs (a layer's trunk and experts stay in one shard, as in K3's own shards), the
 * embedding with the first and the output tensors with the last. */
static int plan_items(const struct k3_config *c, const struct k3_tensor_spec *specs, int n_specs,
                      struct item **items_out, int64_t *n_items_out, int *n_shards_out)
{
    struct k3_record_layout rec;
    k3_record_layout_init(&rec, c);
    int64_t n_expert_items = (int64_t)k3_moe_layer_count(c) * c->n_experts * K3_EXPERT_PARTS;
    int64_t n = n_specs + n_expert_items;
    struct item *items = calloc((size_t)n, sizeof *items);
    if (!items)
        return -1;
    int64_t k = 0;
    uint64_t total = 0;
    for (int i = 0; i < n_specs; i++, k++) {
        struct item *it = &items[k];
        const struct k3_tensor_spec *s = &specs[i];
        snprintf(it->name, sizeof it->name, "%s", s->name);
        it->dtype = k3_spec_dtype(s);
        it->ndim = s->ndim;
        memcpy(it->shape, s->shape, sizeof it->shape);
        it->numel = 1;
        for (int d = 0; d < s->ndim; d++)
            it->numel *= s->shape[d];
        it->spec = s;
        it->shard = s->layer; /* provisional: a layer index, -1 for globals */
        total += item_bytes(it);
    }
    for (int l = 0; l < c->n_layers; l++) {
        if (!k3_layer_is_moe(c, l))
            continue;
        for (int e = 0; e < c->n_experts; e++)
            for (int p = 0; p < K3_EXPERT_PARTS; p++, k++) {
                struct item *it = &items[k];
                k3_expert_tensor_name(it->name, sizeof it->name, l, e, (enum k3_expert_part)p);
                it->dtype = K3_DT_U8;
                it->ndim = 2;
                it->shape[0] = rec.rows[p];
                it->shape[1] = rec.cols[p];
                it->numel = rec.rows[p] * rec.cols[p];
                it->is_scale = p % 2 == 1;
                it->expert_fan_in = (int)(rec.cols[p] * K3_MXFP4_GROUP);
                it->shard = l;
                total += item_bytes(it);
            }
    }
    int n_shards = (int)((total + SHARD_TARGET_BYTES - 1) / SHARD_TARGET_BYTES);
    if (n_shards < MIN_SHARDS)
        n_shards = MIN_SHARDS;
    if (n_shards > c->n_layers)
        n_shards = c->n_layers;
    for (int64_t i = 0; i < n; i++) {
        struct item *it = &items[i];
        if (it->shard >= 0) /* equal runs of layers per shard */
            it->shard = (int)((int64_t)it->shard * n_shards / c->n_layers);
        else
            it->shard = strstr(it->name, "embed_tokens") ? 0 : n_shards - 1;
    }
    qsort(items, (size_t)n, sizeof *items, by_shard_dtype_name);
    *items_out = items;
    *n_items_out = n;
    *n_shards_out = n_shards;
    return 0;
}

static void shard_name(char *buf, size_t len, int s, int n)
{
    snprintf(buf, len, "model-%05d-of-%05d.safetensors", s + 1, n);
}

/* One synth run: what the writers share. */
struct run {
    const struct k3_config *c;
    uint64_t seed;
    const char *dir;    /* the folder being filled (renamed into place at the end) */
    int n_shards;
    uint8_t *buf;       /* [WRITE_ELEMS * 4] the values of one write */
    const struct k3_synth_notes *notes;
    struct k3_err *err;
};

/* The safetensors header of items[0..n), in their order. */
static int write_shard_header(FILE *f, const char *path, struct item *items, int64_t n,
                              struct k3_err *err)
{
    struct k3_st_tensor *hdr = calloc((size_t)n + 1, sizeof *hdr);
    if (!hdr)
        return k3_errf(err, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        hdr[i].name = items[i].name;
        hdr[i].dtype = items[i].dtype;
        hdr[i].ndim = items[i].ndim;
        memcpy(hdr[i].shape, items[i].shape, sizeof items[i].shape);
        hdr[i].nbytes = item_bytes(&items[i]);
    }
    int rc = k3_st_write_header(f, hdr, (int)n, path, err);
    free(hdr);
    return rc;
}

/* The values of one tensor, WRITE_ELEMS at a time. */
static int write_tensor(const struct run *r, FILE *f, const char *path, const struct item *it)
{
    const struct k3_synth_tensor view = {it->name, it->dtype, it->spec, it->is_scale,
                                         it->expert_fan_in};
    int esize = k3_dtype_size(it->dtype);
    for (int64_t first = 0; first < it->numel; first += WRITE_ELEMS) {
        int64_t count = it->numel - first < WRITE_ELEMS ? it->numel - first : WRITE_ELEMS;
        k3_synth_fill(&view, r->c, r->seed, first, count, r->buf);
        if (fwrite(r->buf, (size_t)esize, (size_t)count, f) != (size_t)count)
            return k3_errf(r->err, "%s: write failed: %s", path, strerror(errno));
    }
    return 0;
}

/* Shard s: a header, then the values of items[0..n). */
static int write_shard(const struct run *r, int s, struct item *items, int64_t n)
{
    char file[64], path[K3_PATH_MAX];
    shard_name(file, sizeof file, s, r->n_shards);
    if (k3_path_join(path, sizeof path, r->dir, file, r->err))
        return -1;
    FILE *f = fopen(path, "wb");
    if (!f)
        return k3_errf(r->err, "%s: %s", path, strerror(errno));
    int rc = write_shard_header(f, path, items, n, r->err);
    uint64_t written = 0;
    for (int64_t i = 0; !rc && i < n; i++) {
        rc = write_tensor(r, f, path, &items[i]);
        written += item_bytes(&items[i]);
    }
    if (fclose(f) && !rc)
        rc = k3_errf(r->err, "%s: write failed: %s", path, strerror(errno));
    if (!rc && r->notes) /* tells the caller, if it listens */
        k3_line(r->notes->fn, r->notes->ctx, "%s (%.1f MB, %lld tensors)", file, written / 1e6,
                (long long)n);
    return rc;
}

static int write_index(const char *dir, const struct item *items, int64_t n, int n_shards,
                       struct k3_err *err)
{
    json_t *map = json_object();
    uint64_t total = 0;
    char file[64];
    for (int64_t i = 0; i < n; i++) {
        shard_name(file, sizeof file, items[i].shard, n_shards);
        json_object_set_new(map, items[i].name, json_string(file));
        total += item_bytes(&items[i]);
    }
    json_t *root = json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)total,
                             "weight_map", map);
    char path[K3_PATH_MAX];
    if (k3_path_join(path, sizeof path, dir, "model.safetensors.index.json", err)) {
        json_decref(root);
        return -1;
    }
    int rc = root && !json_dump_file(root, path, JSON_INDENT(2) | JSON_SORT_KEYS)
                 ? 0
                 : k3_errf(err, "%s: write failed", path);
    json_decref(root);
    return rc;
}

/* Removes what a failed run wrote, so nothing that looks like a checkpoint is left. */
static void remove_partial(const char *dir, int n_shards)
{
    char path[K3_PATH_MAX], file[64];
    for (int s = 0; s < n_shards; s++) {
        shard_name(file, sizeof file, s, n_shards);
        if (!k3_path_join(path, sizeof path, dir, file, NULL))
            unlink(path);
    }
    const char *const others[] = {"config.json", "model.safetensors.index.json",
                                  "tiktoken.model", "tokenizer_config.json"};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        if (!k3_path_join(path, sizeof path, dir, others[i], NULL))
            unlink(path);
    }
    rmdir(dir);
}

/* config.json as K3 ships it: the config given, with K3's quantization_config in
 * text_config when it has none, so that Hugging Face loaders unpack the experts (without
 * it they find every expert missing).  The presets carry it already. */
static int write_config(const struct run *r)
{
    json_t *root = json_loads(r->c->json, 0, NULL);
    json_t *text = json_object_get(root, "text_config");
    if (json_object_get(text, "quantization_config")) {
        json_decref(root);
        return k3_write_text(r->dir, "config.json", r->c->json, r->err);
    }
    /* k3_config_parse read this text: short of memory is the only way it fails here. */
    char *out = NULL;
    json_t *block = json_is_object(text) ? json_loads(K3_QUANT_CONFIG_JSON, 0, NULL) : NULL;
    if (block && !json_object_set_new(text, "quantization_config", block))
        out = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    int rc = out ? k3_write_text(r->dir, "config.json", out, r->err)
                 : k3_errf(r->err, "out of memory");
    free(out);
    return rc;
}

/* Every file of the checkpoint into r->dir: config, vocabulary, shards, index. */
static int write_files(const struct run *r, struct item *items, int64_t n_items)
{
    if (write_config(r) ||
        k3_tok_synthesize(r->dir, r->c->vocab, r->c->bos_id, r->err))
        return -1;
    for (int s = 0, first = 0; s < r->n_shards; s++) {
        int end = first;
        while (end < n_items && items[end].shard == s)
            end++;
        if (write_shard(r, s, items + first, end - first))
            return -1;
        first = end;
    }
    return write_index(r->dir, items, n_items, r->n_shards, r->err);
}

int k3_synth(const struct k3_config *c, uint64_t seed, const char *out_dir,
             const struct k3_synth_notes *notes, struct k3_err *err)
{
    struct stat st;
    if (stat(out_dir, &st) == 0)
        return k3_errf(err, "--out %s: already exists; remove it or choose another folder",
                       out_dir);
    char tmp[K3_PATH_MAX - 64];
    int len = snprintf(tmp, sizeof tmp, "%s.partial-%d", out_dir, (int)getpid());
    if (len < 0 || (size_t)len >= sizeof tmp)
        return k3_errf(err, "--out %s: path too long", out_dir);
    if (k3_mkdir_parents(tmp, err))
        return -1;
    struct run r = {c, seed, tmp, 0, malloc((size_t)WRITE_ELEMS * 4), notes, err};
    struct k3_tensor_spec *specs = NULL;
    int n_specs = 0;
    struct item *items = NULL;
    int64_t n_items = 0;
    int rc = r.buf ? 0 : k3_errf(err, "out of memory");
    if (!rc && k3_trunk_specs(c, &specs, &n_specs))
        rc = k3_errf(err, "out of memory");
    if (!rc && plan_items(c, specs, n_specs, &items, &n_items, &r.n_shards))
        rc = k3_errf(err, "out of memory");
    if (!rc)
        rc = write_files(&r, items, n_items);
    if (!rc && rename(tmp, out_dir))
        rc = k3_errf(err, "rename %s to %s: %s", tmp, out_dir, strerror(errno));
    if (rc)
        remove_partial(tmp, r.n_shards);
    free(r.buf);
    free(items);
    free(specs);
    return rc;
}
