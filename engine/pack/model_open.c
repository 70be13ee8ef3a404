/* A model opened over a pack: packed drives, or a checkpoint folder seen as one
 * (ckpt_view.h), and closed with it.  Here rather than in model/, which knows nothing of
 * packs: pack/ builds on model/'s config and tensor plan, so the two rooms do not
 * include each other. */
#include "engine/pack/model_open.h"

#include <stdlib.h>
#include <string.h>

#include "engine/base/files.h"
#include "engine/pack/ckpt_view.h"
#include "engine/pack/packed.h"
#include "engine/text/tokenizer.h"
#include "iouring/reader.h"

int k3_model_open_checkpoint(struct k3_model *m, const char *dir, struct k3_err *err)
{
    memset(m, 0, sizeof *m);
    m->from_checkpoint = true;
    char path[K3_PATH_MAX];
    if (k3_path_join(path, sizeof path, dir, "config.json", err) ||
        k3_config_load(&m->cfg, path, err))
        return -1;
    struct k3_checkpoint *ck = NULL;
    int rc = k3_model_init(m, err);
    if (!rc)
        rc = k3_ckpt_open(&ck, dir, err);
    if (!rc)
        rc = k3_ckpt_plan_init(&m->plan, ck, &m->cfg, err);
    if (!rc)
        rc = k3_packed_view_checkpoint(&m->packed, ck, &m->plan, &m->cfg, &m->record, err);
    if (!rc)
        rc = k3_model_checkpoint_vectors(m, ck, err);
    if (!rc)
        rc = k3_model_check_a_log(m, dir, err);
    /* From here the view reads the shards: the parsed headers and the plan's pointers
     * into them go. */
    free(m->plan.trunk);
    free(m->plan.experts);
    m->plan.trunk = NULL;
    m->plan.experts = NULL;
    k3_ckpt_close(ck);
    if (rc)
        k3_model_close(m);
    return rc;
}

/* The pack's tensor table must be the layout this build computes for its config:
 * every tensor by name, with the expected dtype, shape, segment and offset. */
static int check_packed_tensors(const struct k3_packed *p, const struct k3_ckpt_plan *plan,
                                struct k3_err *err)
{
    const char *file = p->drives[0].path;
    for (int i = 0; i < plan->n_specs; i++) {
        const struct k3_pack_tensor *pt = &p->tensors[i];
        const struct k3_tensor_spec *s = &plan->specs[i];
        const char *name = p->names + pt->name_offset;
        if (strcmp(name, s->name))
            return k3_errf(err, "%s: manifest tensor %d is %s, expected %s", file, i, name,
                           s->name);
        enum k3_dtype alt = k3_spec_takes_q8_0(s) ? K3_DT_Q8_0 : k3_spec_alt_dtype(s);
        if (pt->dtype >= K3_DT_COUNT)
            return k3_errf(err, "%s: manifest tensor %s has dtype %u, which this build does not "
                           "know", file, name, pt->dtype);
        if (k3_tensor_check(file, name, (enum k3_dtype)pt->dtype, (int)pt->ndim, pt->shape,
                         k3_spec_dtype(s), alt, s->ndim, s->shape, err))
            return -1;
        if (pt->dtype == K3_DT_Q8_0 && p->header.version < K3_PACK_VERSION_Q8_0)
            return k3_errf(err, "%s: manifest tensor %s is Q8_0 in a format version %u pack "
                           "(Q8_0 needs version %u)", file, name, p->header.version,
                           K3_PACK_VERSION_Q8_0);
        if (pt->bytes != k3_dtype_bytes((enum k3_dtype)pt->dtype, k3_spec_numel(s)))
            return k3_errf(err, "%s: manifest tensor %s is %llu bytes, its dtype and shape "
                           "make %llu", file, name, (unsigned long long)pt->bytes,
                           (unsigned long long)k3_dtype_bytes((enum k3_dtype)pt->dtype,
                                                              k3_spec_numel(s)));
        if (pt->object != (uint32_t)plan->layout.segment[i] ||
            pt->offset != plan->layout.offset[i])
            return k3_errf(err, "%s: manifest places tensor %s at segment %u offset %llu, "
                           "expected segment %d offset %llu", file, name, pt->object,
                           (unsigned long long)pt->offset, plan->layout.segment[i],
                           (unsigned long long)plan->layout.offset[i]);
    }
    return 0;
}

/* The tensor plan of a pack: the config's specs, with the dtypes and layout its
 * tensor table records (checked against what this build computes). */
static int packed_plan(struct k3_model *m, struct k3_err *err)
{
    const struct k3_packed *p = m->packed;
    struct k3_ckpt_plan *plan = &m->plan;
    if (k3_trunk_specs(&m->cfg, &plan->specs, &plan->n_specs))
        return k3_errf(err, "out of memory");
    if ((int)p->header.n_tensors != plan->n_specs)
        return k3_errf(err, "%s: manifest lists %llu trunk tensors, config.json implies %d",
                       p->drives[0].path, (unsigned long long)p->header.n_tensors, plan->n_specs);
    plan->dtypes = calloc((size_t)plan->n_specs, sizeof *plan->dtypes);
    uint64_t *bytes = calloc((size_t)plan->n_specs, sizeof *bytes);
    int rc = plan->dtypes && bytes ? 0 : k3_errf(err, "out of memory");
    for (int i = 0; !rc && i < plan->n_specs; i++) {
        bytes[i] = p->tensors[i].bytes;
        plan->dtypes[i] = (enum k3_dtype)p->tensors[i].dtype;
    }
    if (!rc && k3_trunk_layout_init(&plan->layout, &m->cfg, plan->specs, plan->n_specs, bytes))
        rc = k3_errf(err, "out of memory");
    free(bytes);
    if (!rc)
        rc = check_packed_tensors(p, plan, err);
    if (!rc)
        rc = k3_trunk_type_of(plan->specs, plan->dtypes, plan->n_specs, &m->trunk_type,
                              p->drives[0].path, err);
    uint64_t records = (uint64_t)k3_moe_layer_count(&m->cfg) * (uint64_t)m->cfg.n_experts;
    if (!rc && (p->header.n_trunk_objects != (uint32_t)plan->layout.n_segments ||
                p->header.n_objects != (uint64_t)plan->layout.n_segments + records))
        rc = k3_errf(err, "%s: manifest holds %llu objects, config.json implies %d segments and "
                     "%llu records", p->drives[0].path, (unsigned long long)p->header.n_objects,
                     plan->layout.n_segments, (unsigned long long)records);
    for (uint64_t r = (uint64_t)plan->layout.n_segments; !rc && r < p->header.n_objects; r++)
        if (p->objects[r].bytes != m->record.bytes)
            rc = k3_errf(err, "%s: manifest record %llu is %llu bytes, config.json implies %llu",
                         p->drives[0].path, (unsigned long long)r,
                         (unsigned long long)p->objects[r].bytes,
                         (unsigned long long)m->record.bytes);
    return rc;
}

int k3_model_open_packed(struct k3_model *m, const char *const *drives, int n,
                         struct k3_share share, struct k3_err *err)
{
    memset(m, 0, sizeof *m);
    if (k3_packed_open(&m->packed, drives, n, share, err))
        return -1;
    const struct k3_packed *p = m->packed;
    m->where = p->drives[0].path;
    int rc = k3_config_parse(&m->cfg, p->drives[0].path, p->config, p->config_len, err);
    if (!rc)
        rc = k3_model_init(m, err);
    if (!rc)
        rc = packed_plan(m, err);
    if (!rc)
        rc = k3_model_alloc_vectors(m, err);
    /* Small tensors come first in each segment: read only the pieces holding them. */
    float *v = m->vectors;
    for (int s = 0; !rc && s < m->plan.layout.n_segments; s++) {
        uint64_t prefix = k3_model_vector_prefix(&m->plan, s);
        if (!prefix)
            continue;
        uint8_t *buf = k3io_alloc(k3_pack_round_up(prefix, p->objects[s].piece_bytes) + K3IO_ALIGN);
        rc = buf ? k3_packed_read_prefix(p, (uint64_t)s, prefix, buf, err)
                 : k3_errf(err, "out of memory");
        if (!rc)
            v = k3_model_load_vectors(m, s, buf, v);
        free(buf);
    }
    if (!rc)
        rc = k3_model_check_a_log(m, p->drives[0].path, err);
    if (rc)
        k3_model_close(m);
    return rc;
}

int k3_model_tokenizer(const struct k3_model *m, struct k3_tokenizer **tok, struct k3_err *err)
{
    const struct k3_packed *p = m->packed;
    if (p->checkpoint)
        return k3_tok_load(tok, p->checkpoint, m->cfg.vocab, NULL, false, err);
    if (!p->tiktoken_len || !p->tokconfig_len)
        return k3_errf(err, "drive %s: the pack carries no tokenizer (its checkpoint had no "
                       "tiktoken.model); give the prompt as --ids", p->drives[0].path);
    return k3_tok_load_mem(tok, p->drives[0].path, (const uint8_t *)p->tiktoken, p->tiktoken_len,
                           p->tokconfig, p->tokconfig_len, m->cfg.vocab, NULL, err);
}

void k3_model_close(struct k3_model *m)
{
    k3_packed_close(m->packed);
    k3_model_free(m);
}
