/* `k3-uring synth`: a seeded random checkpoint folder for any K3-family config. */
#include <stdio.h>

#include "engine/cli/cli.h"
#include "engine/model/config.h"
#include "engine/cli/options.h"
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
        {"config", 'c', K3_OPT_STRING, &config, "NAME|FILE",
         "k3-tiny, k3-bench, k3, or a config.json of the family", 0, 0},
        {"seed", 's', K3_OPT_U64, &seed, "N", "random seed: the same seed gives the same bytes", 0, 0},
        {"out", 'o', K3_OPT_STRING, &out, "DIR", "folder to create (must not exist)", 0, 0},
        {"quiet", 'q', K3_OPT_FLAG, &quiet, NULL, "no progress lines", 0, 0},
    };
    const char *usage = "usage: k3-uring synth --config NAME|FILE --out DIR [--seed N]";
    struct k3_err err = {{0}};
    int rc = k3_opts_parse(opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, usage, &err);
    if (rc > 0)
        return 0;
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
