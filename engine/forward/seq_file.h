/* A sequence's state in a file: the prompt cache (`run --prompt-cache FILE`).
 *
 * Owns: the file format (FROZEN, version 1, below), writing a sequence's state after a
 * prompt so that a crash never leaves a file that looks whole (FILE.tmp.PID, fsync,
 * rename, the folder synced), and reading it back into a sequence, refusing with one line
 * naming the file another model's state, a damaged or truncated file, another version, or
 * a prompt longer than the sequence's context.
 * Does not own: deciding when to save or resume (the caller: run; serve's store later),
 * printing.
 *
 * What is saved is everything a sequence carries from token to token (k3-model.md §3.9:
 * per KDA layer S and the conv rings, per MLA layer the latent cache, the position;
 * Attention Residuals are rebuilt for every token, §3.2), the prompt's ids, and the
 * logits of the prompt's last position (the first generated token is sampled from them,
 * and KDA's state cannot be stepped back to recompute them).  A state is good only at
 * exactly its position: KDA's recurrence cannot be rewound, so a prompt resumes from a
 * file only when the file's ids are a prefix of it.
 *
 * Layout (all integers and floats little-endian, as the engine's machines are):
 *   struct k3_seq_file_header
 *   int32  ids[pos]
 *   float  logits[vocab]                      the last position's row
 *   per layer l, in order:
 *     KDA: float S[kda_floats], then float rings[conv_floats]    (struct k3_seq's layout)
 *     MLA: float rows[pos][mla_row_floats]    only the positions written
 *   uint64 xxh3                               XXH3-64 of every byte before it
 */
#ifndef K3_SEQ_FILE_H
#define K3_SEQ_FILE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/base/err.h"
#include "engine/base/files.h"
#include "engine/forward/forward.h"

#define K3_SEQ_FILE_MAGIC "K3SEQ\0\0\x1a" /* frozen */
#define K3_SEQ_FILE_VERSION 1            /* frozen: any change to the layout is a new one */

struct k3_seq_file_header {
    char magic[8];            /* K3_SEQ_FILE_MAGIC */
    uint32_t version;         /* K3_SEQ_FILE_VERSION */
    uint32_t header_bytes;    /* sizeof(struct k3_seq_file_header) */
    uint64_t file_bytes;      /* the whole file, checksum included */
    uint64_t model_id;        /* k3_model_id (model.h) */
    uint64_t pack_xxh64;      /* the pack's model_xxh64; 0: saved from a checkpoint folder */
    uint32_t pos;             /* positions the state holds; as many ids follow */
    uint32_t n_layers;
    uint32_t vocab;           /* floats in the logits row */
    uint32_t reserved;        /* 0 */
    uint64_t kda_floats;      /* per KDA layer: the recurrent state [heads][d][d] */
    uint64_t conv_floats;     /* per KDA layer: the conv rings [3][P][W-1] */
    uint64_t mla_row_floats;  /* per MLA layer and position: kv_lora + rope */
};
_Static_assert(sizeof(struct k3_seq_file_header) == 80, "frozen");
_Static_assert(_Alignof(struct k3_seq_file_header) == 8, "frozen");

/* Which model a state belongs to: both must match to load (a pack hash only when both
 * sides have one, since a checkpoint folder has none). */
struct k3_seq_file_model {
    uint64_t id;              /* k3_model_id */
    uint64_t pack_xxh64;      /* 0: a checkpoint folder */
};
/* 0 with err when out of memory. */
int k3_seq_file_model_of(const struct k3_model *m, struct k3_seq_file_model *out,
                         struct k3_err *err);

/* Bytes of the file holding a state at pos positions. */
uint64_t k3_seq_file_bytes(const struct k3_config *c, int pos);

/* ---- writing: begin early (an unwritable folder fails before any work), save once,
 * then end (commits after a save, otherwise removes the temporary file). */
struct k3_seq_writer {
    const char *path;
    char tmp[K3_PATH_MAX];    /* path.tmp.PID */
    int fd;                   /* -1 (or path NULL): none open */
    bool saved;               /* save completed: end renames */
};
/* Creates path.tmp.PID beside path; -1 with err naming it when the folder will not take it. */
int k3_seq_writer_begin(struct k3_seq_writer *w, const char *path, struct k3_err *err);
/* Writes q's state (at q->pos, after the ids ids[0, q->pos)) and logits ([vocab], the last
 * position's row) to the temporary file and syncs it. */
int k3_seq_writer_save(struct k3_seq_writer *w, const struct k3_config *c,
                       const struct k3_seq_file_model *model, const struct k3_seq *q,
                       const int32_t *ids, const float *logits, struct k3_err *err);
/* After a save: renames the temporary file over path and syncs the folder.  Without one
 * (or with abandon): removes the temporary file, leaving path as it was.  Safe to call on
 * a writer that never began (zeroed) or has ended. */
int k3_seq_writer_end(struct k3_seq_writer *w, bool abandon, struct k3_err *err);

/* ---- reading */
enum k3_seq_file_found {
    K3_SEQ_FILE_NONE,         /* no file at path */
    K3_SEQ_FILE_OTHER_PROMPT, /* a valid state whose ids are not a prefix of the prompt */
    K3_SEQ_FILE_RESUMED,      /* q holds the state, at q->pos */
};
/* Reads the state at path into q (fresh: at position 0) if its ids are a prefix of
 * ids[0, n) (equal counts too), with the last position's row into logits [vocab];
 * *found says what happened; *saved_pos is the file's position (0 when none).  A file
 * holding another prompt is read through all the same, its state left out of q.  -1 with
 * err ("path: ...") for another model's file, another version, a damaged or truncated
 * file (checked against its checksum before the call returns), a prefix state longer
 * than q's context, or an I/O error; q is then back at position 0 and zeroed. */
int k3_seq_file_load(const char *path, const struct k3_config *c,
                     const struct k3_seq_file_model *model, struct k3_seq *q, const int32_t *ids,
                     int n, float *logits, enum k3_seq_file_found *found, int *saved_pos,
                     struct k3_err *err);

#endif
