/* Command-line options as a table, for every k3-uring command and every bench tool.
 *
 * Owns: one entry per option (flag, kind, range or allowed names, help); parsing argv
 * into the entries' destinations; the same for environment variables (a table whose
 * names are the variables'), read once with the same checks; the --help text and the
 * listing of every knob's value, both generated from the table; the value syntaxes
 * (sizes, token id lists).
 * Does not own: what a combination of options means (the caller checks that after
 * parsing), printing errors or exiting.
 *
 * The default of an option is its destination's value before parsing (or .def, in words,
 * when that value does not say it, e.g. "0: from config.json"), so validation, --help and
 * the defaults cannot drift apart.  A usage error fills a k3_err with one line naming
 * the flag and the value; the caller prints it and exits 2. */
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
    K3_OPT_SIZE,   /* uint64_t *: bytes with an optional K/M/G/T suffix (powers of 1024),
                      at least min; or one of choices, its value */
    K3_OPT_ENUM,   /* int * (or an int-sized enum): one of choices, its value */
    K3_OPT_SET,    /* unsigned *: a comma list of choices, their values or'ed together */
    K3_OPT_INTS,   /* struct k3_opt_ints *: a comma list of ints, each within [min, max] */
    K3_OPT_CUSTOM, /* whatever .parse fills */
};

struct k3_opt;
/* A CUSTOM entry's syntax: val into o->dst, or -1 with err naming flag and val. */
typedef int k3_opt_parse_fn(const struct k3_opt *o, const char *flag, const char *val,
                            struct k3_err *err);

/* A name an ENUM, SET or SIZE option accepts and the value it stands for.  Lists end with
 * {NULL}; a SET's bits are single choices, and a choice holding several (e.g. "all") comes
 * before them, so the listing names it when all its bits are set. */
struct k3_opt_choice {
    const char *name;
    uint64_t value;
};

/* "on" (1) and "off" (0), for an ENUM into an int. */
extern const struct k3_opt_choice k3_opt_on_off[];

#define K3_OPT_INTS_MAX 8

struct k3_opt_ints {
    int n;
    int v[K3_OPT_INTS_MAX];
};

struct k3_opt {
    const char *name;      /* long name without dashes; a positional's placeholder */
    char short_name;       /* 0 for none */
    enum k3_opt_type type;
    void *dst;
    const char *arg;       /* placeholder in help, e.g. "DIR"; NULL with choices: "a|b|c" */
    const char *help;
    double min, max;       /* INT, FLOAT, INTS: the range; SIZE: min alone; both 0: none */
    const struct k3_opt_choice *choices; /* ENUM, SET; SIZE: names besides a size */
    const char *def;       /* the default in words, where the value does not say it */
    bool positional;       /* STRING: a bare argument (the n-th such entry takes the n-th) */
    k3_opt_parse_fn *parse; /* CUSTOM */
};

#define K3_OPTS_COUNT(table) ((int)(sizeof(table) / sizeof((table)[0])))

/* Parses argv[1..argc) into the table's destinations.  Returns 0, 1 when -h or --help
 * was asked (the caller prints k3_opts_help and exits 0), or -1 with err filled. */
int k3_opts_parse(const struct k3_opt *opts, int n_opts, int argc, char **argv,
                  struct k3_err *err);

/* usage, then one line per option with its default, then -h, --help. */
void k3_opts_help(FILE *f, const char *usage, const struct k3_opt *opts, int n_opts);

/* The environment variables named by a table's entries (name "K3_X", no dashes, no
 * positionals, no flags): each one set is parsed as its option's value would be; an
 * empty one is refused (unset it to get the default).  0, or -1 with err naming the
 * variable and its value. */
int k3_opts_parse_env(const struct k3_opt *vars, int n_vars, struct k3_err *err);

/* "environment:", then one line per variable, "  NAME=ARG  help (default X)". */
void k3_opts_help_env(FILE *f, const struct k3_opt *vars, int n_vars);

/* One line per option, "  --name  value", as parsed: the knobs a benchmark ran with. */
void k3_opts_print_values(FILE *f, const struct k3_opt *opts, int n_opts);

/* "1,2, 3" → *ids (malloc'd, the caller frees; NULL when empty), *n; whitespace around
 * the ids is allowed, an empty list gives none.  -1 with err naming the flag, the text
 * and where it went wrong. */
int k3_parse_id_list(const char *flag, const char *text, int32_t **ids, int *n,
                     struct k3_err *err);

/* "512M", "8G", "1.5T", "4096": bytes (K/M/G/T are powers of 1024; an i or B after them
 * is allowed).  -1 when text is not a size. */
int k3_parse_size(const char *text, uint64_t *bytes);

#endif
