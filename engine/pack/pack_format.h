/* The packed streaming layout on the drives: FROZEN on-disk format, version 1 (and 2:
 * the same with a Q8_0 trunk, below).
 *
 * Each drive is a folder holding two files:
 *   k3-uring.data      objects' pieces, every piece at a 4 KiB-aligned offset;
 *   k3-uring.manifest  a k3_pack_header, then sections (config, tokenizer files, the
 *                      object, piece and tensor tables).  Written last: data is synced,
 *                      then the manifest goes to a temporary name, is synced and renamed
 *                      into place, so a pack cut short never opens as a model.
 * Every drive's manifest holds the whole table (so any drive names the model and its
 * siblings); only drive_index and the header checksum differ between drives.
 *
 * Objects: trunk segments (the embedding, one per layer in layer order, the output
 * tensors), then one record per routed expert (MoE layers in order, experts in order).
 * A record is w1, w3, w2 packed nibbles and their E8M0 scales, still MXFP4, back to back
 * (tensors.h, k3_record_layout).  A trunk segment holds its tensors, each at a 64-byte
 * aligned offset.
 *
 * Placement (k3_pack_place): an object of B bytes is cut into m pieces of piece_bytes
 * (4 KiB multiple; the last piece may be shorter); piece j lives on drive
 * (object + j) mod N.  A drive's pieces of one object are stored contiguously, in j
 * order, so each drive serves an object with one extent.  Records are cut into a
 * multiple of N pieces, so every drive holds the same share of every record (to within
 * the 4 KiB rounding) and any set of experts a token routes to loads the drives evenly.
 * With whole-record placement (piece_bytes >= B) record r lives on drive r mod N.
 * With replicas, every piece also has a copy on drive (its drive + 1) mod N, stored after
 * all primary pieces, object by object, contiguous per drive in the same way.
 *
 * A share pack (pack --ranks R: one rank's share of the routed experts, for mpirun -np R)
 * has a K3_SEC_SHARE section naming its rank and R.  It holds every trunk segment and the
 * records of the experts e with e mod R == rank (engine/model/share.h); every other record
 * stays in the object table, with its size and checksum (so every rank's pack names the
 * same model, the same model_xxh64), but with no pieces (n_pieces and piece_bytes zero,
 * first_piece where its pieces would start).  The placement rule above then counts only
 * the objects that have pieces: `object` is the object's place among them, so whole
 * records still go round-robin over the drives.  A pack without the section holds every
 * object (the whole model).  Version 1's header has room for 8 sections, so a share pack
 * has no replica table (config, tokenizer files, four tables and the share fill them).
 *
 * All integers are little-endian.  Changing anything here means a new version.
 *
 * Owns: the on-disk structs and constants, and the placement rule's arithmetic.  Does not
 * own: planning a pack (pack_plan.h), writing one (pack.h), opening one (packed.h).
 */
#ifndef K3_PACK_FORMAT_H
#define K3_PACK_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define K3_PACK_MAGIC "K3URING\x1a"
#define K3_PACK_VERSION 1
/* Version 2 is version 1 whose tensor table may hold Q8_0 matrices (pack --trunk-type
 * q8_0; k3_pack_tensor.dtype): a bf16 pack stays version 1, so builds that read only
 * version 1 refuse a Q8_0 pack by its version instead of misreading its matrices. */
#define K3_PACK_VERSION_Q8_0 2
#define K3_PACK_ALIGN 4096u            /* offsets, piece sizes, data file size */
#define K3_PACK_TENSOR_ALIGN 64u       /* tensor offsets inside a trunk segment */
#define K3_PACK_DATA_FILE "k3-uring.data"
#define K3_PACK_MANIFEST_FILE "k3-uring.manifest"
#define K3_PACK_MAX_SECTIONS 8

enum k3_pack_section_kind {
    K3_SEC_CONFIG = 1,     /* config.json text */
    K3_SEC_TIKTOKEN = 2,   /* tiktoken.model bytes */
    K3_SEC_TOKCONFIG = 3,  /* tokenizer_config.json text */
    K3_SEC_OBJECTS = 4,    /* struct k3_pack_object[] */
    K3_SEC_PIECES = 5,     /* struct k3_pack_piece[] */
    K3_SEC_TENSORS = 6,    /* struct k3_pack_tensor[] */
    K3_SEC_NAMES = 7,      /* NUL-terminated tensor names, referenced by name_offset */
    K3_SEC_REPLICAS = 8,   /* optional: struct k3_pack_replica[], one per piece */
    K3_SEC_SHARE = 9,      /* optional: one struct k3_pack_share (a share pack) */
};

struct k3_pack_section {
    uint32_t kind;
    uint32_t reserved;
    uint64_t offset;       /* from the start of the manifest */
    uint64_t bytes;
};
_Static_assert(sizeof(struct k3_pack_section) == 24, "frozen");

struct k3_pack_header {
    char magic[8];
    uint32_t version;
    uint32_t header_bytes;     /* sizeof(struct k3_pack_header) */
    uint64_t manifest_bytes;   /* the whole manifest file */
    uint64_t manifest_xxh64;   /* XXH64 (seed 0) of the manifest with this field zeroed */
    uint64_t sections_xxh64;   /* XXH64 of all section bytes: equal on every drive */
    uint64_t model_xxh64;      /* XXH64 of the config and every object's xxh3: the model */
    uint8_t pack_id[16];       /* random per pack run: drives of one pack share it */
    uint32_t drive_index;
    uint32_t drive_count;
    uint64_t chunk_bytes;      /* requested stripe unit; 0 = whole records */
    uint64_t data_bytes;       /* size of this drive's data file */
    uint64_t n_objects, n_pieces, n_tensors;
    uint32_t n_trunk_objects;  /* objects [0, n_trunk_objects) are trunk segments */
    uint32_t n_sections;
    struct k3_pack_section sections[K3_PACK_MAX_SECTIONS];
};
_Static_assert(sizeof(struct k3_pack_header) == 312, "frozen");

/* One trunk segment or expert record. */
struct k3_pack_object {
    uint64_t bytes;            /* logical size */
    uint64_t xxh3;             /* XXH3-64 of the logical bytes: independent of placement */
    uint64_t first_piece;      /* index into the piece table */
    uint32_t n_pieces;         /* 0: a record outside a share pack's share */
    uint32_t piece_bytes;      /* every piece but the last */
    int32_t layer;             /* trunk: -1 embedding, 0..L-1 layers, L output; record: layer */
    int32_t expert;            /* -1 for trunk segments */
};
_Static_assert(sizeof(struct k3_pack_object) == 40, "frozen");

struct k3_pack_piece {
    uint64_t offset;           /* in the drive's data file, K3_PACK_ALIGN-aligned */
    uint64_t xxh3;             /* XXH3-64 (seed 0) of the piece's bytes */
    uint32_t bytes;
    uint32_t drive;
};
_Static_assert(sizeof(struct k3_pack_piece) == 24, "frozen");

/* A second copy of a piece (pack --replicas 2), on the drive after the primary's:
 * read when the primary fails its checksum or keeps failing to read. */
struct k3_pack_replica {
    uint64_t offset;
    uint32_t drive;
    uint32_t reserved;
};
_Static_assert(sizeof(struct k3_pack_replica) == 16, "frozen");

/* The share of the routed experts a share pack holds: rank of ranks (2 <= ranks <=
 * K3_MAX_RANKS, rank < ranks). */
struct k3_pack_share {
    uint32_t rank;
    uint32_t ranks;
};
_Static_assert(sizeof(struct k3_pack_share) == 8, "frozen");

struct k3_pack_tensor {
    uint64_t offset;           /* inside its segment, K3_PACK_TENSOR_ALIGN-aligned */
    uint64_t bytes;
    int64_t shape[3];
    uint32_t object;           /* the trunk segment holding it */
    uint32_t dtype;            /* enum k3_dtype: BF16/F32 as shipped, or (version 2 only)
                                * K3_DT_Q8_0 (10) for a large matrix of a pack --trunk-type
                                * q8_0 (blocks of engine/kernels/q8_0.h, bytes = numel/32 x
                                * 34); one pack holds one trunk type
                                * (engine/model/trunk_type.h) */
    uint32_t ndim;
    uint32_t name_offset;      /* into the names section */
};
_Static_assert(sizeof(struct k3_pack_tensor) == 56, "frozen");

/* Drive of piece j of object `index` over n drives. */
static inline uint32_t k3_pack_piece_drive(uint64_t index, uint32_t j, uint32_t n_drives)
{
    return (uint32_t)((index + j) % n_drives);
}

static inline uint64_t k3_pack_round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* Piece size of an expert record of B bytes: the fewest pieces per drive (k) that keep
 * pieces at most `chunk` bytes, then B cut into N·k equal pieces rounded up to 4 KiB.
 * chunk 0 keeps records whole (one drive each, round-robin). */
static inline uint64_t k3_pack_record_piece_bytes(uint64_t B, uint64_t chunk, uint32_t n_drives)
{
    if (chunk == 0)
        return k3_pack_round_up(B, K3_PACK_ALIGN);
    uint64_t per_drive = (B + n_drives - 1) / n_drives;
    uint64_t k = (per_drive + chunk - 1) / chunk;
    uint64_t pieces = (uint64_t)n_drives * k;
    return k3_pack_round_up((B + pieces - 1) / pieces, K3_PACK_ALIGN);
}

#endif
