/* A model opened over a pack, and closed with it.
 *
 * Owns: opening a checkpoint folder as shipped (every tensor validated against the
 * config, the shards seen as a pack: ckpt_view.h) or packed drives (their tensor table
 * checked against what this build computes for the config), loading the small tensors,
 * the tokenizer the model came with, closing both.
 * Does not own: the weights and their binding (model/model.h), reading segments and
 * records (stream/).
 */
#ifndef K3_PACK_MODEL_OPEN_H
#define K3_PACK_MODEL_OPEN_H

#include "engine/base/err.h"
#include "engine/model/model.h"
#include "engine/model/share.h"

/* Opens a checkpoint folder as shipped: validates every tensor against the config, sees
 * the shards as a pack and loads the small tensors.  No segment is bound yet: a stream
 * (stream.h) loads or streams them, as for packed drives. */
int k3_model_open_checkpoint(struct k3_model *m, const char *dir, struct k3_err *err);
/* Opens a pack from its drive folders, in any order: config, tensor table and small
 * tensors, for a process computing `share`'s experts (a share pack must hold that share;
 * a whole pack serves any).  No segment is bound yet: a stream (stream.h) loads or
 * streams them. */
int k3_model_open_packed(struct k3_model *m, const char *const *drives, int n,
                         struct k3_share share, struct k3_err *err);
void k3_model_close(struct k3_model *m);

struct k3_tokenizer;
/* The tokenizer the model came with (checkpoint folder files or the pack's copies). */
int k3_model_tokenizer(const struct k3_model *m, struct k3_tokenizer **tok, struct k3_err *err);

#endif
