/* The environment variables as an options table: see env.h. */
#include "engine/cli/env.h"

#include <assert.h>

#include "engine/base/options.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/mxfp4.h"
#include "engine/stream/faults.h"

static struct cli_env env = {.fault_seed = 1};

/* Best first, as k3_kernels_prefer falls back through them. */
static const struct k3_opt_choice kernel_choices[] = {
    {"auto", 0}, {"avx512vnni", 1}, {"avx512", 2}, {"avx2", 3}, {"scalar", 4}, {NULL, 0}};
static const struct k3_opt_choice act_choices[] = {{"f32", 0}, {"q8", 1}, {NULL, 0}};

static int parse_faults(const struct k3_opt *o, const char *flag, const char *val,
                        struct k3_err *err)
{
    struct k3_faults *f;
    (void)flag; /* the parser's messages name K3_FAULTS and the bad item */
    if (k3_faults_parse(&f, val, 1, err))
        return -1;
    k3_faults_free(f);
    *(const char **)o->dst = val;
    return 0;
}

static int parse_topology(const struct k3_opt *o, const char *flag, const char *val,
                          struct k3_err *err)
{
    return k3_topology_parse(flag, val, o->dst, err);
}

static int parse_rank_fault(const struct k3_opt *o, const char *flag, const char *val,
                            struct k3_err *err)
{
    return k3_cluster_fault_parse(flag, val, o->dst, err);
}

static const struct k3_opt vars[] = {
    {.name = "K3_FAULTS", .type = K3_OPT_CUSTOM, .dst = &env.faults, .parse = parse_faults,
     .arg = "KIND:P,..", .def = "none",
     .help = "inject read faults (tests): eio, short, eagain, delay, corrupt or refuse (a "
             "submission) with a probability in [0, 1], drive-loss:DRIVE[@READS], "
             "eio-at:N (the N-th read result), refuse-at:N (the N-th submission); "
             "comma-separated"},
    {.name = "K3_FAULTS_SEED", .type = K3_OPT_U64, .dst = &env.fault_seed, .arg = "N",
     .help = "seed of the injected faults' generator"},
    {.name = "K3_KERNELS", .type = K3_OPT_ENUM, .dst = &env.kernels, .choices = kernel_choices,
     .help = "kernel variant: the best this CPU has at or below the one named"},
    {.name = "K3_MXFP4_ACT", .type = K3_OPT_ENUM, .dst = &env.mxfp4_q8, .choices = act_choices,
     .help = "activations of the MXFP4 mat-muls: f32, or int8 (q8; other bytes than f32's)"},
    {.name = "K3_TOPOLOGY", .type = K3_OPT_CUSTOM, .dst = &env.topology, .parse = parse_topology,
     .arg = "synthetic:STRING|xml:FILE", .def = "this machine",
     .help = "plan threads for a described machine (tests; hwloc's synthetic string or XML), "
             "pinning nothing"},
    {.name = "K3_RANK_FAULT", .type = K3_OPT_CUSTOM, .dst = &env.rank_fault,
     .parse = parse_rank_fault, .arg = "RANK:stall|exit@STEP", .def = "none",
     .help = "mpirun tests: that rank stops answering, or exits, at step STEP (from 1)"},
    {.name = "K3_CHECK_CACHE", .type = K3_OPT_ENUM, .dst = &env.check_cache,
     .choices = k3_opt_on_off,
     .help = "tests: every slot the expert cache picks checked against a scan of all (slow)"},
};

int cli_env_read(struct k3_err *err)
{
    if (k3_opts_parse_env(vars, K3_OPTS_COUNT(vars), err))
        return -1;
    int rc = k3_kernels_prefer(kernel_choices[env.kernels].name);
    assert(rc == 0); /* every name in the table is a variant or auto */
    (void)rc;
    k3_mxfp4_set_q8(env.mxfp4_q8);
    return 0;
}

const struct cli_env *cli_env(void) { return &env; }

void cli_env_help(FILE *f) { k3_opts_help_env(f, vars, K3_OPTS_COUNT(vars)); }
