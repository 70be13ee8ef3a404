/* Subcommands of the k3-uring binary.  Each parses its own options, prints its own
 * errors and returns the process exit code: 0 ok, 1 runtime error, 2 usage error.
 * Owns: the entry point of each command, which main.c's table names.  Does not own: the
 * option groups several commands share (model_args.h, routes_args.h, drive_model.h). */
#ifndef K3_CLI_H
#define K3_CLI_H

int cmd_run(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_pack(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_iobench(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_serve(int argc, char **argv);

#endif
