/* The quantization_config check.  See quant_config.h. */
#include "engine/model/quant_config.h"

#include <stdlib.h>
#include <string.h>

#define MXFP4_FORMAT "mxfp4-pack-quantized"

/* One block being checked: where it is, for messages. */
struct block {
    const char *file;
    const char *scope; /* "text_config.quantization_config" or "quantization_config" */
    struct k3_err *err;
};

/* "<file>: <scope>.<path>: <value>, expected <want> (...)". */
static int refuse(const struct block *b, const char *path, const json_t *v, const char *want)
{
    char *got = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    k3_errf(b->err, "%s: %s%s%s: %s, expected %s (routed experts are read only as "
            "compressed-tensors MXFP4, as K3 ships them)", b->file, b->scope, *path ? "." : "",
            path, got ? got : "missing", want);
    free(got);
    return -1;
}

/* key must be present and the string want. */
static int need_string(const struct block *b, const json_t *obj, const char *path,
                       const char *key, const char *want)
{
    const json_t *v = json_object_get(obj, key);
    if (json_is_string(v) && !strcmp(json_string_value(v), want))
        return 0;
    char where[128], want_json[64];
    snprintf(where, sizeof where, "%s%s%s", path, *path ? "." : "", key);
    snprintf(want_json, sizeof want_json, "\"%s\"", want);
    return refuse(b, where, v, want_json);
}

/* key may be absent or null; otherwise it must be the string want. */
static int allow_string(const struct block *b, const json_t *obj, const char *path,
                        const char *key, const char *want)
{
    const json_t *v = json_object_get(obj, key);
    return !v || json_is_null(v) ? 0 : need_string(b, obj, path, key, want);
}

static int need_int(const struct block *b, const json_t *obj, const char *path,
                    const char *key, int want)
{
    const json_t *v = json_object_get(obj, key);
    if (json_is_integer(v) && json_integer_value(v) == want)
        return 0;
    char where[128], want_json[16];
    snprintf(where, sizeof where, "%s.%s", path, key);
    snprintf(want_json, sizeof want_json, "%d", want);
    return refuse(b, where, v, want_json);
}

/* One config group: the weights it quantizes must be E2M1 in groups of 32 under uint8
 * scales; a group naming another format quantizes something else. */
static int check_group(const struct block *b, const char *name, const json_t *g)
{
    char path[96], wpath[112];
    snprintf(path, sizeof path, "config_groups.%s", name);
    if (!json_is_object(g))
        return refuse(b, path, g, "an object");
    if (allow_string(b, g, path, "format", MXFP4_FORMAT))
        return -1;
    const json_t *w = json_object_get(g, "weights");
    snprintf(wpath, sizeof wpath, "%s.weights", path);
    if (!json_is_object(w))
        return refuse(b, wpath, w, "an object");
    if (need_int(b, w, wpath, "num_bits", 4) ||
        need_string(b, w, wpath, "type", "float") ||
        need_int(b, w, wpath, "group_size", 32) ||
        allow_string(b, w, wpath, "strategy", "group") ||
        allow_string(b, w, wpath, "scale_dtype", "torch.uint8"))
        return -1;
    return 0;
}

static int check_block(const struct block *b, const json_t *q)
{
    if (!json_is_object(q))
        return refuse(b, "", q, "an object");
    if (need_string(b, q, "", "quant_method", "compressed-tensors") ||
        need_string(b, q, "", "format", MXFP4_FORMAT) ||
        allow_string(b, q, "", "quantization_status", "compressed"))
        return -1;
    const json_t *groups = json_object_get(q, "config_groups");
    if (!json_is_object(groups) || !json_object_size(groups))
        return refuse(b, "config_groups", groups, "an object of config groups");
    const char *name;
    const json_t *g;
    json_object_foreach((json_t *)groups, name, g)
        if (check_group(b, name, g))
            return -1;
    return 0;
}

int k3_quant_config_check(const json_t *root, const json_t *text, const char *file,
                          struct k3_err *err)
{
    const json_t *in_text = json_object_get(text, "quantization_config");
    const json_t *in_root = json_object_get(root, "quantization_config");
    struct block bt = {file, "text_config.quantization_config", err};
    struct block br = {file, "quantization_config", err};
    if (in_text && check_block(&bt, in_text))
        return -1;
    return in_root ? check_block(&br, in_root) : 0;
}
