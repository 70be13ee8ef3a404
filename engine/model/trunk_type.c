/* The trunk's type and its rule by tensor role (trunk_type.h). */
#include "engine/model/trunk_type.h"

#include <string.h>

static const char *const names[] = {[K3_TRUNK_BF16] = "bf16", [K3_TRUNK_Q8_0] = "q8_0"};

int k3_trunk_type_parse(const char *name, enum k3_trunk_type *t, struct k3_err *err)
{
    for (int i = 0; i < (int)(sizeof names / sizeof *names); i++)
        if (!strcmp(name, names[i])) {
            *t = (enum k3_trunk_type)i;
            return 0;
        }
    return k3_errf(err, "--trunk-type %s: not a trunk type (bf16, q8_0)", name);
}

const char *k3_trunk_type_name(enum k3_trunk_type t) { return names[t]; }

bool k3_spec_takes_q8_0(const struct k3_tensor_spec *s)
{
    if (s->kind != K3_T_MATRIX || s->ndim != 2 || s->shape[1] % 32)
        return false;
    switch (s->slot) {
    case K3_SLOT_LM_HEAD:
    case K3_SLOT_KDA_Q: case K3_SLOT_KDA_K: case K3_SLOT_KDA_V: case K3_SLOT_KDA_G:
    case K3_SLOT_KDA_O:
    case K3_SLOT_MLA_QA: case K3_SLOT_MLA_QB: case K3_SLOT_MLA_KVA: case K3_SLOT_MLA_G:
    case K3_SLOT_MLA_O:
    case K3_SLOT_DENSE_GATE: case K3_SLOT_DENSE_UP: case K3_SLOT_DENSE_DOWN:
    case K3_SLOT_SHARED_GATE: case K3_SLOT_SHARED_UP: case K3_SLOT_SHARED_DOWN:
    case K3_SLOT_LATENT_DOWN: case K3_SLOT_LATENT_UP:
        return true;
    default:
        return false;
    }
}

enum k3_dtype k3_spec_trunk_dtype(const struct k3_tensor_spec *s, enum k3_trunk_type t)
{
    return t == K3_TRUNK_Q8_0 && k3_spec_takes_q8_0(s) ? K3_DT_Q8_0 : k3_spec_dtype(s);
}

int k3_trunk_type_of(const struct k3_tensor_spec *specs, const enum k3_dtype *dtypes, int n,
                     enum k3_trunk_type *t, const char *file, struct k3_err *err)
{
    int first = -1;
    for (int i = 0; i < n && first < 0; i++)
        if (k3_spec_takes_q8_0(&specs[i]))
            first = i;
    *t = first >= 0 && dtypes[first] == K3_DT_Q8_0 ? K3_TRUNK_Q8_0 : K3_TRUNK_BF16;
    for (int i = 0; i < n; i++) {
        bool q8 = dtypes[i] == K3_DT_Q8_0;
        if (q8 && !k3_spec_takes_q8_0(&specs[i]))
            return k3_errf(err, "%s: tensor %s is Q8_0, which only the trunk's large "
                           "projections may be", file, specs[i].name);
        if (k3_spec_takes_q8_0(&specs[i]) && q8 != (*t == K3_TRUNK_Q8_0))
            return k3_errf(err, "%s: tensor %s is %s where %s is %s: one trunk type mixes "
                           "two", file, specs[i].name, k3_dtype_name(dtypes[i]),
                           specs[first].name, k3_dtype_name(dtypes[first]));
    }
    return 0;
}
