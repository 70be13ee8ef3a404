/* A checkpoint folder seen as a pack: the object and piece tables of pack_format.h,
 * computed in memory from the safetensors headers, so that the read path (engine/stream)
 * streams a checkpoint's trunk segments and expert records as it streams packed drives:
 * the same budget, cache, prediction, backends and O_DIRECT reads.
 *
 * Owns: where each object's bytes sit in the shards: its spans (the 4 KiB-aligned runs
 * of one shard that cover its tensors, merged where they touch), cut into pieces of at
 * most K3_VIEW_TRUNK_PIECE or K3_VIEW_RECORD_PIECE bytes; where each piece lands in the
 * object's buffer; the moves that turn a record's landed spans into the record layout
 * (tensors.h), since the shards do not keep a record's six tensors in that order at
 * that alignment; and the trunk layout of such a model: a segment's tensors are used
 * where their spans land (plan->layout is rewritten so), so trunk segments need no moves.
 * Objects are numbered as a pack numbers them (k3_pack_object_id).
 * Does not own: checking the tensors against the config (model.c's plan), reading.
 *
 * What verification means here: a checkpoint carries no checksums, so a piece is taken
 * as read when the read returns its bytes; the headers were checked when the folder
 * opened (every tensor inside its shard, the shard as long as its header says, dtypes
 * and shapes as config.json implies).  Bytes that changed on the disk are not caught:
 * pack the model for that (`k3-uring pack`).
 */
#ifndef K3_CKPT_VIEW_H
#define K3_CKPT_VIEW_H

#include "engine/base/err.h"
#include "engine/model/model.h"
#include "engine/pack/packed.h"

/* Piece sizes: a trunk piece bounds what an embedding row costs to read (the pieces
 * around it); record pieces are larger, as a record is always read whole. */
#define K3_VIEW_TRUNK_PIECE (1u << 20)
#define K3_VIEW_RECORD_PIECE (4u << 20)

/* Views checkpoint ck, whose plan (checked against config c) names every tensor, as a
 * pack; rewrites plan->layout to where each trunk tensor lands.  The shards are opened
 * again for reading (O_DIRECT where allowed); ck may close afterwards. */
int k3_packed_view_checkpoint(struct k3_packed **out, const struct k3_checkpoint *ck,
                              struct k3_ckpt_plan *plan, const struct k3_config *c,
                              const struct k3_record_layout *rec, struct k3_err *err);

#endif
