/* A packed model opened from its drives (the layout of pack_format.h).
 *
 * Owns: finding the pack from the drive folders alone, in any order, and refusing a
 * missing drive, a drive of another pack or model, a drive-count mismatch, a damaged
 * manifest or a share pack opened as another share, with the drive named; bounds-checking every table before use; reading an
 * object's pieces back into logical order with their checksums verified.
 * Does not own: what objects mean (model.c), batched asynchronous reads (iouring/).
 */
#ifndef K3_PACKED_H
#define K3_PACKED_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/base/err.h"
#include "engine/model/share.h"
#include "engine/pack/pack_format.h"
#include "iouring/file.h"

struct k3_pack_drive {
    char *path;
    struct k3io_file data;
};

/* A checkpoint seen as a pack (ckpt_view.h): once an object's pieces have landed,
 * len bytes at src in its buffer go to dst (in table order: dst <= src, increasing). */
struct k3_pack_move {
    uint64_t src, dst, len;
};

struct k3_packed {
    int n_drives;
    struct k3_pack_drive *drives;  /* by drive index, whatever order they were given in */
    struct k3_pack_header header;  /* drive 0's */
    uint8_t *manifest;             /* drive 0's manifest bytes */
    const struct k3_pack_object *objects;
    const struct k3_pack_piece *pieces;
    const struct k3_pack_tensor *tensors;
    const struct k3_pack_replica *replicas; /* [n_pieces], or NULL */
    const char *names;
    uint64_t names_bytes;
    const char *config, *tiktoken, *tokconfig;   /* section bytes (not NUL-terminated) */
    uint64_t config_len, tiktoken_len, tokconfig_len;
    /* The records held: whole, or a share pack's share (K3_SEC_SHARE); a record outside
     * it has no pieces (n_pieces 0). */
    struct k3_share share;
    /* A checkpoint folder seen as a pack (ckpt_view.h); NULL for a pack.  Its "drives"
     * are the shards, its pieces carry no checksums (xxh3 zero), and no tensor table,
     * config or tokenizer section is held (the folder has them). */
    char *checkpoint;              /* the folder */
    const uint64_t *piece_at;      /* [n_pieces] where each piece lands in its object's
                                    * buffer; NULL: piece j at j x piece_bytes */
    const uint64_t *first_move;    /* [n_objects + 1] object o's moves are
                                    * moves[first_move[o], first_move[o + 1]) */
    const struct k3_pack_move *moves;
};

/* Where piece j of object x lands in a buffer holding x from its first piece on. */
static inline uint64_t k3_packed_piece_at(const struct k3_packed *p, const struct k3_pack_object *x,
                                          uint32_t j)
{
    return p->piece_at ? p->piece_at[x->first_piece + j] - p->piece_at[x->first_piece]
                       : (uint64_t)j * x->piece_bytes;
}

/* The piece of object x whose buffer range holds byte `at` of x's buffer. */
uint32_t k3_packed_piece_of(const struct k3_packed *p, const struct k3_pack_object *x, uint64_t at);

/* 0 when p holds object o's bytes; -1 with err naming the record and the pack's share
 * when o is a record outside a share pack's share (it has no pieces to read). */
int k3_packed_holds(const struct k3_packed *p, uint64_t o, struct k3_err *err);

/* "drive" or "shard": what p's files are called in messages. */
static inline const char *k3_packed_noun(const struct k3_packed *p)
{
    return p->checkpoint ? "shard" : "drive";
}

/* Opens the pack on drive folders paths[0..n), given in any order, for a process that
 * computes `share`'s experts: a share pack must be that share (pack_format.h); a whole
 * pack serves any share. */
int k3_packed_open(struct k3_packed **out, const char *const *paths, int n, struct k3_share share,
                   struct k3_err *err);
void k3_packed_close(struct k3_packed *p);

/* Bytes a buffer needs to receive object o (its pieces rounded up to K3_PACK_ALIGN); 0
 * for a record the pack does not hold. */
uint64_t k3_packed_buffer_bytes(const struct k3_packed *p, uint64_t o);

/* Reads the pieces of object o that cover its first `bytes` bytes into dst (verified). */
int k3_packed_read_prefix(const struct k3_packed *p, uint64_t o, uint64_t bytes, uint8_t *dst,
                          struct k3_err *err);

/* "layer 3 expert 17", "the trunk of layer 3", "the embedding", "the output tensors". */
void k3_packed_describe(const struct k3_packed *p, uint64_t o, char *buf, size_t len);

/* Checks one piece that landed at dst; names drive, offset and object on a mismatch. */
int k3_packed_verify_piece(const struct k3_packed *p, uint64_t o, uint64_t piece,
                           const uint8_t *dst, struct k3_err *err);

/* Parses and checks a manifest held in memory (pure, for tests and fuzzing): header,
 * checksum, section bounds and every table index.  file names it in messages. */
int k3_pack_manifest_check(const uint8_t *m, uint64_t len, const char *file, struct k3_err *err);

#endif
