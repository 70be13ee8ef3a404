#include "engine/model/config.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/files.h"
#include "engine/model/config_presets.h"
#include "engine/model/quant_config.h"

/* One parse in progress: the file name and the object being read, for messages. */
struct reader {
    const char *file;
    const char *scope; /* "text_config" or "text_config.linear_attn_config" */
    json_t *obj;
    struct k3_err *err;
    int failed;
};

static json_t *field(struct reader *r, const char *key)
{
    if (r->failed)
        return NULL;
    json_t *v = json_object_get(r->obj, key);
    if (!v) {
        r->failed = k3_errf(r->err, "%s: %s.%s: missing", r->file, r->scope, key);
        return NULL;
    }
    return v;
}

static int get_int(struct reader *r, const char *key, int min, int max)
{
    json_t *v = field(r, key);
    if (!v)
        return 0;
    if (!json_is_integer(v)) {
        r->failed = k3_errf(r->err, "%s: %s.%s: expected an integer", r->file, r->scope, key);
        return 0;
    }
    json_int_t x = json_integer_value(v);
    if (x < min || x > max) {
        r->failed = k3_errf(r->err, "%s: %s.%s: %lld is outside [%d, %d]", r->file, r->scope,
                            key, (long long)x, min, max);
        return 0;
    }
    return (int)x;
}

static float get_float(struct reader *r, const char *key, double min, double max)
{
    json_t *v = field(r, key);
    if (!v)
        return 0;
    if (!json_is_number(v)) {
        r->failed = k3_errf(r->err, "%s: %s.%s: expected a number", r->file, r->scope, key);
        return 0;
    }
    double x = json_number_value(v);
    if (!(x >= min && x <= max)) {
        r->failed = k3_errf(r->err, "%s: %s.%s: %g is outside [%g, %g]", r->file, r->scope, key,
                            x, min, max);
        return 0;
    }
    return (float)x;
}

static bool get_bool(struct reader *r, const char *key)
{
    json_t *v = field(r, key);
    if (!v)
        return false;
    if (!json_is_boolean(v)) {
        r->failed = k3_errf(r->err, "%s: %s.%s: expected true or false", r->file, r->scope, key);
        return false;
    }
    return json_is_true(v);
}

/* Keys whose value the engine does not implement alternatives for: anything else
 * is a model outside the family, refused rather than computed wrongly. */
static void require_bool(struct reader *r, const char *key, bool want)
{
    bool b = get_bool(r, key);
    if (!r->failed && b != want)
        r->failed = k3_errf(r->err, "%s: %s.%s: %s is not supported (K3 uses %s)", r->file,
                            r->scope, key, b ? "true" : "false", want ? "true" : "false");
}

static void require_string(struct reader *r, const char *key, const char *want)
{
    json_t *v = field(r, key);
    if (!v)
        return;
    const char *s = json_string_value(v);
    if (!s || strcmp(s, want))
        r->failed = k3_errf(r->err, "%s: %s.%s: expected \"%s\" (a Kimi-K3-family model)",
                            r->file, r->scope, key, want);
}

/* Marks the layers a 1-based id list names; returns how many it named. */
static int mark_layers(struct reader *r, const char *key, int n_layers, unsigned char *seen,
                       unsigned char mark)
{
    json_t *arr = field(r, key);
    if (!arr)
        return 0;
    if (!json_is_array(arr)) {
        r->failed = k3_errf(r->err, "%s: %s.%s: expected an array of layer ids", r->file,
                            r->scope, key);
        return 0;
    }
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 ||
            json_integer_value(v) > n_layers) {
            r->failed = k3_errf(r->err, "%s: %s.%s[%zu]: expected a 1-based layer id in [1, %d]",
                                r->file, r->scope, key, i, n_layers);
            return 0;
        }
        int id = (int)json_integer_value(v);
        if (seen[id - 1]) {
            r->failed = k3_errf(r->err,
                                "%s: %s.%s: layer %d is listed twice across kda_layers and "
                                "full_attn_layers",
                                r->file, r->scope, key, id);
            return 0;
        }
        seen[id - 1] = mark;
    }
    return (int)json_array_size(arr);
}

enum { MARK_KDA = 1, MARK_MLA = 2 };

/* text_config's own keys, in the order they are checked (the first problem is the one
 * reported).  Cross-field rules come after, once every value is known. */
static void read_trunk(struct k3_config *c, struct reader *r)
{
    c->vocab = get_int(r, "vocab_size", 1, 1 << 24);
    c->hidden = get_int(r, "hidden_size", 1, 1 << 20);
    c->n_layers = get_int(r, "num_hidden_layers", 1, K3_MAX_LAYERS);
    c->rms_eps = get_float(r, "rms_norm_eps", 0, 1);
    require_string(r, "hidden_act", "situ");
    c->situ_beta = get_float(r, "activation_situ_beta", 1e-6, 1e6);
    c->situ_linear_beta = get_float(r, "activation_situ_linear_beta", 1e-6, 1e6);
    c->dense_inter = get_int(r, "intermediate_size", 1, 1 << 24);
    c->first_dense = get_int(r, "first_k_dense_replace", 0, 4096);
    c->moe_freq = get_int(r, "moe_layer_freq", 1, 4096);
}

static void read_mla(struct k3_config *c, struct reader *r)
{
    c->mla_heads = get_int(r, "num_attention_heads", 1, 4096);
    c->q_lora = get_int(r, "q_lora_rank", 1, 1 << 20);
    c->kv_lora = get_int(r, "kv_lora_rank", 1, 1 << 20);
    c->qk_nope = get_int(r, "qk_nope_head_dim", 1, 1 << 16);
    c->qk_rope = get_int(r, "qk_rope_head_dim", 0, 1 << 16);
    c->v_head = get_int(r, "v_head_dim", 1, 1 << 16);
    require_bool(r, "mla_use_nope", true);
    require_bool(r, "mla_use_output_gate", true);
}

static void read_moe(struct k3_config *c, struct reader *r)
{
    c->n_experts = get_int(r, "num_experts", 1, 1 << 20);
    c->top_k = get_int(r, "num_experts_per_token", 1, K3_MAX_TOPK);
    c->n_shared = get_int(r, "num_shared_experts", 1, 64);
    c->moe_inter = get_int(r, "moe_intermediate_size", 32, 1 << 24);
    c->latent = get_int(r, "routed_expert_hidden_size", 32, 1 << 24);
    require_bool(r, "latent_moe_use_norm", true);
    require_string(r, "moe_router_activation_func", "sigmoid");
    require_string(r, "topk_method", "noaux_tc");
    /* use_grouped_topk is not read: Moonshot's gate never does, and groups whenever
     * num_expert_group > 1 and > topk_group (k3_route_grouped). */
    c->n_group = get_int(r, "num_expert_group", 1, 1 << 20);
    c->topk_group = get_int(r, "topk_group", 1, 1 << 20);
    c->renormalize = get_bool(r, "moe_renormalize");
    c->routed_scale = get_float(r, "routed_scaling_factor", 1e-6, 1e6);
}

static void read_rest(struct k3_config *c, struct reader *r)
{
    c->attn_res_block = get_int(r, "attn_res_block_size", 1, 4096);
    c->bos_id = get_int(r, "bos_token_id", 0, 1 << 24);
    c->eos_id = get_int(r, "eos_token_id", 0, 1 << 24);
    c->pad_id = get_int(r, "pad_token_id", 0, 1 << 24);
    c->max_positions = get_int(r, "max_position_embeddings", 1, 1 << 30);
    c->tie_embeddings = get_bool(r, "tie_word_embeddings");
}

/* Cross-field rules of text_config: contradictions are refused with the key named. */
static int check_text(const struct k3_config *c, const char *f, struct k3_err *err)
{
    if (c->top_k > c->n_experts)
        return k3_errf(err, "%s: text_config.num_experts_per_token: %d exceeds num_experts %d",
                       f, c->top_k, c->n_experts);
    if (c->n_experts % c->n_group || c->topk_group > c->n_group)
        return k3_errf(err,
                       "%s: text_config.num_expert_group: %d groups with topk_group %d do not "
                       "divide %d experts",
                       f, c->n_group, c->topk_group, c->n_experts);
    if (k3_route_grouped(c) && (c->n_experts / c->n_group < 2 || k3_route_choosable(c) < c->top_k))
        return k3_errf(err,
                       "%s: text_config.topk_group: %d groups of %d experts cannot supply %d experts",
                       f, c->topk_group, c->n_experts / c->n_group, c->top_k);
    if (k3_max_blocks(c) > K3_MAX_BLOCKS)
        return k3_errf(err,
                       "%s: text_config.attn_res_block_size: %d gives %d AttnRes blocks over %d "
                       "layers (at most %d)",
                       f, c->attn_res_block, k3_max_blocks(c), c->n_layers, K3_MAX_BLOCKS);
    if (c->n_group > K3_MAX_GROUPS)
        return k3_errf(err, "%s: text_config.num_expert_group: %d (at most %d)", f, c->n_group,
                       K3_MAX_GROUPS);
    if (c->latent % 32 || c->moe_inter % 32)
        return k3_errf(err,
                       "%s: text_config: routed_expert_hidden_size %d and moe_intermediate_size %d "
                       "must be multiples of 32 (the MXFP4 group)",
                       f, c->latent, c->moe_inter);
    if (c->bos_id >= c->vocab || c->eos_id >= c->vocab || c->pad_id >= c->vocab)
        return k3_errf(err, "%s: text_config: bos/eos/pad token ids must be < vocab_size %d", f,
                       c->vocab);
    return 0;
}

/* linear_attn_config's KDA widths. */
static int read_kda(struct k3_config *c, struct reader *lr)
{
    c->kda_heads = get_int(lr, "num_heads", 1, 4096);
    c->kda_head_dim = get_int(lr, "head_dim", 1, K3_MAX_HEAD_DIM);
    c->conv_kernel = get_int(lr, "short_conv_kernel_size", 1, 64);
    require_bool(lr, "use_full_rank_gate", true);
    c->gate_lower_bound = get_float(lr, "gate_lower_bound", -1e6, 0);
    if (lr->failed)
        return -1;
    if (c->kda_heads > c->kda_head_dim)
        return k3_errf(lr->err,
                       "%s: text_config.linear_attn_config.num_heads: %d heads do not fit A_log, "
                       "which holds one value per head in head_dim (%d) slots",
                       lr->file, c->kda_heads, c->kda_head_dim);
    return 0;
}

/* c->attn from kda_layers and full_attn_layers, which together name every layer once. */
static int read_layer_kinds(struct k3_config *c, struct reader *lr)
{
    unsigned char *seen = calloc((size_t)c->n_layers, 1);
    c->attn = calloc((size_t)c->n_layers, sizeof *c->attn);
    if (!seen || !c->attn) {
        free(seen);
        return k3_errf(lr->err, "%s: out of memory", lr->file);
    }
    int n_kda = mark_layers(lr, "kda_layers", c->n_layers, seen, MARK_KDA);
    int n_mla = mark_layers(lr, "full_attn_layers", c->n_layers, seen, MARK_MLA);
    int rc = lr->failed;
    if (!rc && n_kda + n_mla != c->n_layers) {
        int missing = 0;
        while (seen[missing])
            missing++;
        rc = k3_errf(lr->err,
                     "%s: text_config.linear_attn_config: layer %d is in neither kda_layers nor "
                     "full_attn_layers (they must cover 1..%d)",
                     lr->file, missing + 1, c->n_layers);
    }
    for (int l = 0; !rc && l < c->n_layers; l++)
        c->attn[l] = seen[l] == MARK_MLA ? K3_ATTN_MLA : K3_ATTN_KDA;
    free(seen);
    return rc;
}

static int parse_text(struct k3_config *c, struct reader *r)
{
    read_trunk(c, r);
    read_mla(c, r);
    read_moe(c, r);
    read_rest(c, r);
    if (r->failed || check_text(c, r->file, r->err))
        return -1;
    json_t *lin = json_object_get(r->obj, "linear_attn_config");
    if (!json_is_object(lin))
        return k3_errf(r->err, "%s: text_config.linear_attn_config: missing or not an object",
                       r->file);
    struct reader lr = {r->file, "text_config.linear_attn_config", lin, r->err, 0};
    if (read_kda(c, &lr))
        return -1;
    return read_layer_kinds(c, &lr);
}

int k3_config_parse(struct k3_config *c, const char *name, const char *text, size_t len,
                    struct k3_err *err)
{
    memset(c, 0, sizeof *c);
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return k3_errf(err, "%s: line %d: malformed JSON: %s", name, jerr.line, jerr.text);
    int rc = -1;
    struct reader r = {name, "config", root, err, 0};
    json_t *text_cfg = json_object_get(root, "text_config");
    if (!json_is_object(root)) {
        k3_errf(err, "%s: expected a JSON object", name);
    } else if (!json_is_object(text_cfg)) {
        k3_errf(err, "%s: text_config: missing (not a Kimi-K3 multimodal config.json)", name);
    } else {
        require_string(&r, "model_type", "kimi_k3");
        struct reader tr = {name, "text_config", text_cfg, err, 0};
        if (!r.failed) {
            require_string(&tr, "model_type", "kimi_linear");
            rc = tr.failed ? -1 : parse_text(c, &tr);
        }
        if (!rc) /* quant_config.h: a block must say MXFP4 as K3 ships it; none is read too */
            rc = k3_quant_config_check(root, text_cfg, name, err);
    }
    if (!rc) {
        c->json = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (!c->json)
            rc = k3_errf(err, "%s: out of memory", name);
    }
    json_decref(root);
    if (rc)
        k3_config_free(c);
    return rc;
}

int k3_config_load(struct k3_config *c, const char *path, struct k3_err *err)
{
    memset(c, 0, sizeof *c);
    char *text;
    size_t len;
    if (k3_read_small_file(path, &text, &len, err))
        return -1;
    int rc = k3_config_parse(c, path, text, len, err);
    free(text);
    return rc;
}

int k3_config_named(struct k3_config *c, const char *name, struct k3_err *err)
{
    const char *text = k3_config_preset(name);
    if (text)
        return k3_config_parse(c, name, text, strlen(text), err);
    size_t n = strlen(name);
    if (n < 5 || strcmp(name + n - 5, ".json"))
        return k3_errf(err, "--config %s: not a preset (%s) nor a .json file", name,
                       k3_config_preset_names());
    return k3_config_load(c, name, err);
}

void k3_config_free(struct k3_config *c)
{
    free(c->attn);
    free(c->json);
    memset(c, 0, sizeof *c);
}

int k3_moe_layer_count(const struct k3_config *c)
{
    int n = 0;
    for (int l = 0; l < c->n_layers; l++)
        n += k3_layer_is_moe(c, l);
    return n;
}
