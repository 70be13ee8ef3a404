/* k3-uring: run Kimi-K3-class MoE models with the routed experts streamed from NVMe.
 * main() reads the environment knobs (env.h) and dispatches to a subcommand (cli.h);
 * each prints its own errors. */
#include <stdio.h>
#include <string.h>

#include "engine/base/err.h"
#include "engine/cli/cli.h"
#include "engine/cli/env.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"run", cmd_run, "run a model on a prompt: generate tokens, write logits"},
    {"synth", cmd_synth, "write a checkpoint folder of a K3-family config with random weights"},
    {"pack", cmd_pack, "lay a checkpoint out striped across drives for streaming"},
    {"iobench", cmd_iobench, "the read path alone, shaped like decode, on packed drives"},
    {"replay", cmd_replay, "walk a routing trace's requests through the forward pass: reads, cache, prefetch"},
    {"plan", cmd_plan, "the memory floor and budget of a config (full K3 included)"},
    {"tokenize", cmd_tokenize, "encode text to token ids or decode ids to text"},
    {"serve", cmd_serve, "an OpenAI-compatible HTTP server; concurrent requests share expert reads"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: k3-uring COMMAND [options]   (k3-uring COMMAND --help for its options)\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nk3-uring --drives D0,D1 -p TEXT ... (or -m DIR) is short for k3-uring run ...\n"
               "exit codes: 0 ok, 1 runtime error, 2 usage error\n");
    cli_env_help(f);
}

int main(int argc, char **argv)
{
    struct k3_err err = {""};
    if (cli_env_read(&err)) { /* a usage error, before any work */
        fprintf(stderr, "k3-uring: %s\n", err.msg);
        return 2;
    }
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(stdout);
        return 0;
    }
    if (argv[1][0] == '-') /* options straight away: the generation command */
        return cmd_run(argc, argv);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "k3-uring: unknown command \"%s\" (see k3-uring --help)\n", argv[1]);
    return 2;
}
