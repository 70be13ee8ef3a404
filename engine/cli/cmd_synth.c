/* `k3-uring synth`: a seeded random checkpoint folder for any K3-family config. */
#include <stdio.h>

#include "engine/cli/cli.h"
#include "engine/model/config.h"
#include "engine/base/options.h"
#include "engine/synth/synth.h"

static void print_note(void *ctx, const char *line)
{
    (void)ctx;
    fprintf(stderr, "synth: %s\n", line);
}

int cmd_synth(int argc, char **argv)
{
    const char *config = NULL, *out = NULL;
    uint64_t seed = 1;
    bool quiet = false;
    const struct k3_opt opts[] = {
        {.name = "config", .short_name = 'c', .type = K3_OPT_STRING, .dst = &config,
         .arg = "NAME|FILE", .help = "k3-tiny, k3-bench, k3-slice, k3-dsv2, k3, or a config.json of the family"},
        {.name = "seed", .short_name = 's', .type = K3_OPT_U64, .dst = &seed, .arg = "N",
         .help = "random seed: the same seed gives the same bytes"},
        {.name = "out", .short_name = 'o', .type = K3_OPT_STRING, .dst = &out, .arg = "DIR",
         .help = "folder to create (must not exist)"},
        {.name = "quiet", .short_name = 'q', .type = K3_OPT_FLAG, .dst = &quiet,
         .help = "no progress lines"},
    };
    const char *usage = "usage: k3-uring synth --config NAME|FILE --out DIR [--seed N]";
    struct k3_err err = {{0}};
    int rc = k3_opts_parse(opts, K3_OPTS_COUNT(opts), argc, argv, &err);
    if (rc > 0) {
        k3_opts_help(stdout, usage, opts, K3_OPTS_COUNT(opts));
        return 0;
    }
    if (!rc && (!config || !out))
        rc = k3_errf(&err, "synth: --config and --out are required (see --help)");
    if (rc) {
        fprintf(stderr, "k3-uring synth: %s\n", err.msg);
        return 2;
    }
    struct k3_config cfg;
    if (k3_config_named(&cfg, config, &err)) {
        fprintf(stderr, "k3-uring synth: %s\n", err.msg);
        return 1;
    }
    const struct k3_synth_notes notes = {print_note, NULL};
    rc = k3_synth(&cfg, seed, out, quiet ? NULL : &notes, &err);
    k3_config_free(&cfg);
    if (rc) {
        fprintf(stderr, "k3-uring synth: %s\n", err.msg);
        return 1;
    }
    if (!quiet)
        fprintf(stderr, "synth: wrote %s\n", out);
    return 0;
}
