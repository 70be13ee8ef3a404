/* The environment variables k3-uring reads (K3_FAULTS, K3_FAULTS_SEED, K3_KERNELS,
 * K3_MXFP4_ACT, K3_TOPOLOGY, K3_RANK_FAULT, K3_CHECK_CACHE): one table, read once by main before any
 * command with the option parser's checks, listed under "environment" in --help.
 *
 * Owns: the table, the parsed values, and applying the process-wide ones (the kernel
 * variant and the MXFP4 activation type) before any kernel runs.
 * Does not own: what the values do; the library takes them through its config structs
 * (model_args.c copies them into the runtime's and the cluster's options).  MPI's own
 * variables (OMPI_COMM_WORLD_RANK, PMIX_RANK) are the launcher's, read by engine/cluster.
 */
#ifndef K3_CLI_ENV_H
#define K3_CLI_ENV_H

#include <stdint.h>
#include <stdio.h>

#include "engine/base/err.h"
#include "engine/cluster/cluster.h"
#include "engine/stream/placement.h"

struct cli_env {
    const char *faults;                    /* K3_FAULTS: a fault spec, NULL: none */
    uint64_t fault_seed;                   /* K3_FAULTS_SEED */
    int kernels;                           /* K3_KERNELS: an index into its choices */
    int mxfp4_q8;                          /* K3_MXFP4_ACT: f32 0, q8 1 */
    struct k3_topology_source topology;    /* K3_TOPOLOGY; zero: this machine */
    struct k3_cluster_fault rank_fault;    /* K3_RANK_FAULT; step 0: none */
    int check_cache;                       /* K3_CHECK_CACHE: off 0, on 1 */
};

/* Reads every variable, then applies the kernel variant and the activation type.  0, or
 * -1 with err naming the variable and its value (a usage error). */
int cli_env_read(struct k3_err *err);
/* The values read (defaults before cli_env_read). */
const struct cli_env *cli_env(void);
/* The "environment:" section of --help. */
void cli_env_help(FILE *f);

#endif
