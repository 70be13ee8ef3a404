#include "engine/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/files.h"
#include "engine/kernels.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors data is little-endian and read in place");

#define ARENA_ALIGN 64

static size_t align_up(size_t n) { return (n + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN; }

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

/* Finds name and checks its dtype (want, or alt when alt differs) and shape. */
static const struct k3_ckpt_tensor *checked(const struct k3_checkpoint *ck, const char *name,
                                            enum k3_dtype want, enum k3_dtype alt,
                                            const int64_t *shape, int ndim, struct k3_err *err)
{
    const struct k3_ckpt_tensor *t = k3_ckpt_find(ck, name);
    if (!t) {
        k3_errf(err, "%s: tensor %s: missing (config.json implies it)", ck->dir, name);
        return NULL;
    }
    const char *file = ck->shards[t->shard].path;
    if (t->t->dtype != want && t->t->dtype != alt) {
        k3_errf(err, "%s: tensor %s: dtype %s, expected %s", file, name,
                k3_dtype_name(t->t->dtype), k3_dtype_name(want));
        return NULL;
    }
    int same = t->t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = t->t->shape[d] == shape[d];
    if (!same) {
        char got[96], exp[96];
        shape_str(got, sizeof got, t->t->shape, t->t->ndim);
        shape_str(exp, sizeof exp, shape, ndim);
        k3_errf(err, "%s: tensor %s: shape %s, expected %s", file, name, got, exp);
        return NULL;
    }
    return t;
}

static size_t resident_bytes(const struct k3_tensor_spec *s)
{
    return (size_t)numel(s->shape, s->ndim) * (s->kind == K3_T_MATRIX ? 2 : 4);
}

/* Reads a tensor into dst: matrices as stored, vectors widened to f32. */
static int load_tensor(const struct k3_checkpoint *ck, const struct k3_ckpt_tensor *t,
                       const struct k3_tensor_spec *s, void *dst, struct k3_err *err)
{
    if (s->kind == K3_T_MATRIX || t->t->dtype == K3_DT_F32)
        return k3_ckpt_read(ck, t, dst, 0, t->t->nbytes, err);
    int64_t n = numel(s->shape, s->ndim);
    uint16_t *tmp = malloc((size_t)n * 2);
    if (!tmp)
        return k3_errf(err, "out of memory");
    int rc = k3_ckpt_read(ck, t, tmp, 0, t->t->nbytes, err);
    for (int64_t i = 0; !rc && i < n; i++)
        ((float *)dst)[i] = k3_bf16_to_f32(tmp[i]);
    free(tmp);
    return rc;
}

static void multiply_into(float *key, const float *v, int n)
{
    for (int i = 0; i < n; i++)
        key[i] *= v[i];
}

/* Points the weight struct at a loaded tensor. */
static void place(struct k3_model *m, const struct k3_tensor_spec *s, void *p)
{
    struct k3_weights *w = &m->w;
    struct k3_layer_weights *L = s->layer >= 0 ? &w->layers[s->layer] : NULL;
    const uint16_t *mat = p;
    float *vec = p;
    int H = m->cfg.hidden;
    switch (s->slot) {
    case K3_SLOT_EMBED: w->embed = mat; break;
    case K3_SLOT_LM_HEAD: w->lm_head = mat; break;
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
    case K3_SLOT_KDA_Q: L->kda.q_proj = mat; break;
    case K3_SLOT_KDA_K: L->kda.k_proj = mat; break;
    case K3_SLOT_KDA_V: L->kda.v_proj = mat; break;
    case K3_SLOT_KDA_QCONV: L->kda.q_conv = vec; break;
    case K3_SLOT_KDA_KCONV: L->kda.k_conv = vec; break;
    case K3_SLOT_KDA_VCONV: L->kda.v_conv = vec; break;
    case K3_SLOT_KDA_FA: L->kda.f_a = mat; break;
    case K3_SLOT_KDA_FB: L->kda.f_b = mat; break;
    case K3_SLOT_KDA_B: L->kda.b_proj = mat; break;
    case K3_SLOT_KDA_ALOG: L->kda.a_log = vec; break;
    case K3_SLOT_KDA_DTBIAS: L->kda.dt_bias = vec; break;
    case K3_SLOT_KDA_G: L->kda.g_proj = mat; break;
    case K3_SLOT_KDA_ONORM: L->kda.o_norm = vec; break;
    case K3_SLOT_KDA_O: L->kda.o_proj = mat; break;
    case K3_SLOT_MLA_QA: L->mla.q_a = mat; break;
    case K3_SLOT_MLA_QANORM: L->mla.q_a_norm = vec; break;
    case K3_SLOT_MLA_QB: L->mla.q_b = mat; break;
    case K3_SLOT_MLA_KVA: L->mla.kv_a = mat; break;
    case K3_SLOT_MLA_KVANORM: L->mla.kv_a_norm = vec; break;
    case K3_SLOT_MLA_KVB: L->mla.kv_b = mat; break;
    case K3_SLOT_MLA_G: L->mla.g_proj = mat; break;
    case K3_SLOT_MLA_O: L->mla.o_proj = mat; break;
    case K3_SLOT_DENSE_GATE: L->dense.gate = mat; break;
    case K3_SLOT_DENSE_UP: L->dense.up = mat; break;
    case K3_SLOT_DENSE_DOWN: L->dense.down = mat; break;
    case K3_SLOT_ROUTER: L->moe.router = mat; break;
    case K3_SLOT_ROUTER_BIAS: L->moe.router_bias = vec; break;
    case K3_SLOT_SHARED_GATE: L->moe.shared.gate = mat; break;
    case K3_SLOT_SHARED_UP: L->moe.shared.up = mat; break;
    case K3_SLOT_SHARED_DOWN: L->moe.shared.down = mat; break;
    case K3_SLOT_LATENT_DOWN: L->moe.latent_down = mat; break;
    case K3_SLOT_LATENT_NORM: L->moe.latent_norm = vec; break;
    case K3_SLOT_LATENT_UP: L->moe.latent_up = mat; break;
    }
}

static int load_trunk(struct k3_model *m, struct k3_err *err)
{
    struct k3_tensor_spec *specs;
    int n;
    if (k3_trunk_specs(&m->cfg, &specs, &n))
        return k3_errf(err, "out of memory");
    const struct k3_ckpt_tensor **found = calloc((size_t)n, sizeof *found);
    int rc = found ? 0 : k3_errf(err, "out of memory");
    size_t total = 0;
    for (int i = 0; !rc && i < n; i++) {
        const struct k3_tensor_spec *s = &specs[i];
        enum k3_dtype want = k3_spec_dtype(s);
        enum k3_dtype alt = s->kind == K3_T_F32 ? K3_DT_BF16 : want;
        found[i] = checked(m->ckpt, s->name, want, alt, s->shape, s->ndim, err);
        if (!found[i])
            rc = -1;
        total += align_up(resident_bytes(s));
    }
    if (!rc) {
        m->arena = aligned_alloc(ARENA_ALIGN, total ? total : ARENA_ALIGN);
        m->arena_bytes = total;
        if (!m->arena)
            rc = k3_errf(err, "out of memory loading the trunk (%zu MB)", total >> 20);
    }
    char *at = m->arena;
    for (int i = 0; !rc && i < n; i++) {
        rc = load_tensor(m->ckpt, found[i], &specs[i], at, err);
        if (!rc)
            place(m, &specs[i], at);
        at += align_up(resident_bytes(&specs[i]));
    }
    if (!rc && m->cfg.tie_embeddings)
        m->w.lm_head = m->w.embed;
    free(found);
    free(specs);
    return rc;
}

static int locate_experts(struct k3_model *m, struct k3_err *err)
{
    const struct k3_config *c = &m->cfg;
    const struct k3_record_layout *r = &m->record;
    m->experts = calloc((size_t)c->n_layers * c->n_experts, sizeof *m->experts);
    if (!m->experts)
        return k3_errf(err, "out of memory");
    char name[192];
    for (int l = 0; l < c->n_layers; l++) {
        if (!k3_layer_is_moe(c, l))
            continue;
        for (int e = 0; e < c->n_experts; e++)
            for (int p = 0; p < K3_EXPERT_PARTS; p++) {
                k3_expert_tensor_name(name, sizeof name, l, e, (enum k3_expert_part)p);
                const int64_t shape[2] = {r->rows[p], r->cols[p]};
                const struct k3_ckpt_tensor *t =
                    checked(m->ckpt, name, K3_DT_U8, K3_DT_U8, shape, 2, err);
                if (!t)
                    return -1;
                m->experts[(size_t)l * c->n_experts + e].part[p] = t;
            }
    }
    return 0;
}

int k3_model_open_checkpoint(struct k3_model *m, const char *dir, struct k3_err *err)
{
    memset(m, 0, sizeof *m);
    char path[K3_PATH_MAX];
    if (k3_path_join(path, sizeof path, dir, "config.json", err) ||
        k3_config_load(&m->cfg, path, err))
        return -1;
    k3_record_layout_init(&m->record, &m->cfg);
    m->w.layers = calloc((size_t)m->cfg.n_layers, sizeof *m->w.layers);
    int rc = m->w.layers ? 0 : k3_errf(err, "out of memory");
    if (!rc)
        rc = k3_ckpt_open(&m->ckpt, dir, err);
    if (!rc)
        rc = locate_experts(m, err);
    if (!rc)
        rc = load_trunk(m, err);
    if (rc)
        k3_model_close(m);
    return rc;
}

void k3_model_close(struct k3_model *m)
{
    k3_ckpt_close(m->ckpt);
    free(m->experts);
    free(m->arena);
    free(m->w.layers);
    k3_config_free(&m->cfg);
    memset(m, 0, sizeof *m);
}
