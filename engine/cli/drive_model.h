/* --drive-model RATE[,LATENCY], shared by the commands that read packed drives (run,
 * iobench, and serve through the runtime's options): the table entry, the parse into the
 * reader's model with a usage error naming the flag, and the lines the statistics print.
 * Owns: the option's entry, its parse and those lines.  Does not own: the model itself
 * (iouring/model.h). */
#ifndef K3_CLI_DRIVE_MODEL_H
#define K3_CLI_DRIVE_MODEL_H

#include <stdio.h>

#include "engine/base/err.h"
#include "engine/base/options.h"
#include "iouring/reader.h"

/* The option table's entry; text_ptr is a const char ** the parse reads afterwards. */
#define CLI_DRIVE_MODEL_OPT(text_ptr)                                                        \
    {.name = "drive-model", .type = K3_OPT_STRING, .dst = (text_ptr), .arg = "RATE[,LATENCY]", \
     .help = "packed drives: each drive served as one of RATE and LATENCY would (reads in "  \
             "order, handed on no earlier); the bytes still come from the files",              \
     .def = "none"}

/* text NULL: no model (rate 0).  -1 with err "--drive-model: ..." on a bad value. */
int cli_drive_model_parse(const char *text, struct k3io_drive_model *out, struct k3_err *err);

/* The statistics' lines for a run under the model: what it timed, modelled against the
 * storage's own time; and, when the storage was slower than the model for more than a
 * sliver of the waiting (LATE_SHARE), a note that the figures are the storage's.  Each
 * line starts with prefix ("k3-uring", "k3-uring iobench").  Nothing without a model. */
void cli_drive_model_print(FILE *f, const char *prefix, const struct k3io_drive_model *m,
                           const struct k3io_stats *st);

#endif
