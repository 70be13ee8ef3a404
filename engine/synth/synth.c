#include "engine/synth/synth.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine/base/files.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/mxfp4.h"
#include "engine/base/rng.h"
#include "engine/model/safetensors.h"
#include "engine/model/tensors.h"
#include "engine/synth/vocab.h"

/* Elements per random stream: each stream is seeded from (seed, tensor name, chunk), so
 * chunks fill in parallel and a tensor's bytes do not depend on the order of writing. */
#define STREAM_ELEMS (1 << 16)
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
    int is_scale;
    int shard;
};

static uint64_t stream_seed(uint64_t seed, const char *name, uint64_t chunk)
{
    uint64_t h = XXH3_64bits_withSeed(name, strlen(name), seed);
    return h ^ (chunk * 0x9e3779b97f4a7c15ull);
}

/* One trunk value by its init rule; i is the element index within the tensor. */
static float init_value(const struct k3_tensor_spec *s, const struct k3_config *c,
                        struct k3_rng *r, int64_t i)
{
    switch (s->init) {
    case K3_INIT_LINEAR: return (float)(k3_rng_normal(r) / sqrt((double)s->fan_in));
    case K3_INIT_EMBED: return (float)k3_rng_normal(r);
    case K3_INIT_LM_HEAD: return (float)(4.0 * k3_rng_normal(r) / sqrt((double)c->hidden));
    case K3_INIT_GAIN: return (float)(0.8 + 0.4 * k3_rng_uniform(r));
    case K3_INIT_RES_PROJ: return (float)(k3_rng_normal(r) / sqrt((double)c->hidden));
    case K3_INIT_A_LOG: {
        double u = 1.0 + 15.0 * k3_rng_uniform(r); /* drawn for every slot: stream stays aligned */
        return i < s->live ? (float)log(u) : 0.0f;
    }
    case K3_INIT_DT_BIAS: return (float)(0.5 * k3_rng_normal(r));
    case K3_INIT_CONV: return (float)(0.25 * k3_rng_normal(r));
    case K3_INIT_BIAS: return (float)(0.05 * k3_rng_normal(r));
    }
    return 0;
}

/* E8M0 exponent putting an expert's weights near std 1/sqrt(fan_in): E2M1 values of
 * uniform nibbles have an rms of about 2.93. */
static int scale_center(int fan_in)
{
    return 127 + (int)lround(log2(1.0 / (2.93 * sqrt((double)fan_in))));
}

static void fill_chunk(const struct item *it, const struct k3_config *c, uint64_t seed,
                       int64_t first, int64_t count, uint8_t *out)
{
    int64_t n_streams = (count + STREAM_ELEMS - 1) / STREAM_ELEMS;
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < n_streams; k++) {
        int64_t begin = first + k * STREAM_ELEMS;
        int64_t end = begin + STREAM_ELEMS < first + count ? begin + STREAM_ELEMS : first + count;
        struct k3_rng r;
        k3_rng_seed(&r, stream_seed(seed, it->name, (uint64_t)(begin / STREAM_ELEMS)));
        for (int64_t i = begin; i < end; i++) {
            int64_t o = i - first;
            if (!it->spec && it->is_scale) {
                int jitter = (int)(k3_rng_next(&r) % 3) - 1;
                out[o] = (uint8_t)(scale_center(it->expert_fan_in) + jitter);
            } else if (!it->spec) {
                out[o] = (uint8_t)k3_rng_next(&r);
            } else {
                float v = init_value(it->spec, c, &r, i);
                if (it->dtype == K3_DT_F32)
                    memcpy(out + 4 * o, &v, 4);
                else {
                    uint16_t b = k3_f32_to_bf16(v);
                    memcpy(out + 2 * o, &b, 2);
                }
            }
        }
    }
}

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

static int write_shard(const char *dir, int s, int n_shards, struct item *items, int64_t n,
                       const struct k3_config *c, uint64_t seed, uint8_t *buf, bool quiet,
                       struct k3_err *err)
{
    char file[64], path[K3_PATH_MAX];
    shard_name(file, sizeof file, s, n_shards);
    if (k3_path_join(path, sizeof path, dir, file, err))
        return -1;
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
    FILE *f = fopen(path, "wb");
    int rc = f ? k3_st_write_header(f, hdr, (int)n, path, err)
               : k3_errf(err, "%s: %s", path, strerror(errno));
    free(hdr);
    uint64_t written = 0;
    for (int64_t i = 0; !rc && i < n; i++) {
        const struct item *it = &items[i];
        int esize = k3_dtype_size(it->dtype);
        for (int64_t first = 0; !rc && first < it->numel; first += WRITE_ELEMS) {
            int64_t count = it->numel - first < WRITE_ELEMS ? it->numel - first : WRITE_ELEMS;
            fill_chunk(it, c, seed, first, count, buf);
            if (fwrite(buf, (size_t)esize, (size_t)count, f) != (size_t)count)
                rc = k3_errf(err, "%s: write failed: %s", path, strerror(errno));
            written += (uint64_t)(count * esize);
        }
    }
    if (f && fclose(f) && !rc)
        rc = k3_errf(err, "%s: write failed: %s", path, strerror(errno));
    if (!rc && !quiet)
        fprintf(stderr, "synth: %s (%.1f MB, %lld tensors)\n", file, written / 1e6, (long long)n);
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

int k3_synth(const struct k3_config *c, uint64_t seed, const char *out_dir, bool quiet,
             struct k3_err *err)
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

    struct k3_tensor_spec *specs = NULL;
    int n_specs = 0;
    struct item *items = NULL;
    int64_t n_items = 0;
    int n_shards = 0;
    uint8_t *buf = malloc((size_t)WRITE_ELEMS * 4);
    int rc = buf ? 0 : k3_errf(err, "out of memory");
    if (!rc && k3_trunk_specs(c, &specs, &n_specs))
        rc = k3_errf(err, "out of memory");
    if (!rc && plan_items(c, specs, n_specs, &items, &n_items, &n_shards))
        rc = k3_errf(err, "out of memory");
    if (!rc)
        rc = k3_write_text(tmp, "config.json", c->json, err);
    if (!rc)
        rc = k3_tok_synthesize(tmp, c->vocab, c->bos_id, err);
    for (int s = 0, first = 0; !rc && s < n_shards; s++) {
        int end = first;
        while (end < n_items && items[end].shard == s)
            end++;
        rc = write_shard(tmp, s, n_shards, items + first, end - first, c, seed, buf, quiet, err);
        first = end;
    }
    if (!rc)
        rc = write_index(tmp, items, n_items, n_shards, err);
    if (!rc && rename(tmp, out_dir))
        rc = k3_errf(err, "rename %s to %s: %s", tmp, out_dir, strerror(errno));
    if (rc) {
        /* Leave nothing that looks like a checkpoint: remove what this run wrote. */
        char path[K3_PATH_MAX], file[64];
        for (int s = 0; s < n_shards; s++) {
            shard_name(file, sizeof file, s, n_shards);
            if (!k3_path_join(path, sizeof path, tmp, file, NULL))
                unlink(path);
        }
        const char *const others[] = {"config.json", "model.safetensors.index.json",
                                      "tiktoken.model", "tokenizer_config.json"};
        for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
            if (!k3_path_join(path, sizeof path, tmp, others[i], NULL))
                unlink(path);
        }
        rmdir(tmp);
    }
    free(buf);
    free(items);
    free(specs);
    return rc;
}
