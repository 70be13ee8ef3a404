/* safetensors: the header of one shard and the index that maps names to shards.
 *
 * Owns: parsing a shard header (an 8-byte little-endian length, then JSON
 * {name: {dtype, shape, data_offsets}}) with every offset, shape and size checked
 * against the file; parsing `model.safetensors.index.json`; writing a shard header.
 * Does not own: reading tensor data (the checkpoint does that), what tensors mean.
 */
#ifndef K3_SAFETENSORS_H
#define K3_SAFETENSORS_H

#include <stdint.h>
#include <stdio.h>

#include "engine/base/err.h"

enum k3_dtype {
    K3_DT_BF16,
    K3_DT_F16,
    K3_DT_F32,
    K3_DT_F64,
    K3_DT_U8,
    K3_DT_I8,
    K3_DT_I16,
    K3_DT_I32,
    K3_DT_I64,
    K3_DT_BOOL,
    K3_DT_Q8_0,  /* not a safetensors dtype: a pack's Q8_0 trunk matrix (kernels/q8_0.h) */
    K3_DT_COUNT,
};

const char *k3_dtype_name(enum k3_dtype t);
int k3_dtype_size(enum k3_dtype t);   /* bytes per element; 0 for K3_DT_Q8_0 (blocks) */
/* Bytes of numel elements of type t (Q8_0: numel/32 blocks of 34 bytes). */
uint64_t k3_dtype_bytes(enum k3_dtype t, int64_t numel);

#define K3_ST_MAX_DIMS 8

struct k3_st_tensor {
    char *name;
    enum k3_dtype dtype;
    int ndim;
    int64_t shape[K3_ST_MAX_DIMS];
    uint64_t offset; /* absolute byte offset in the shard file */
    uint64_t nbytes;
};

struct k3_st_header {
    struct k3_st_tensor *tensors; /* sorted by data offset */
    int n_tensors;
    uint64_t data_start; /* 8 + header length */
};

/* Parses header JSON text (without the 8-byte length) of a shard whose data section
 * holds data_size bytes.  file names the shard in messages.  Pure: no I/O. */
int k3_st_parse(struct k3_st_header *h, const char *file, const char *json, size_t len,
                uint64_t data_size, struct k3_err *err);
/* Reads and parses the header of an open shard of file_size bytes. */
int k3_st_read_header(struct k3_st_header *h, const char *file, int fd, uint64_t file_size,
                      struct k3_err *err);
void k3_st_header_free(struct k3_st_header *h);

/* One entry of an index's weight_map. */
struct k3_st_index_entry {
    char *name;
    char *shard;
};

/* Parses model.safetensors.index.json text; entries come sorted by name. */
int k3_st_parse_index(const char *file, const char *json, size_t len,
                      struct k3_st_index_entry **entries, int *n, struct k3_err *err);
void k3_st_index_free(struct k3_st_index_entry *entries, int n);

/* Writes a shard header for tensors laid out in order with no gaps (offsets are
 * assigned here, relative to the data section, and stored back in .offset). */
int k3_st_write_header(FILE *f, struct k3_st_tensor *tensors, int n, const char *file,
                       struct k3_err *err);

#endif
