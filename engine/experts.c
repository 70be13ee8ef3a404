#include "engine/experts.h"

#include "engine/model.h"

int k3_expert_store_open(struct k3_expert_store **out, const struct k3_model *m, int capacity,
                         struct k3_err *err)
{
    return m->packed ? k3_expert_store_packed(out, m, capacity, err)
                     : k3_expert_store_checkpoint(out, m, capacity, err);
}
