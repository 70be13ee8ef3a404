/* Kernel variants: the table each ISA fills, and the selection among them.
 *
 * Owns: the list of variants (scalar reference, AVX2, AVX-512), which one runs, and the
 * per-variant entry points the public kernels of kernels.h and mxfp4.h dispatch to.
 * Invariant: every entry of every table returns the same bytes as the scalar one for the
 * same inputs (the summation order of kernels.h and mxfp4.h; tests/unit/test_kernels*.c).
 * The SIMD files are compiled for baseline x86-64 like the rest; their functions carry a
 * target attribute, and a table is only selected when the CPU has what it needs.
 * Internal to the kernels, the tests and bench/kernels.c; the engine includes kernels.h.
 */
#ifndef K3_KERNELS_ISA_H
#define K3_KERNELS_ISA_H

#include <stdbool.h>
#include <stdint.h>

/* Rows of a row-major matrix for T tokens: Y[t*ldy + i] = W_i · X[t*ldx ...] for i < nrows,
 * where W (and scales) point at the first of the nrows rows.  One row's result never
 * depends on nrows, T or the blocking a variant uses. */
typedef void k3_rows_bf16_fn(const uint16_t *W, int nrows, int cols, const float *X, int ldx,
                             float *Y, int ldy, int T);
/* The MXFP4 rows read X in block order (mxfp4.h): token t at Xb + t*ldxb. */
typedef void k3_rows_mxfp4_fn(const uint8_t *packed, const uint8_t *scales, int nrows, int cols,
                              const float *Xb, int ldxb, float *Y, int ldy, int T);
/* The int8-activation rows (mxfp4.h): Y[t*ldy + i] for the xq->T tokens of xq. */
struct k3_q8;
typedef void k3_rows_mxfp4_q8_fn(const uint8_t *packed, const uint8_t *scales, int nrows,
                                 const struct k3_q8 *xq, float *Y, int ldy);

/* Q8_0 rows (q8_0.h): X in natural order, cols a multiple of 32. */
struct k3_q8_0_block;
typedef void k3_rows_q8_0_fn(const struct k3_q8_0_block *W, int nrows, int cols, const float *X,
                             int ldx, float *Y, int ldy, int T);

/* y[i] += a * x[i], the product rounded before the add (no FMA): the element order does
 * not matter, so every width gives the scalar bytes. */
typedef void k3_axpy_f32_fn(float *y, float a, const float *x, int n);
typedef void k3_axpy_bf16_fn(float *y, float a, const uint16_t *x, int n);
/* y[i] = k3_situ(g[i], u[i], beta_gate, beta_up) for i < n (kernels.h). */
typedef void k3_situ_fn(float *y, const float *g, const float *u, int n, float beta_gate,
                        float beta_up);

/* SIMD mat-muls decode a weight row block once for up to this many tokens (AVX-512 bf16:
 * its own tile of 6, kernels_avx512.c), and the bf16 ones advance up to this many rows
 * together. */
#define K3_TOKEN_BLOCK 4
#define K3_ROW_BLOCK 4

/* Activations (T·cols floats) above this size do not stay in a 32 KiB L1 while a weight
 * row streams past, so each row would fetch them again from L2: the bf16 kernels then
 * advance K3_ROW_BLOCK rows together (x loaded once for all of them).  Below it one row at
 * a time is faster from RAM (one sequential stream; four interleaved 4 KiB rows train the
 * prefetchers worse).  Measured: bench/results/kernels-choices.md, "Rows together". */
#define K3_X_L1_BYTES (16 * 1024)

/* The mat-muls that take one row (or four) against every token in turn (bf16 AVX-512,
 * MXFP4 AVX2) take many tokens in chunks whose activations stay within this many bytes,
 * so they stay in L2 while the weights stream past them: with all of 256 tokens at once
 * each row fetched them again from L3 (bench/results/kernels-choices.md, "Many tokens").
 * A chunk is a whole number of K3_TOKEN_BLOCK tokens, at least one. */
#define K3_X_L2_BYTES (512 * 1024)

static inline int k3_token_chunk(int cols)
{
    size_t per_token = (size_t)(cols > 0 ? cols : 1) * sizeof(float);
    int chunk = (int)(K3_X_L2_BYTES / per_token) / K3_TOKEN_BLOCK * K3_TOKEN_BLOCK;
    return chunk > K3_TOKEN_BLOCK ? chunk : K3_TOKEN_BLOCK;
}

/* The SIMD mat-vecs prefetch their weights this many bytes ahead: the hardware
 * prefetchers alone left a core computing from RAM far below its L2 rate, and 4 KiB beat
 * 1, 2 and 8 KiB (bench/results/kernels-choices.md, "Prefetch distance"). */
#define K3_PREFETCH_AHEAD 4096

/* Runs CALL with RB_ = rb and NT_ = nt as constants (1 ≤ rb ≤ 4, 1 ≤ nt ≤ 4), so an
 * always_inline block kernel keeps its accumulators in registers. */
#define K3_BLOCK_DISPATCH(rb, nt, CALL)                                                        \
    do {                                                                                       \
        _Static_assert(K3_ROW_BLOCK == 4 && K3_TOKEN_BLOCK == 4, "K3_BLOCK_DISPATCH is 4x4");  \
        switch ((rb) * 8 + (nt)) {                                                             \
        case 8 + 1: { enum { RB_ = 1, NT_ = 1 }; CALL; } break;                                \
        case 8 + 2: { enum { RB_ = 1, NT_ = 2 }; CALL; } break;                                \
        case 8 + 3: { enum { RB_ = 1, NT_ = 3 }; CALL; } break;                                \
        case 8 + 4: { enum { RB_ = 1, NT_ = 4 }; CALL; } break;                                \
        case 16 + 1: { enum { RB_ = 2, NT_ = 1 }; CALL; } break;                               \
        case 16 + 2: { enum { RB_ = 2, NT_ = 2 }; CALL; } break;                               \
        case 16 + 3: { enum { RB_ = 2, NT_ = 3 }; CALL; } break;                               \
        case 16 + 4: { enum { RB_ = 2, NT_ = 4 }; CALL; } break;                               \
        case 24 + 1: { enum { RB_ = 3, NT_ = 1 }; CALL; } break;                               \
        case 24 + 2: { enum { RB_ = 3, NT_ = 2 }; CALL; } break;                               \
        case 24 + 3: { enum { RB_ = 3, NT_ = 3 }; CALL; } break;                               \
        case 24 + 4: { enum { RB_ = 3, NT_ = 4 }; CALL; } break;                               \
        case 32 + 1: { enum { RB_ = 4, NT_ = 1 }; CALL; } break;                               \
        case 32 + 2: { enum { RB_ = 4, NT_ = 2 }; CALL; } break;                               \
        case 32 + 3: { enum { RB_ = 4, NT_ = 3 }; CALL; } break;                               \
        case 32 + 4: { enum { RB_ = 4, NT_ = 4 }; CALL; } break;                               \
        default: break;                                                                        \
        }                                                                                      \
    } while (0)

/* The group of each lane in mxfp4.h's order, as permute indices into the scales of 16
 * consecutive groups: in the block bb of 4 that those cover, lane k takes group
 * 4bb + k/4 (mxfp4.c). */
extern const int32_t k3_mxfp4_lane_group[4][16];

/* Runs CALL for tokens t .. t + NT_ - 1 of T: whole blocks of K3_TOKEN_BLOCK, then the 1
 * to 3 left, with NT_ a constant in each, so an always_inline row kernel keeps its
 * accumulators in registers. */
#define K3_TOKEN_BLOCKS(T, t, CALL)                                                            \
    do {                                                                                       \
        _Static_assert(K3_TOKEN_BLOCK == 4, "the remainders below are 1 to 3 tokens");         \
        int t = 0;                                                                             \
        for (; t + K3_TOKEN_BLOCK <= (T); t += K3_TOKEN_BLOCK) {                               \
            enum { NT_ = K3_TOKEN_BLOCK };                                                     \
            CALL;                                                                              \
        }                                                                                      \
        switch ((T) - t) {                                                                     \
        case 3: { enum { NT_ = 3 }; CALL; } break;                                             \
        case 2: { enum { NT_ = 2 }; CALL; } break;                                             \
        case 1: { enum { NT_ = 1 }; CALL; } break;                                             \
        default: break;                                                                        \
        }                                                                                      \
    } while (0)

/* MXFP4 with many tokens (T ≥ K3_TOKEN_BLOCK and T·cols floats of activations past
 * K3_X_L1_BYTES): one row at a time against K3_TOKEN_BLOCK tokens, the activations of those
 * tokens no longer stay in L1 while the row streams past, and the kernel waits on L2
 * instead of computing.  So the rows are cut into spans of K3_MXFP4_SPAN_GROUPS groups;
 * the activations of a tile of K3_MXFP4_TILE_TOKENS tokens for one span are copied into a
 * buffer that stays in L1 while every row of a panel of K3_MXFP4_PANEL_ROWS rows takes its
 * span against them (each weight block decoded once per tile of tokens), the 16 lane sums
 * of each (row, token) kept in an array between spans (on the stack: 32 KiB, and the tile
 * 16 KiB).  The copy costs once per panel, hence the panel's size; its weights stay in L2
 * from one tile of tokens to the next.  Every (row, token) still adds its blocks in row
 * order, so the bytes are the reference's.  Measured: bench/results/kernels-choices.md,
 * "Many tokens". */
#define K3_MXFP4_TILE_TOKENS 8
#define K3_MXFP4_SPAN_GROUPS 16
#define K3_MXFP4_PANEL_ROWS 64

/* Runs CALL for tokens t .. t + NT_ - 1 of T: whole tiles of K3_MXFP4_TILE_TOKENS, then the
 * 1 to 7 left, NT_ a constant in each. */
#define K3_TOKEN_TILES(T, t, CALL)                                                             \
    do {                                                                                       \
        _Static_assert(K3_MXFP4_TILE_TOKENS == 8, "the remainders below are 1 to 7 tokens");   \
        int t = 0;                                                                             \
        for (; t + K3_MXFP4_TILE_TOKENS <= (T); t += K3_MXFP4_TILE_TOKENS) {                   \
            enum { NT_ = K3_MXFP4_TILE_TOKENS };                                               \
            CALL;                                                                              \
        }                                                                                      \
        switch ((T) - t) {                                                                     \
        case 7: { enum { NT_ = 7 }; CALL; } break;                                             \
        case 6: { enum { NT_ = 6 }; CALL; } break;                                             \
        case 5: { enum { NT_ = 5 }; CALL; } break;                                             \
        case 4: { enum { NT_ = 4 }; CALL; } break;                                             \
        case 3: { enum { NT_ = 3 }; CALL; } break;                                             \
        case 2: { enum { NT_ = 2 }; CALL; } break;                                             \
        case 1: { enum { NT_ = 1 }; CALL; } break;                                             \
        default: break;                                                                        \
        }                                                                                      \
    } while (0)

/* The rows 0 .. nrows-1 of a k3_rows_mxfp4_fn's arguments for tokens 0 .. NTOK-1 of XB
 * into YB, one at a time, by its always_inline one-row kernel ROW(p, s, groups, Xb, ldxb,
 * Y, ldy, NT), one whole row against NT ≤ K3_TOKEN_BLOCK tokens, NT a constant
 * (K3_TOKEN_BLOCKS). */
#define K3_MXFP4_ROW_LOOP(ROW, NTOK, XB, YB)                                                   \
    do {                                                                                       \
        int groups = cols / K3_MXFP4_GROUP;                                                    \
        size_t prow = (size_t)cols / 2, srow = (size_t)groups;                                 \
        for (int r = 0; r < nrows; r++) {                                                      \
            const uint8_t *p = packed + r * prow, *s = scales + r * srow;                      \
            K3_TOKEN_BLOCKS(NTOK, t, ROW(p, s, groups, (XB) + (size_t)t * ldxb, ldxb,          \
                                         (YB) + (size_t)t * ldy + r, ldy, NT_));               \
        }                                                                                      \
    } while (0)

/* The same for all T tokens of Xb, many tokens a chunk at a time (K3_X_L2_BYTES). */
#define K3_MXFP4_ROW_BY_ROW(ROW)                                                               \
    do {                                                                                       \
        int chunk = k3_token_chunk(cols);                                                      \
        for (int c0 = 0; c0 < T; c0 += chunk)                                                  \
            K3_MXFP4_ROW_LOOP(ROW, T - c0 < chunk ? T - c0 : chunk, Xb + (size_t)c0 * ldxb,    \
                              Y + (size_t)c0 * ldy);                                           \
    } while (0)

/* The k3_rows_mxfp4_fn NAME of a variant around ROW (K3_MXFP4_ROW_BY_ROW).  Expanded inside
 * the variant's K3_TARGET_BEGIN region. */
#define K3_MXFP4_ROWS(NAME, ROW)                                                               \
    void NAME(const uint8_t *packed, const uint8_t *scales, int nrows, int cols, const float *Xb, \
              int ldxb, float *Y, int ldy, int T)                                              \
    {                                                                                          \
        K3_MXFP4_ROW_BY_ROW(ROW);                                                              \
    }

/* The same with many tokens in spans, tiles and panels (above): ROW for fewer than
 * K3_TOKEN_BLOCK tokens or activations that fit K3_X_L1_BYTES, else SPAN(p, s, g0, g1,
 * groups, xs, sums, first, ahead, far, NT), groups g0 .. g1-1 (g0 a multiple of 16) of one
 * row against NT ≤ K3_MXFP4_TILE_TOKENS tokens whose activations for those groups are in
 * xs, block by block and in each block token by token (xs + (b·NT + k)·128: constant
 * offsets, where the rows of X would take an integer register per token), adding to the
 * 16 lane sums of token k at sums[k·16 ..] (from zero when first), prefetching its weights
 * ahead bytes on into L1 (the next row's span) and, unless far is 0, far bytes on into L2
 * (the next panel's row, so that a panel's first tile does not wait on memory);
 * REDUCE(sums) the lane tree of 16 sums, in the variant's registers, not k3_lane_reduce's
 * scalar tree (both measured: bench/results/kernels-choices.md, "Many tokens"). */
#define K3_MXFP4_TILED_ROWS(NAME, ROW, SPAN, REDUCE)                                           \
    _Static_assert(K3_MXFP4_SPAN_GROUPS % 16 == 0, "spans start at a scale load of 16");       \
    static inline __attribute__((always_inline)) void                                          \
    NAME##_tile(const uint8_t *p0, const uint8_t *s0, int pr, int groups, const float *Xb,     \
                int ldxb, float *Y, int ldy, float (*acc)[K3_MXFP4_TILE_TOKENS][K3_LANES],     \
                float *xs, long far, int NT)                                                   \
    {                                                                                          \
        size_t prow = (size_t)groups * (K3_MXFP4_GROUP / 2), srow = (size_t)groups;            \
        for (int g0 = 0; g0 < groups; g0 += K3_MXFP4_SPAN_GROUPS) {                            \
            int g1 = groups - g0 < K3_MXFP4_SPAN_GROUPS ? groups : g0 + K3_MXFP4_SPAN_GROUPS;  \
            for (int b = 0; 4 * b < g1 - g0; b++) /* whole blocks: X is padded to them */      \
                for (int k = 0; k < NT; k++)                                                   \
                    memcpy(xs + (size_t)(b * NT + k) * 128,                                    \
                           Xb + (size_t)k * ldxb + (size_t)g0 * K3_MXFP4_GROUP + 128 * b,      \
                           128 * sizeof(float));                                               \
            for (int r = 0; r < pr; r++) /* each row prefetches its span of the next row */    \
                SPAN(p0 + r * prow, s0 + r * srow, g0, g1, groups, xs, acc[r][0], g0 == 0,     \
                     (long)prow, far, NT);                                                     \
        }                                                                                      \
        for (int r = 0; r < pr; r++)                                                           \
            for (int k = 0; k < NT; k++)                                                       \
                Y[(size_t)k * ldy + r] = REDUCE(acc[r][k]);                                    \
    }                                                                                          \
    void NAME(const uint8_t *packed, const uint8_t *scales, int nrows, int cols, const float *Xb, \
              int ldxb, float *Y, int ldy, int T)                                              \
    {                                                                                          \
        if (T < K3_TOKEN_BLOCK || (size_t)T * cols * sizeof(float) <= K3_X_L1_BYTES) {         \
            /* never more than a chunk of tokens (K3_X_L2_BYTES) here */                       \
            K3_MXFP4_ROW_LOOP(ROW, T, Xb, Y);                                                  \
            return;                                                                            \
        }                                                                                      \
        int groups = cols / K3_MXFP4_GROUP;                                                    \
        size_t prow = (size_t)cols / 2, srow = (size_t)groups;                                 \
        float acc[K3_MXFP4_PANEL_ROWS][K3_MXFP4_TILE_TOKENS][K3_LANES]                         \
            __attribute__((aligned(64)));                                                      \
        float xs[K3_MXFP4_TILE_TOKENS * K3_MXFP4_SPAN_GROUPS * K3_MXFP4_GROUP]                 \
            __attribute__((aligned(64)));                                                      \
        for (int r0 = 0; r0 < nrows; r0 += K3_MXFP4_PANEL_ROWS) {                              \
            int pr = nrows - r0 < K3_MXFP4_PANEL_ROWS ? nrows - r0 : K3_MXFP4_PANEL_ROWS;      \
            const uint8_t *p0 = packed + r0 * prow, *s0 = scales + r0 * srow;                  \
            long next = r0 + pr < nrows ? (long)(pr * prow) : 0;                               \
            K3_TOKEN_TILES(T, t, NAME##_tile(p0, s0, pr, groups, Xb + (size_t)t * ldxb, ldxb,  \
                                             Y + (size_t)t * ldy + r0, ldy, acc, xs,           \
                                             next, NT_));                                      \
        }                                                                                      \
    }

/* The k3_rows_mxfp4_q8_fn NAME around ROW(p, s, groups, xq, t0, Y, ldy, NT), the one-row
 * int8-activation kernel for tokens t0 .. t0+NT-1 of xq, as K3_MXFP4_ROWS. */
#define K3_MXFP4_Q8_ROWS(NAME, ROW)                                                            \
    void NAME(const uint8_t *packed, const uint8_t *scales, int nrows, const struct k3_q8 *xq,   \
              float *Y, int ldy)                                                               \
    {                                                                                          \
        int groups = xq->n / K3_MXFP4_GROUP;                                                   \
        size_t prow = (size_t)xq->n / 2, srow = (size_t)groups;                                \
        for (int r = 0; r < nrows; r++) {                                                      \
            const uint8_t *p = packed + r * prow, *s = scales + r * srow;                      \
            K3_TOKEN_BLOCKS(xq->T, t,                                                          \
                            ROW(p, s, groups, xq, t, Y + (size_t)t * ldy + r, ldy, NT_));      \
        }                                                                                      \
    }

struct k3_kernel_ops {
    const char *name;                          /* "scalar", "avx2", "avx512", "avx512vnni" */
    bool (*supported)(void);                            /* this CPU and OS can run it */
    float (*dot_bf16)(const uint16_t *w, const float *x, int n);
    float (*dot_f32)(const float *a, const float *b, int n);
    k3_rows_bf16_fn *rows_bf16;
    k3_rows_mxfp4_fn *rows_mxfp4;
    k3_rows_mxfp4_q8_fn *rows_mxfp4_q8; /* the optional int8-activation path */
    k3_rows_q8_0_fn *rows_q8_0;         /* the trunk's Q8_0 matrices (q8_0.h) */
    k3_situ_fn *situ;                   /* k3_situ_n */
    k3_axpy_f32_fn *axpy_f32;           /* k3_axpy_f32 */
    k3_axpy_bf16_fn *axpy_bf16;         /* k3_axpy_bf16 */
};

/* Best first; the scalar reference last (always supported). */
extern const struct k3_kernel_ops k3_kernels_avx512vnni, k3_kernels_avx512, k3_kernels_avx2,
    k3_kernels_scalar;

/* The variant the public kernels use: the one chosen by k3_kernels_prefer or
 * k3_kernels_select, else (at the first call) the best this CPU supports;
 * k3_kernels_name() says which runs. */
const struct k3_kernel_ops *k3_kernels(void);
/* The table of a variant by name, or NULL when unknown. */
const struct k3_kernel_ops *k3_kernels_find(const char *name);

/* Scalar references (kernels.c, mxfp4.c): the definition of every result. */
float k3_dot_bf16_scalar(const uint16_t *w, const float *x, int n);
float k3_dot_f32_scalar(const float *a, const float *b, int n);
float k3_dot_mxfp4_scalar(const uint8_t *packed, const uint8_t *scales, const float *x, int n);
k3_rows_bf16_fn k3_rows_bf16_scalar;
k3_rows_mxfp4_fn k3_rows_mxfp4_scalar;
k3_situ_fn k3_situ_scalar;
k3_axpy_f32_fn k3_axpy_f32_scalar;
k3_axpy_bf16_fn k3_axpy_bf16_scalar;
k3_rows_mxfp4_q8_fn k3_rows_mxfp4_q8_scalar;
k3_rows_q8_0_fn k3_rows_q8_0_scalar;

/* AVX2 (kernels_avx2.c, mxfp4_avx2.c) and AVX-512 (kernels_avx512.c, mxfp4_avx512.c):
 * avx512 needs F, BW and VL; avx512vnni also VNNI (Cascade Lake, Zen 4 and later). */
k3_rows_mxfp4_fn k3_rows_mxfp4_avx2;
k3_rows_mxfp4_fn k3_rows_mxfp4_avx512;
k3_rows_mxfp4_q8_fn k3_rows_mxfp4_q8_avx2; /* also avx512's, which lacks VNNI */
k3_rows_mxfp4_q8_fn k3_rows_mxfp4_q8_avx512vnni;
k3_rows_q8_0_fn k3_rows_q8_0_avx2; /* q8_0_avx2.c */
k3_rows_q8_0_fn k3_rows_q8_0_avx512; /* q8_0_avx512.c; also avx512vnni's */

/* Splits rows over the OpenMP threads (each row is one thread's, so the result is the same
 * at any thread count) and calls fn(arg, first row, row count) once per thread; on the
 * calling thread alone when work (multiply-adds) is small or inside a parallel region.
 * Inside a team's work (numa/teams.h) it splits over that team's threads instead, each
 * calling it, and returns once the whole team is done.  row_bytes (weight bytes per row)
 * is a hint for the split. */
void k3_rows_parallel(int rows, long row_bytes, long work, void *arg,
                      void (*fn)(void *arg, int r0, int nrows));

/* A fused SiTU's gate rows b .. b+nb-1 into g and its up rows into u for tokens
 * t0 .. t0+nt-1 of job: row b+i of token t0+t at g[t*ld + i], u[t*ld + i]. */
typedef void k3_gate_up_fn(const void *job, int b, int nb, int t0, int nt, float *g, float *u,
                           int ld);

/* Y[t*ldy + r] = k3_situ(gate, up) of rows r0 .. r0+nrows-1 for T tokens, through small
 * buffers by blocks of rows × tokens (kernels.c): the fused SiTU of the bf16 and MXFP4
 * mat-muls, which differ only in gate_up. */
void k3_situ_rows(const void *job, k3_gate_up_fn *gate_up, int r0, int nrows, int T, float *Y,
                  int ldy, float beta_gate, float beta_up);

/* The functions between K3_TARGET_BEGIN("avx2") and K3_TARGET_END compile for that ISA
 * while the rest of the build stays baseline x86-64: GCC's target pragma, or clang's
 * attribute push (clang ignores GCC's), so the fuzzing build (clang) compiles them too. */
#define K3_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define K3_TARGET_BEGIN(isa) K3_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define K3_TARGET_END K3_PRAGMA(clang attribute pop)
#else
#define K3_TARGET_BEGIN(isa) K3_PRAGMA(GCC push_options) K3_PRAGMA(GCC target(isa))
#define K3_TARGET_END K3_PRAGMA(GCC pop_options)
#endif

#endif
