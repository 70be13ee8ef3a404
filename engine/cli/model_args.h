/* The command line that opens a model for generation, shared by `run` and `serve`.
 *
 * Owns: the options that choose the model and its read path (-m, --drives, --threads,
 * --numa, --ram, -b/--batch-size, --io, --no-cache, --cache-policy, --sync, --drive-model, --predict, --prefetch-k,
 * --prefetch-depth, --predict-from, --rank-timeout) as entries of a command's options table, their checks, the runtime
 * options they make, and what a command prints once the model is open (the runtime's
 * notes; -v: the read backend, the budget, the placement); under mpirun, joining the
 * ranks (engine/cluster) and each rank's own paths ("%r").
 * Does not own: a command's other options (prompt, sampling, HTTP), --ctx-size (whose
 * default differs by command), the runtime itself. */
#ifndef K3_CLI_MODEL_ARGS_H
#define K3_CLI_MODEL_ARGS_H

#include <stdbool.h>

#include "engine/base/err.h"
#include "engine/base/options.h"
#include "engine/runtime/runtime.h"

struct model_args {
    struct k3_runtime_opts runtime;    /* what the options fill */
    int numa_off;                      /* --numa: auto 0, off 1 */
    int predict_on;                    /* --predict: on 1, off 0 */
    enum k3_predict_from predict_from; /* --predict-from */
    const char *drive_model_text;      /* --drive-model, parsed into runtime.read.drive_model */
    float rank_timeout;                /* --rank-timeout, seconds */
    bool leader;                       /* this process prints: one process, or rank 0 */
    char drives_path[4096], model_path[4096]; /* -m, --drives with "%r" made this rank's */
};
/* --io and --predict-from parse into their enums as K3_OPT_ENUM's int. */
_Static_assert(sizeof(enum k3io_backend) == sizeof(int) &&
               sizeof(enum k3_predict_from) == sizeof(int) &&
               sizeof(enum k3_cache_policy_kind) == sizeof(int) &&
               sizeof(enum k3_cache_fill) == sizeof(int), "enums parsed as int");

/* --predict-from's names, for every command that takes it (run, serve, plan). */
extern const struct k3_opt_choice k3_predict_from_choices[];

/* The defaults: the whole trunk resident, io auto, prediction on; the read path's notes
 * (a drive taken as lost) on stderr as they come. */
void model_args_init(struct model_args *a);
/* Parses argv against the model's options followed by a command's own[0..n_own); on -h
 * prints usage and every option to stdout.  Returns 0, 1 when the help was printed, or
 * -1 with err (a usage error). */
int model_args_parse(struct model_args *a, const struct k3_opt *own, int n_own, int argc,
                     char **argv, const char *usage, struct k3_err *err);
/* After parsing: what the table cannot check alone; completes a->runtime, joining the ranks
 * when launched by mpirun.  -1 with err. */
int model_args_check(struct model_args *a, struct k3_err *err);
/* This process says what the command prints (one process, or rank 0). */
bool model_args_leader(const struct model_args *a);
/* "k3-uring: " and err's line on stderr, from the leader only. */
void model_args_print_error(const struct model_args *a, const struct k3_err *err);
/* The command's end with its exit status, after its error is printed: leaves the ranks.
 * Returns the status the process exits with: the leader's own; 0 on the other ranks, so
 * that mpirun does not end the leader before it has said what failed (it exits with the
 * status, and mpirun with it). */
int model_args_exit(struct model_args *a, int status);
/* The runtime's notes on stderr, and with verbose the read backend, budget, placement. */
void model_args_print_opened(const struct k3_runtime *rt, bool verbose);

/* --read-size's default: 4 MiB reads were the fastest through the read path against 256K
 * and 1M at depths 16-256 (bench/results/read-size-*.txt); a device that takes less in
 * one request (a loop device: 1280K) gets its own limit, rounded down to 4 KiB. */
#define MODEL_ARGS_READ_SIZE (4u << 20)
uint64_t model_args_default_read_size(const char *list);
/* --read-size (*read_size; 0: unset, becomes the default for list): a multiple of 4 KiB,
 * and no more than one read may carry: a registered buffer's 1 GiB, and what the device
 * under each folder of list ("D0,D1,..": drives, or a checkpoint folder) takes in one
 * request.  0, or -1 with err naming the limit. */
int model_args_check_read_size(uint64_t *read_size, const char *list, struct k3_err *err);

#endif
