#include "engine/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/files.h"
#include "engine/kernels.h"
#include "engine/packed.h"
#include "engine/tokenizer.h"

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
static int check_tensor(const char *file, const char *name, enum k3_dtype dtype, int ndim,
                        const int64_t *shape, enum k3_dtype want, enum k3_dtype alt,
                        int want_ndim, const int64_t *want_shape, struct k3_err *err)
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

static enum k3_dtype alt_dtype(const struct k3_tensor_spec *s)
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
    if (check_tensor(ck->shards[t->shard].path, name, t->t->dtype, t->t->ndim, t->t->shape, want,
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
    p->experts = calloc((size_t)c->n_layers * c->n_experts, sizeof *p->experts);
    uint64_t *bytes = calloc((size_t)p->n_specs, sizeof *bytes);
    int rc = p->trunk && p->experts && bytes ? 0 : k3_errf(err, "out of memory");
    for (int i = 0; !rc && i < p->n_specs; i++) {
        const struct k3_tensor_spec *s = &p->specs[i];
        p->trunk[i] = ckpt_checked(ck, s->name, k3_spec_dtype(s), alt_dtype(s), s->shape,
                                   s->ndim, err);
        rc = p->trunk[i] ? 0 : -1;
        if (!rc)
            bytes[i] = p->trunk[i]->t->nbytes;
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

/* Where each segment starts in the trunk arena (4 KiB-aligned, so packed segments can
 * be read into place with O_DIRECT). */
static int alloc_trunk(struct k3_model *m, const struct k3_trunk_layout *t, uint64_t *seg_off,
                       struct k3_err *err)
{
    uint64_t total = 0;
    for (int s = 0; s < t->n_segments; s++) {
        seg_off[s] = total;
        total += (t->segment_bytes[s] + K3IO_ALIGN - 1) / K3IO_ALIGN * K3IO_ALIGN;
    }
    m->trunk = k3io_alloc(total);
    m->trunk_bytes = total;
    return m->trunk ? 0 : k3_errf(err, "out of memory loading the trunk (%llu MB)",
                                  (unsigned long long)(total >> 20));
}

/* Points every weight into the loaded segments; bf16 vectors are widened to f32. */
static int place_all(struct k3_model *m, const struct k3_tensor_spec *specs, int n,
                     const struct k3_trunk_layout *t, const uint64_t *seg_off,
                     const enum k3_dtype *dtypes, struct k3_err *err)
{
    size_t vec_floats = 0;
    for (int i = 0; i < n; i++)
        if (specs[i].kind != K3_T_MATRIX && dtypes[i] == K3_DT_BF16)
            vec_floats += (size_t)numel(specs[i].shape, specs[i].ndim);
    m->vectors = malloc(sizeof(float) * (vec_floats + 1));
    if (!m->vectors)
        return k3_errf(err, "out of memory");
    float *v = m->vectors;
    for (int i = 0; i < n; i++) {
        uint8_t *raw = m->trunk + seg_off[t->segment[i]] + t->offset[i];
        if (specs[i].kind != K3_T_MATRIX && dtypes[i] == K3_DT_BF16) {
            int64_t count = numel(specs[i].shape, specs[i].ndim);
            for (int64_t k = 0; k < count; k++)
                v[k] = k3_bf16_to_f32(((const uint16_t *)raw)[k]);
            place(m, &specs[i], v);
            v += count;
        } else {
            place(m, &specs[i], raw);
        }
    }
    if (m->cfg.tie_embeddings)
        m->w.lm_head = m->w.embed;
    return 0;
}

static int model_common_init(struct k3_model *m, struct k3_err *err)
{
    const struct k3_config *c = &m->cfg;
    k3_record_layout_init(&m->record, c);
    m->w.layers = calloc((size_t)c->n_layers, sizeof *m->w.layers);
    m->moe_index = calloc((size_t)c->n_layers, sizeof *m->moe_index);
    if (!m->w.layers || !m->moe_index)
        return k3_errf(err, "out of memory");
    for (int l = 0, k = 0; l < c->n_layers; l++)
        m->moe_index[l] = k3_layer_is_moe(c, l) ? k++ : -1;
    return 0;
}

int k3_model_open_checkpoint(struct k3_model *m, const char *dir, struct k3_err *err)
{
    memset(m, 0, sizeof *m);
    char path[K3_PATH_MAX];
    if (k3_path_join(path, sizeof path, dir, "config.json", err) ||
        k3_config_load(&m->cfg, path, err))
        return -1;
    int rc = model_common_init(m, err);
    if (!rc)
        rc = k3_ckpt_open(&m->ckpt, dir, err);
    if (!rc)
        rc = k3_ckpt_plan_init(&m->plan, m->ckpt, &m->cfg, err);
    const struct k3_trunk_layout *t = &m->plan.layout;
    uint64_t *seg_off = rc ? NULL : calloc((size_t)t->n_segments, sizeof *seg_off);
    enum k3_dtype *dtypes = rc ? NULL : calloc((size_t)m->plan.n_specs, sizeof *dtypes);
    if (!rc && (!seg_off || !dtypes))
        rc = k3_errf(err, "out of memory");
    if (!rc)
        rc = alloc_trunk(m, t, seg_off, err);
    for (int i = 0; !rc && i < m->plan.n_specs; i++) {
        const struct k3_ckpt_tensor *ct = m->plan.trunk[i];
        dtypes[i] = ct->t->dtype;
        rc = k3_ckpt_read(m->ckpt, ct, m->trunk + seg_off[t->segment[i]] + t->offset[i], 0,
                          ct->t->nbytes, err);
    }
    if (!rc)
        rc = place_all(m, m->plan.specs, m->plan.n_specs, t, seg_off, dtypes, err);
    free(seg_off);
    free(dtypes);
    if (rc)
        k3_model_close(m);
    return rc;
}

/* The pack's tensor table must be the layout this build computes for its config:
 * every tensor by name, with the expected dtype, shape, segment and offset. */
static int check_packed_tensors(const struct k3_packed *p, const struct k3_tensor_spec *specs,
                                int n, const struct k3_trunk_layout *t, enum k3_dtype *dtypes,
                                struct k3_err *err)
{
    const char *file = p->drives[0].path;
    if ((int)p->header.n_tensors != n)
        return k3_errf(err, "%s: manifest lists %llu trunk tensors, config.json implies %d", file,
                       (unsigned long long)p->header.n_tensors, n);
    for (int i = 0; i < n; i++) {
        const struct k3_pack_tensor *pt = &p->tensors[i];
        const char *name = p->names + pt->name_offset;
        if (strcmp(name, specs[i].name))
            return k3_errf(err, "%s: manifest tensor %d is %s, expected %s", file, i, name,
                           specs[i].name);
        if (check_tensor(file, name, (enum k3_dtype)pt->dtype, (int)pt->ndim, pt->shape,
                         k3_spec_dtype(&specs[i]), alt_dtype(&specs[i]), specs[i].ndim,
                         specs[i].shape, err))
            return -1;
        dtypes[i] = (enum k3_dtype)pt->dtype;
        if (pt->object != (uint32_t)t->segment[i] || pt->offset != t->offset[i])
            return k3_errf(err, "%s: manifest places tensor %s at segment %u offset %llu, "
                           "expected segment %d offset %llu", file, name, pt->object,
                           (unsigned long long)pt->offset, t->segment[i],
                           (unsigned long long)t->offset[i]);
    }
    return 0;
}

int k3_model_open_packed(struct k3_model *m, const char *const *drives, int n,
                         struct k3_err *err)
{
    memset(m, 0, sizeof *m);
    if (k3_packed_open(&m->packed, drives, n, err))
        return -1;
    const struct k3_packed *p = m->packed;
    int rc = k3_config_parse(&m->cfg, p->drives[0].path, p->config, p->config_len, err);
    if (!rc)
        rc = model_common_init(m, err);
    struct k3_tensor_spec *specs = NULL;
    int n_specs = 0;
    if (!rc && k3_trunk_specs(&m->cfg, &specs, &n_specs))
        rc = k3_errf(err, "out of memory");
    enum k3_dtype *dtypes = rc ? NULL : calloc((size_t)n_specs, sizeof *dtypes);
    uint64_t *bytes = rc ? NULL : calloc((size_t)n_specs, sizeof *bytes);
    if (!rc && (!dtypes || !bytes))
        rc = k3_errf(err, "out of memory");
    for (int i = 0; !rc && i < n_specs && i < (int)p->header.n_tensors; i++)
        bytes[i] = p->tensors[i].bytes;
    struct k3_trunk_layout t = {0};
    if (!rc && k3_trunk_layout_init(&t, &m->cfg, specs, n_specs, bytes))
        rc = k3_errf(err, "out of memory");
    if (!rc)
        rc = check_packed_tensors(p, specs, n_specs, &t, dtypes, err);
    if (!rc && (p->header.n_trunk_objects != (uint32_t)t.n_segments ||
                p->header.n_objects != (uint64_t)t.n_segments +
                                           (uint64_t)k3_moe_layer_count(&m->cfg) * m->cfg.n_experts))
        rc = k3_errf(err, "%s: manifest holds %llu objects, config.json implies %d segments and "
                     "%d records", p->drives[0].path, (unsigned long long)p->header.n_objects,
                     t.n_segments, k3_moe_layer_count(&m->cfg) * m->cfg.n_experts);
    for (uint64_t r = t.n_segments; !rc && r < p->header.n_objects; r++)
        if (p->objects[r].bytes != m->record.bytes)
            rc = k3_errf(err, "%s: manifest record %llu is %llu bytes, config.json implies %llu",
                         p->drives[0].path, (unsigned long long)r,
                         (unsigned long long)p->objects[r].bytes,
                         (unsigned long long)m->record.bytes);
    uint64_t *seg_off = rc ? NULL : calloc((size_t)t.n_segments, sizeof *seg_off);
    if (!rc && !seg_off)
        rc = k3_errf(err, "out of memory");
    if (!rc)
        rc = alloc_trunk(m, &t, seg_off, err);
    for (int s = 0; !rc && s < t.n_segments; s++)
        rc = k3_packed_read_object(p, (uint64_t)s, m->trunk + seg_off[s], err);
    if (!rc)
        rc = place_all(m, specs, n_specs, &t, seg_off, dtypes, err);
    free(seg_off);
    free(bytes);
    free(dtypes);
    free(specs);
    k3_trunk_layout_free(&t);
    if (rc)
        k3_model_close(m);
    return rc;
}

int k3_model_tokenizer(const struct k3_model *m, struct k3_tokenizer **tok, struct k3_err *err)
{
    if (!m->packed)
        return k3_tok_load(tok, m->ckpt->dir, m->cfg.vocab, NULL, false, err);
    const struct k3_packed *p = m->packed;
    if (!p->tiktoken_len || !p->tokconfig_len)
        return k3_errf(err, "drive %s: the pack carries no tokenizer (its checkpoint had no "
                       "tiktoken.model); give the prompt as --ids", p->drives[0].path);
    return k3_tok_load_mem(tok, p->drives[0].path, (const uint8_t *)p->tiktoken, p->tiktoken_len,
                           p->tokconfig, p->tokconfig_len, m->cfg.vocab, NULL, err);
}

uint64_t k3_model_record_object(const struct k3_model *m, int layer, int expert)
{
    return (uint64_t)m->cfg.n_layers + 2 +
           (uint64_t)m->moe_index[layer] * (uint64_t)m->cfg.n_experts + (uint64_t)expert;
}

void k3_model_close(struct k3_model *m)
{
    k3_ckpt_plan_free(&m->plan);
    k3_ckpt_close(m->ckpt);
    k3_packed_close(m->packed);
    free(m->trunk);
    free(m->vectors);
    free(m->moe_index);
    free(m->w.layers);
    k3_config_free(&m->cfg);
    memset(m, 0, sizeof *m);
}
