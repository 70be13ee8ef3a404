/* Command-line options as a table: one entry gives the flag, its type, range and help;
 * the default is the destination's value before parsing, so parsing, validation and
 * --help (which prints the defaults) come from the same place and cannot drift.
 * Usage errors name the flag and the value; the caller exits 2 on them. */
#ifndef K3_OPTIONS_H
#define K3_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/base/err.h"

enum k3_opt_type {
    K3_OPT_STRING, /* const char ** */
    K3_OPT_INT,    /* int *, within [min, max] */
    K3_OPT_U64,    /* uint64_t * */
    K3_OPT_FLOAT,  /* float *, within [min, max] */
    K3_OPT_FLAG,   /* bool *, no argument */
    K3_OPT_SIZE,   /* uint64_t *, bytes with an optional K/M/G/T suffix (powers of 1024) */
};

struct k3_opt {
    const char *name;  /* long name without dashes */
    char short_name;   /* 0 for none */
    enum k3_opt_type type;
    void *dst;
    const char *arg;   /* placeholder shown in help, e.g. "DIR" */
    const char *help;
    double min, max;   /* range for INT and FLOAT */
};

/* Parses argv[1..argc) into the table's destinations.  Returns 0, 1 when --help was
 * asked (help already printed to stdout), or -1 with err filled (a usage error). */
int k3_opts_parse(const struct k3_opt *opts, int n_opts, int argc, char **argv,
                  const char *usage, struct k3_err *err);

void k3_opts_help(FILE *f, const char *usage, const struct k3_opt *opts, int n_opts);

/* "1,2,3" → ids; returns -1 with err naming the flag on a bad list. */
int k3_parse_id_list(const char *flag, const char *text, int32_t **ids, int *n,
                     struct k3_err *err);

int k3_parse_size(const char *text, uint64_t *bytes);

#endif
