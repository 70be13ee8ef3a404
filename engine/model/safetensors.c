#include "engine/model/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/kernels/q8_0.h"

/* The reference implementation refuses headers above 100 MB; so do we. */
#define ST_MAX_HEADER (100u << 20)

static const struct {
    const char *name;
    int size;
} dtypes[K3_DT_COUNT] = {
    [K3_DT_BF16] = {"BF16", 2}, [K3_DT_F16] = {"F16", 2},   [K3_DT_F32] = {"F32", 4},
    [K3_DT_F64] = {"F64", 8},   [K3_DT_U8] = {"U8", 1},     [K3_DT_I8] = {"I8", 1},
    [K3_DT_I16] = {"I16", 2},   [K3_DT_I32] = {"I32", 4},   [K3_DT_I64] = {"I64", 8},
    [K3_DT_BOOL] = {"BOOL", 1}, [K3_DT_Q8_0] = {"Q8_0", 0},
};

const char *k3_dtype_name(enum k3_dtype t) { return dtypes[t].name; }
int k3_dtype_size(enum k3_dtype t) { return dtypes[t].size; }

uint64_t k3_dtype_bytes(enum k3_dtype t, int64_t numel)
{
    if (t == K3_DT_Q8_0)
        return k3_q8_0_row_bytes(numel); /* the flat array's blocks */
    return (uint64_t)numel * (uint64_t)dtypes[t].size;
}

static int dtype_parse(const char *s, enum k3_dtype *out)
{
    for (int t = 0; t < K3_DT_COUNT; t++)
        if (dtypes[t].size && !strcmp(dtypes[t].name, s)) { /* Q8_0 is ours, not a file's */
            *out = (enum k3_dtype)t;
            return 0;
        }
    return -1;
}

static int by_offset(const void *a, const void *b)
{
    const struct k3_st_tensor *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int parse_tensor(struct k3_st_tensor *t, const char *file, const char *name, json_t *v,
                        struct k3_err *err)
{
    json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
           *offs = json_object_get(v, "data_offsets");
    if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(shape) ||
        !json_is_array(offs) || json_array_size(offs) != 2)
        return k3_errf(err, "%s: tensor %s: needs dtype, shape and data_offsets [begin, end]",
                       file, name);
    if (dtype_parse(json_string_value(dt), &t->dtype))
        return k3_errf(err, "%s: tensor %s: unknown dtype \"%s\"", file, name,
                       json_string_value(dt));
    if (json_array_size(shape) > K3_ST_MAX_DIMS)
        return k3_errf(err, "%s: tensor %s: %zu dimensions (at most %d)", file, name,
                       json_array_size(shape), K3_ST_MAX_DIMS);
    t->ndim = (int)json_array_size(shape);
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        json_t *x = json_array_get(shape, (size_t)d);
        if (!json_is_integer(x) || json_integer_value(x) < 0 ||
            json_integer_value(x) > (json_int_t)1 << 40)
            return k3_errf(err, "%s: tensor %s: shape[%d] is not a valid size", file, name, d);
        t->shape[d] = json_integer_value(x);
        if (t->shape[d] && numel > (UINT64_C(1) << 50) / (uint64_t)t->shape[d])
            return k3_errf(err, "%s: tensor %s: shape too large", file, name);
        numel *= (uint64_t)t->shape[d];
    }
    json_t *b = json_array_get(offs, 0), *e = json_array_get(offs, 1);
    if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
        json_integer_value(e) < json_integer_value(b))
        return k3_errf(err, "%s: tensor %s: bad data_offsets", file, name);
    t->offset = (uint64_t)json_integer_value(b);
    t->nbytes = (uint64_t)(json_integer_value(e) - json_integer_value(b));
    if (t->nbytes != numel * (uint64_t)k3_dtype_size(t->dtype))
        return k3_errf(err, "%s: tensor %s: data_offsets span %llu bytes but %s%s needs %llu",
                       file, name, (unsigned long long)t->nbytes, k3_dtype_name(t->dtype),
                       t->ndim ? " shape" : "", (unsigned long long)(numel * k3_dtype_size(t->dtype)));
    t->name = strdup(name);
    return t->name ? 0 : k3_errf(err, "%s: out of memory", file);
}

int k3_st_parse(struct k3_st_header *h, const char *file, const char *json, size_t len,
                uint64_t data_size, struct k3_err *err)
{
    memset(h, 0, sizeof *h);
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return k3_errf(err, "%s: header: malformed JSON at byte %d: %s", file, jerr.position,
                       jerr.text);
    int rc = 0;
    if (!json_is_object(root)) {
        rc = k3_errf(err, "%s: header: expected a JSON object", file);
        goto out;
    }
    size_t cap = json_object_size(root);
    h->tensors = calloc(cap ? cap : 1, sizeof *h->tensors);
    if (!h->tensors) {
        rc = k3_errf(err, "%s: out of memory", file);
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__"))
            continue;
        rc = parse_tensor(&h->tensors[h->n_tensors], file, key, v, err);
        if (rc)
            goto out;
        h->n_tensors++;
    }
    qsort(h->tensors, (size_t)h->n_tensors, sizeof *h->tensors, by_offset);
    /* As in the reference implementation: the data section is indexed entirely, in
     * order, without holes or overlaps.  A shard cut short fails here. */
    uint64_t expect = 0;
    for (int i = 0; i < h->n_tensors; i++) {
        struct k3_st_tensor *t = &h->tensors[i];
        if (t->offset != expect) {
            rc = k3_errf(err, "%s: tensor %s: data starts at %llu, expected %llu (overlap or hole)",
                         file, t->name, (unsigned long long)t->offset, (unsigned long long)expect);
            goto out;
        }
        expect = t->offset + t->nbytes;
    }
    if (expect != data_size) {
        rc = expect > data_size
                 ? k3_errf(err, "%s: truncated: tensors need %llu data bytes, the file has %llu",
                           file, (unsigned long long)expect, (unsigned long long)data_size)
                 : k3_errf(err, "%s: %llu bytes after the last tensor", file,
                           (unsigned long long)(data_size - expect));
        goto out;
    }
out:
    json_decref(root);
    if (rc)
        k3_st_header_free(h);
    return rc;
}

int k3_st_read_header(struct k3_st_header *h, const char *file, int fd, uint64_t file_size,
                      struct k3_err *err)
{
    memset(h, 0, sizeof *h);
    uint8_t lenbuf[8];
    if (file_size < 8 || pread(fd, lenbuf, 8, 0) != 8)
        return k3_errf(err, "%s: truncated: no safetensors header", file);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | lenbuf[i];
    if (hlen > ST_MAX_HEADER || hlen > file_size - 8)
        return k3_errf(err, "%s: header length %llu does not fit the file (%llu bytes)", file,
                       (unsigned long long)hlen, (unsigned long long)file_size);
    char *json = malloc(hlen ? hlen : 1);
    if (!json)
        return k3_errf(err, "%s: out of memory", file);
    size_t got = 0;
    while (got < hlen) {
        ssize_t n = pread(fd, json + got, hlen - got, (off_t)(8 + got));
        if (n <= 0) {
            free(json);
            return k3_errf(err, "%s: reading the header: %s", file, n ? strerror(errno) : "EOF");
        }
        got += (size_t)n;
    }
    int rc = k3_st_parse(h, file, json, hlen, file_size - 8 - hlen, err);
    free(json);
    if (rc)
        return rc;
    h->data_start = 8 + hlen;
    for (int i = 0; i < h->n_tensors; i++)
        h->tensors[i].offset += h->data_start;
    return 0;
}

void k3_st_header_free(struct k3_st_header *h)
{
    for (int i = 0; h->tensors && i < h->n_tensors; i++)
        free(h->tensors[i].name);
    free(h->tensors);
    memset(h, 0, sizeof *h);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct k3_st_index_entry *)a)->name,
                  ((const struct k3_st_index_entry *)b)->name);
}

int k3_st_parse_index(const char *file, const char *json, size_t len,
                      struct k3_st_index_entry **entries, int *n, struct k3_err *err)
{
    *entries = NULL;
    *n = 0;
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return k3_errf(err, "%s: line %d: malformed JSON: %s", file, jerr.line, jerr.text);
    json_t *map = json_object_get(root, "weight_map");
    int rc = 0;
    if (!json_is_object(map)) {
        rc = k3_errf(err, "%s: weight_map: missing or not an object", file);
        goto out;
    }
    struct k3_st_index_entry *e = calloc(json_object_size(map) + 1, sizeof *e);
    if (!e) {
        rc = k3_errf(err, "%s: out of memory", file);
        goto out;
    }
    const char *key;
    json_t *v;
    int count = 0;
    json_object_foreach(map, key, v) {
        const char *shard = json_string_value(v);
        if (!shard || !*shard || strchr(shard, '/')) {
            k3_st_index_free(e, count);
            rc = k3_errf(err, "%s: weight_map.%s: expected a shard file name in the same folder",
                         file, key);
            goto out;
        }
        e[count].name = strdup(key);
        e[count].shard = strdup(shard);
        count++;
        if (!e[count - 1].name || !e[count - 1].shard) {
            k3_st_index_free(e, count);
            rc = k3_errf(err, "%s: out of memory", file);
            goto out;
        }
    }
    qsort(e, (size_t)count, sizeof *e, by_name);
    *entries = e;
    *n = count;
out:
    json_decref(root);
    return rc;
}

void k3_st_index_free(struct k3_st_index_entry *e, int n)
{
    for (int i = 0; e && i < n; i++) {
        free(e[i].name);
        free(e[i].shard);
    }
    free(e);
}

int k3_st_write_header(FILE *f, struct k3_st_tensor *tensors, int n, const char *file,
                       struct k3_err *err)
{
    json_t *root = json_object();
    uint64_t off = 0;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        struct k3_st_tensor *t = &tensors[i];
        json_t *shape = json_array();
        for (int d = 0; d < t->ndim; d++)
            json_array_append_new(shape, json_integer(t->shape[d]));
        json_t *v = json_pack("{s:s, s:o, s:[I, I]}", "dtype", k3_dtype_name(t->dtype), "shape",
                              shape, "data_offsets", (json_int_t)off,
                              (json_int_t)(off + t->nbytes));
        if (!v || json_object_set_new(root, t->name, v))
            rc = k3_errf(err, "%s: out of memory", file);
        t->offset = off;
        off += t->nbytes;
    }
    json_object_set_new(root, "__metadata__", json_pack("{s:s}", "format", "pt"));
    char *text = rc ? NULL : json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text)
        return rc ? rc : k3_errf(err, "%s: out of memory", file);
    /* Pad with spaces so tensor data starts 8-byte aligned, as safetensors writers do. */
    size_t len = strlen(text), padded = (len + 8 + 7) / 8 * 8 - 8;
    uint8_t lenbuf[8];
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int bad = fwrite(lenbuf, 1, 8, f) != 8 || fwrite(text, 1, len, f) != len;
    for (size_t i = len; i < padded && !bad; i++)
        bad = fputc(' ', f) == EOF;
    free(text);
    return bad ? k3_errf(err, "%s: write failed: %s", file, strerror(errno)) : 0;
}
