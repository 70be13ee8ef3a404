/* A checkpoint folder as K3 ships it: config.json, model.safetensors.index.json and the
 * shards it names (or a single model.safetensors).
 *
 * Owns: opening the index and every shard, checking that both agree, finding a tensor
 * by name and reading its bytes.
 * Does not own: which tensors a model needs (tensors.h), what they mean (model.h).
 */
#ifndef K3_CHECKPOINT_H
#define K3_CHECKPOINT_H

#include <stdint.h>

#include "engine/base/err.h"
#include "engine/model/safetensors.h"

struct k3_shard {
    char *file;  /* name inside the folder */
    char *path;
    int fd;
    uint64_t size;
    struct k3_st_header header;
};

struct k3_ckpt_tensor {
    const struct k3_st_tensor *t; /* offset is absolute in the shard */
    int shard;
};

struct k3_checkpoint {
    char *dir;
    struct k3_shard *shards;
    int n_shards;
    struct k3_ckpt_tensor *tensors; /* sorted by name */
    int n_tensors;
};

int k3_ckpt_open(struct k3_checkpoint **out, const char *dir, struct k3_err *err);
void k3_ckpt_close(struct k3_checkpoint *ck);

const struct k3_ckpt_tensor *k3_ckpt_find(const struct k3_checkpoint *ck, const char *name);

/* Reads len bytes at offset off inside tensor t into dst. */
int k3_ckpt_read(const struct k3_checkpoint *ck, const struct k3_ckpt_tensor *t, void *dst,
                 uint64_t off, uint64_t len, struct k3_err *err);

#endif
