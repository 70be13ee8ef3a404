/* The planner's per-core rates: how fast a machine's cores consume weights, and what the
 * read path costs them.
 *
 * Owns: reading a calibration (JSON: bench/kernels.sh's, bench/slice-project.sh's, or the
 * built-in engine/plan/calibration.json, embedded) and completing what it leaves out.
 * Keys: mxfp4_gbps_per_core and bf16_gbps_per_core (required, > 0); optional
 * mxfp4_gflops_per_core, bf16_gflops_per_core, q8_0_gflops_per_core, q8_0_gbps_per_core
 * (> 0), read_cpu_s_per_gb (>= 0), q8_0_gbps_of_bf16 and q8_0_gflops_of_bf16 (> 0); other
 * keys (a file's provenance) are ignored.
 * Does not own: measuring the rates (bench/), using them (project.h).
 */
#ifndef K3_PLAN_RATES_H
#define K3_PLAN_RATES_H

#include <stddef.h>

#include "engine/base/err.h"

struct k3_rates {
    double mxfp4_core, bf16_core, q8_core;       /* GB/s of weights per core, one row (decode) */
    double mxfp4_gflops, bf16_gflops, q8_gflops; /* GFLOP/s per core over many rows (a prompt
                                                  * pass) */
    double read_cpu;                             /* core seconds per GB read */
    double q8_gbps_of_bf16, q8_gflops_of_bf16;   /* Q8_0's rates as fractions of bf16's */
};

/* The built-in calibration (calibration.json), completed. */
int k3_rates_builtin(struct k3_rates *r, struct k3_err *err);

/* The calibration in file `path`, completed: read_cpu_s_per_gb and the Q8_0 fractions the
 * built-in's when the file has none.  Errors name the file and the key. */
int k3_rates_load(const char *path, struct k3_rates *r, struct k3_err *err);

/* The same from JSON text of len bytes; `name` for messages; what it leaves out of
 * read_cpu and the Q8_0 fractions taken from fallback (NULL: required). */
int k3_rates_parse(const char *json, size_t len, const char *name, const struct k3_rates *fallback,
                   struct k3_rates *r, struct k3_err *err);

#endif
