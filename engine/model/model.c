#include "engine/model/model.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "engine/kernels/kernels.h"
#include "engine/kernels/q8_0.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors and pack data are little-endian and used in place");

static int64_t numel(const int64_t *shape, int ndim)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

static void shape_str(char *buf, size_t len, const int64_t *shape, int ndim)
{
    size_t at = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && at < len; d++)
        at += (size_t)snprintf(buf + at, len - at, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (at < len)
        snprintf(buf + at, len - at, "]");
}

/* A found tensor against what the config implies: dtype (want, or alt) and shape. */
int k3_tensor_check(const char *file, const char *name, enum k3_dtype dtype, int ndim,
                    const int64_t *shape, enum k3_dtype want, enum k3_dtype alt, int want_ndim,
                    const int64_t *want_shape, struct k3_err *err)
{
    if (dtype != want && dtype != alt)
        return k3_errf(err, "%s: tensor %s: dtype %s, expected %s", file, name,
                       k3_dtype_name(dtype), k3_dtype_name(want));
    int same = ndim == want_ndim;
    for (int d = 0; same && d < ndim; d++)
        same = shape[d] == want_shape[d];
    if (!same) {
        char got[96], exp[96];
        shape_str(got, sizeof got, shape, ndim);
        shape_str(exp, sizeof exp, want_shape, want_ndim);
        return k3_errf(err, "%s: tensor %s: shape %s, expected %s", file, name, got, exp);
    }
    return 0;
}

enum k3_dtype k3_spec_alt_dtype(const struct k3_tensor_spec *s)
{
    /* The sources disagree on the small F32 tensors; BF16 is accepted for them. */
    return s->kind == K3_T_F32 ? K3_DT_BF16 : k3_spec_dtype(s);
}

static const struct k3_ckpt_tensor *ckpt_checked(const struct k3_checkpoint *ck, const char *name,
                                                 enum k3_dtype want, enum k3_dtype alt,
                                                 const int64_t *shape, int ndim,
                                                 struct k3_err *err)
{
    const struct k3_ckpt_tensor *t = k3_ckpt_find(ck, name);
    if (!t) {
        k3_errf(err, "%s: tensor %s: missing (config.json implies it)", ck->dir, name);
        return NULL;
    }
    if (k3_tensor_check(ck->shards[t->shard].path, name, t->t->dtype, t->t->ndim, t->t->shape, want,
                     alt, ndim, shape, err))
        return NULL;
    return t;
}

int k3_ckpt_plan_init(struct k3_ckpt_plan *p, const struct k3_checkpoint *ck,
                      const struct k3_config *c, struct k3_err *err)
{
    memset(p, 0, sizeof *p);
    if (k3_trunk_specs(c, &p->specs, &p->n_specs))
        return k3_errf(err, "out of memory");
    p->trunk = calloc((size_t)p->n_specs, sizeof *p->trunk);
    p->dtypes = calloc((size_t)p->n_specs, sizeof *p->dtypes);
    p->experts = calloc((size_t)c->n_layers * c->n_experts, sizeof *p->experts);
    uint64_t *bytes = calloc((size_t)p->n_specs, sizeof *bytes);
    int rc = p->trunk && p->dtypes && p->experts && bytes ? 0 : k3_errf(err, "out of memory");
    for (int i = 0; !rc && i < p->n_specs; i++) {
        const struct k3_tensor_spec *s = &p->specs[i];
        p->trunk[i] = ckpt_checked(ck, s->name, k3_spec_dtype(s), k3_spec_alt_dtype(s), s->shape,
                                   s->ndim, err);
        rc = p->trunk[i] ? 0 : -1;
        if (!rc) {
            bytes[i] = p->trunk[i]->t->nbytes;
            p->dtypes[i] = p->trunk[i]->t->dtype;
        }
    }
    struct k3_record_layout r;
    k3_record_layout_init(&r, c);
    char name[192];
    for (int l = 0; !rc && l < c->n_layers; l++) {
        if (!k3_layer_is_moe(c, l))
            continue;
        for (int e = 0; !rc && e < c->n_experts; e++)
            for (int part = 0; !rc && part < K3_EXPERT_PARTS; part++) {
                k3_expert_tensor_name(name, sizeof name, l, e, (enum k3_expert_part)part);
                const int64_t shape[2] = {r.rows[part], r.cols[part]};
                const struct k3_ckpt_tensor *t =
                    ckpt_checked(ck, name, K3_DT_U8, K3_DT_U8, shape, 2, err);
                rc = t ? 0 : -1;
                p->experts[(size_t)l * c->n_experts + e].part[part] = t;
            }
    }
    if (!rc && k3_trunk_layout_init(&p->layout, c, p->specs, p->n_specs, bytes))
        rc = k3_errf(err, "out of memory");
    free(bytes);
    if (rc)
        k3_ckpt_plan_free(p);
    return rc;
}

void k3_ckpt_plan_free(struct k3_ckpt_plan *p)
{
    free(p->specs);
    free(p->dtypes);
    free(p->trunk);
    free(p->experts);
    k3_trunk_layout_free(&p->layout);
    memset(p, 0, sizeof *p);
}

static void multiply_into(float *key, const float *v, int n)
{
    for (int i = 0; i < n; i++)
        key[i] *= v[i];
}

/* Points the weight struct at a loaded tensor, held as type (matrices). */
static void place(struct k3_model *m, const struct k3_tensor_spec *s, void *p,
                  enum k3_mat_type type)
{
    struct k3_weights *w = &m->w;
    struct k3_layer_weights *L = s->layer >= 0 ? &w->layers[s->layer] : NULL;
    const uint16_t *mat = p;
    struct k3_mat big = {.data = p, .type = type};
    float *vec = p;
    int H = m->cfg.hidden;
    switch (s->slot) {
    case K3_SLOT_EMBED: w->embed = mat; break;
    case K3_SLOT_LM_HEAD: w->lm_head = big; break;
    case K3_SLOT_FINAL_NORM: w->final_norm = vec; break;
    /* AttnRes: the norm loads first (table order), the projection multiplies into it. */
    case K3_SLOT_OUT_RES_NORM: w->out_res_key = vec; break;
    case K3_SLOT_OUT_RES_PROJ: multiply_into(w->out_res_key, vec, H); break;
    case K3_SLOT_INPUT_NORM: L->input_norm = vec; break;
    case K3_SLOT_POST_ATTN_NORM: L->post_attn_norm = vec; break;
    case K3_SLOT_ATTN_RES_NORM: L->attn_res_key = vec; break;
    case K3_SLOT_ATTN_RES_PROJ: multiply_into(L->attn_res_key, vec, H); break;
    case K3_SLOT_MLP_RES_NORM: L->mlp_res_key = vec; break;
    case K3_SLOT_MLP_RES_PROJ: multiply_into(L->mlp_res_key, vec, H); break;
    case K3_SLOT_KDA_Q: L->kda.q_proj = big; break;
    case K3_SLOT_KDA_K: L->kda.k_proj = big; break;
    case K3_SLOT_KDA_V: L->kda.v_proj = big; break;
    case K3_SLOT_KDA_QCONV: L->kda.q_conv = vec; break;
    case K3_SLOT_KDA_KCONV: L->kda.k_conv = vec; break;
    case K3_SLOT_KDA_VCONV: L->kda.v_conv = vec; break;
    case K3_SLOT_KDA_FA: L->kda.f_a = mat; break;
    case K3_SLOT_KDA_FB: L->kda.f_b = mat; break;
    case K3_SLOT_KDA_B: L->kda.b_proj = mat; break;
    case K3_SLOT_KDA_ALOG: L->kda.a_log = vec; break;
    case K3_SLOT_KDA_DTBIAS: L->kda.dt_bias = vec; break;
    case K3_SLOT_KDA_G: L->kda.g_proj = big; break;
    case K3_SLOT_KDA_ONORM: L->kda.o_norm = vec; break;
    case K3_SLOT_KDA_O: L->kda.o_proj = big; break;
    case K3_SLOT_MLA_QA: L->mla.q_a = big; break;
    case K3_SLOT_MLA_QANORM: L->mla.q_a_norm = vec; break;
    case K3_SLOT_MLA_QB: L->mla.q_b = big; break;
    case K3_SLOT_MLA_KVA: L->mla.kv_a = big; break;
    case K3_SLOT_MLA_KVANORM: L->mla.kv_a_norm = vec; break;
    case K3_SLOT_MLA_KVB: L->mla.kv_b = mat; break;
    case K3_SLOT_MLA_G: L->mla.g_proj = big; break;
    case K3_SLOT_MLA_O: L->mla.o_proj = big; break;
    case K3_SLOT_DENSE_GATE: L->dense.gate = big; break;
    case K3_SLOT_DENSE_UP: L->dense.up = big; break;
    case K3_SLOT_DENSE_DOWN: L->dense.down = big; break;
    case K3_SLOT_ROUTER: L->moe.router = mat; break;
    case K3_SLOT_ROUTER_BIAS: L->moe.router_bias = vec; break;
    case K3_SLOT_SHARED_GATE: L->moe.shared.gate = big; break;
    case K3_SLOT_SHARED_UP: L->moe.shared.up = big; break;
    case K3_SLOT_SHARED_DOWN: L->moe.shared.down = big; break;
    case K3_SLOT_LATENT_DOWN: L->moe.latent_down = big; break;
    case K3_SLOT_LATENT_NORM: L->moe.latent_norm = vec; break;
    case K3_SLOT_LATENT_UP: L->moe.latent_up = big; break;
    }
}

int64_t k3_spec_numel(const struct k3_tensor_spec *s) { return numel(s->shape, s->ndim); }

enum k3_dtype k3_model_held_dtype(const struct k3_model *m, int i)
{
    const struct k3_ckpt_plan *p = &m->plan;
    return m->quantize_on_land ? k3_spec_trunk_dtype(&p->specs[i], K3_TRUNK_Q8_0) : p->dtypes[i];
}

void k3_model_bind_segment(struct k3_model *m, int seg, const uint8_t *base)
{
    const struct k3_ckpt_plan *p = &m->plan;
    m->segment_base[seg] = base;
    for (int i = 0; i < p->n_specs; i++)
        if (p->specs[i].kind == K3_T_MATRIX && p->layout.segment[i] == seg)
            place(m, &p->specs[i], (void *)(base + p->layout.offset[i]),
                  k3_model_held_dtype(m, i) == K3_DT_Q8_0 ? K3_MAT_Q8_0 : K3_MAT_BF16);
    if (seg == K3_SEG_EMBED && m->cfg.tie_embeddings)
        m->w.lm_head = k3_mat_bf16(m->w.embed);
}

void k3_model_segment_landed(const struct k3_model *m, int seg, uint8_t *base)
{
    const struct k3_ckpt_plan *p = &m->plan;
    if (!m->quantize_on_land)
        return;
    for (int i = 0; i < p->n_specs; i++)
        if (p->layout.segment[i] == seg && k3_spec_takes_q8_0(&p->specs[i])) {
            uint8_t *at = base + p->layout.offset[i];
            k3_q8_0_quantize_bf16((const uint16_t *)at, numel(p->specs[i].shape, p->specs[i].ndim),
                                  (struct k3_q8_0_block *)at);
        }
}

int k3_model_use_trunk_type(struct k3_model *m, int want, struct k3_err *err)
{
    for (int seg = 0; seg < k3_seg_count(&m->cfg); seg++)
        assert(!m->segment_base[seg]); /* before a stream binds (or lands) any segment */
    if (want == K3_TRUNK_AS_STORED || (enum k3_trunk_type)want == m->trunk_type)
        return 0;
    if (!m->from_checkpoint)
        return k3_errf(err, "drive %s: the pack's trunk is %s, not the %s --trunk-type asks for "
                       "(pack again with --trunk-type %s, or leave --trunk-type out)",
                       m->where, k3_trunk_type_name(m->trunk_type),
                       k3_trunk_type_name((enum k3_trunk_type)want),
                       k3_trunk_type_name((enum k3_trunk_type)want));
    m->quantize_on_land = want == K3_TRUNK_Q8_0;
    m->trunk_type = (enum k3_trunk_type)want;
    return 0;
}

/* Copies small tensor i (as f32) from src into the vector arena at v; returns where the
 * next one goes. */
static float *load_vector(struct k3_model *m, int i, const uint8_t *src, float *v)
{
    const struct k3_ckpt_plan *p = &m->plan;
    int64_t n = k3_spec_numel(&p->specs[i]);
    if (p->dtypes[i] == K3_DT_BF16)
        for (int64_t k = 0; k < n; k++)
            v[k] = k3_bf16_to_f32(((const uint16_t *)src)[k]);
    else
        memcpy(v, src, (size_t)n * sizeof(float));
    place(m, &p->specs[i], v, K3_MAT_BF16);
    return v + n;
}

static bool is_vector_of(const struct k3_ckpt_plan *p, int i, int seg)
{
    return p->specs[i].kind != K3_T_MATRIX && p->layout.segment[i] == seg;
}

/* Copies segment seg's small tensors (as f32) out of its bytes at raw; v is where the
 * next one goes in the vector arena. */
float *k3_model_load_vectors(struct k3_model *m, int seg, const uint8_t *raw, float *v)
{
    for (int i = 0; i < m->plan.n_specs; i++)
        if (is_vector_of(&m->plan, i, seg))
            v = load_vector(m, i, raw + m->plan.layout.offset[i], v);
    return v;
}

/* Bytes of segment seg up to the end of its last small tensor. */
uint64_t k3_model_vector_prefix(const struct k3_ckpt_plan *p, int seg)
{
    uint64_t end = 0;
    for (int i = 0; i < p->n_specs; i++)
        if (p->specs[i].kind != K3_T_MATRIX && p->layout.segment[i] == seg) {
            uint64_t e = p->layout.offset[i] + (uint64_t)k3_spec_numel(&p->specs[i]) *
                                                   (uint64_t)k3_dtype_size(p->dtypes[i]);
            end = e > end ? e : end;
        }
    return end;
}

int k3_model_init(struct k3_model *m, struct k3_err *err)
{
    const struct k3_config *c = &m->cfg;
    k3_record_layout_init(&m->record, c);
    m->w.layers = calloc((size_t)c->n_layers, sizeof *m->w.layers);
    m->moe_index = calloc((size_t)c->n_layers, sizeof *m->moe_index);
    m->segment_base = calloc((size_t)k3_seg_count(c), sizeof *m->segment_base);
    if (!m->w.layers || !m->moe_index || !m->segment_base)
        return k3_errf(err, "out of memory");
    for (int l = 0, k = 0; l < c->n_layers; l++)
        m->moe_index[l] = k3_layer_is_moe(c, l) ? k++ : -1;
    return 0;
}

/* The vector arena: every small tensor as f32. */
int k3_model_alloc_vectors(struct k3_model *m, struct k3_err *err)
{
    size_t floats = 0;
    for (int i = 0; i < m->plan.n_specs; i++)
        if (m->plan.specs[i].kind != K3_T_MATRIX)
            floats += (size_t)k3_spec_numel(&m->plan.specs[i]);
    m->vectors = malloc(sizeof(float) * (floats + 1));
    return m->vectors ? 0 : k3_errf(err, "out of memory");
}

/* Every small tensor (as f32), read from its shard, in the order load_vectors takes them. */
int k3_model_checkpoint_vectors(struct k3_model *m, const struct k3_checkpoint *ck,
                                struct k3_err *err)
{
    if (k3_model_alloc_vectors(m, err))
        return -1;
    const struct k3_ckpt_plan *p = &m->plan;
    float *v = m->vectors;
    for (int s = 0; s < p->layout.n_segments; s++)
        for (int i = 0; i < p->n_specs; i++) {
            if (!is_vector_of(p, i, s))
                continue;
            uint64_t n = p->trunk[i]->t->nbytes;
            uint8_t *buf = malloc(n + 1);
            int rc = buf ? k3_ckpt_read(ck, p->trunk[i], buf, 0, n, err) : k3_errf(err, "out of memory");
            if (!rc)
                v = load_vector(m, i, buf, v);
            free(buf);
            if (rc)
                return -1;
        }
    return 0;
}

/* A_log: K3 may ship it padded to head_dim where Moonshot's modeling code declares
 * num_heads values (one per head); the engine reads the first num_heads.  The padding must
 * be zero (k3-model.md §2): a value there means the tensor is laid out otherwise than one
 * value per head, so the model is refused rather than run with the wrong decay. */
int k3_model_check_a_log(const struct k3_model *m, const char *where, struct k3_err *err)
{
    const struct k3_config *c = &m->cfg;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->attn[l] != K3_ATTN_KDA)
            continue;
        const float *a = m->w.layers[l].kda.a_log;
        for (int i = c->kda_heads; i < c->kda_head_dim; i++)
            if (a[i] != 0.0f)
                return k3_errf(err, "%s: tensor %slayers.%d.self_attn.A_log: %g at index %d, "
                               "where the padding past num_heads %d must be zero", where,
                               K3_TENSOR_PREFIX, l, a[i], i, c->kda_heads);
    }
    return 0;
}

uint64_t k3_model_record_object(const struct k3_model *m, int layer, int expert)
{
    return (uint64_t)k3_seg_count(&m->cfg) +
           (uint64_t)m->moe_index[layer] * (uint64_t)m->cfg.n_experts + (uint64_t)expert;
}

uint64_t k3_model_id(const struct k3_model *m)
{
    const struct k3_ckpt_plan *p = &m->plan;
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return 0;
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, m->cfg.json, strlen(m->cfg.json) + 1);
    uint64_t floats = 0;
    for (int i = 0; i < p->n_specs; i++) {
        const struct k3_tensor_spec *s = &p->specs[i];
        int64_t row[4] = {k3_model_held_dtype(m, i), s->shape[0], s->ndim > 1 ? s->shape[1] : 0,
                          s->ndim > 2 ? s->shape[2] : 0};
        XXH3_64bits_update(st, s->name, strlen(s->name) + 1);
        XXH3_64bits_update(st, row, sizeof row);
        if (s->kind != K3_T_MATRIX)
            floats += (uint64_t)k3_spec_numel(s);
    }
    XXH3_64bits_update(st, m->vectors, floats * sizeof(float));
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

void k3_model_free(struct k3_model *m)
{
    free(m->segment_base);
    k3_ckpt_plan_free(&m->plan);
    free(m->vectors);
    free(m->moe_index);
    free(m->w.layers);
    k3_config_free(&m->cfg);
    memset(m, 0, sizeof *m);
}
