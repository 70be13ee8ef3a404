/* `k3-uring tokenize`: encode text to ids or decode ids to text with a model's tokenizer.
 * Options are a table that also generates --help.  Exit codes: 0 ok, 1 runtime error,
 * 2 usage error (see cli.h). */
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/files.h"
#include "engine/cli/cli.h"
#include "engine/text/tokenizer.h"

enum opt_id { O_MODEL, O_PATTERN, O_VOCAB, O_NO_SPECIALS, O_SPECIAL, O_PROMPT, O_FILE,
              O_DECODE, O_SHOW, O_HELP, O_COUNT };

static const struct opt {
    const char *name;
    char short_name;
    const char *arg; /* NULL: a flag */
    const char *def;
    const char *help;
} OPTS[O_COUNT] = {
    [O_MODEL] = {"model", 'm', "DIR", NULL, "model directory: tiktoken.model, tokenizer_config.json"},
    [O_PATTERN] = {"pattern", 0, "NAME|REGEX", "k3",
                   "pre-tokenizer: k3, cl100k, o200k, or a PCRE2 regex (UTF, UCP)"},
    [O_VOCAB] = {"vocab-size", 0, "N", NULL,
                 "ids must be < N; default: DIR/config.json's vocab_size, else largest id + 1"},
    [O_NO_SPECIALS] = {"no-specials", 0, NULL, NULL,
                       "do not read tokenizer_config.json (a foreign vocabulary)"},
    [O_SPECIAL] = {"special", 0, NULL, NULL,
                   "template text: match special tokens (default: they are plain text)"},
    [O_PROMPT] = {"prompt", 'p', "TEXT", NULL, "encode TEXT"},
    [O_FILE] = {"file", 'f', "FILE", NULL, "encode the bytes of FILE ('-': standard input)"},
    [O_DECODE] = {"decode", 0, "IDS", NULL, "decode comma-separated ids, print the bytes"},
    [O_SHOW] = {"show", 0, NULL, NULL, "print one token a line: id, then its bytes escaped"},
    [O_HELP] = {"help", 'h', NULL, NULL, "show this help"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: k3-uring tokenize -m DIR [options] (-p TEXT | -f FILE | --decode IDS)\n"
               "Prints the ids of the text, comma-separated, or the decoded bytes.\n\n");
    for (int i = 0; i < O_COUNT; i++) {
        const struct opt *o = &OPTS[i];
        char left[64], sh[8] = "    ";
        if (o->short_name)
            snprintf(sh, sizeof sh, "-%c, ", o->short_name);
        snprintf(left, sizeof left, "%s--%s%s%s", sh, o->name, o->arg ? " " : "",
                 o->arg ? o->arg : "");
        fprintf(f, "  %-26s %s", left, o->help);
        if (o->def)
            fprintf(f, " [default: %s]", o->def);
        fputc('\n', f);
    }
}

static int usage_error(const char *fmt, const char *a)
{
    fprintf(stderr, "k3-uring tokenize: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, " (see k3-uring tokenize --help)\n");
    return 2;
}

static int runtime_error(const char *msg)
{
    fprintf(stderr, "k3-uring tokenize: %s\n", msg);
    return 1;
}

/* vocab_size from DIR/config.json (text_config.vocab_size or vocab_size); 0 when the
 * file is absent; -1 (message in err) when it is unreadable or lacks the key. */
static int config_vocab_size(const char *dir, struct k3_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT ? 0 : k3_errf(err, "%s: %s", path, strerror(errno));
    fclose(f);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        return k3_errf(err, "%s:%d: %s", path, je.line, je.text);
    json_t *tc = json_object_get(root, "text_config");
    json_t *v = json_object_get(json_is_object(tc) ? tc : root, "vocab_size");
    int n = json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) <= INT32_MAX
                ? (int)json_integer_value(v) : -1;
    json_decref(root);
    if (n < 0)
        return k3_errf(err, "%s: text_config.vocab_size: missing or not a positive integer", path);
    return n;
}

/* path "-" is standard input. */
static int read_all(const char *path, char **data, size_t *len, struct k3_err *err)
{
    if (strcmp(path, "-"))
        return k3_read_small_file(path, data, len, err);
    return k3_read_fd(STDIN_FILENO, "stdin", K3_SMALL_FILE_MAX, data, len, err);
}

/* Parses "1,2, 3" into ids; returns the count or -1 with a usage message in err. */
static long parse_ids(const char *s, int32_t **ids, struct k3_err *err)
{
    size_t cap = 16, n = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v)
        return k3_errf(err, "out of memory");
    const char *p = s;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX) {
            free(v);
            return k3_errf(err, "--decode: bad id at \"%.20s\"", p);
        }
        if (n == cap) {
            cap *= 2;
            int32_t *nv = realloc(v, cap * sizeof *nv);
            if (!nv) {
                free(v);
                return k3_errf(err, "out of memory");
            }
            v = nv;
        }
        v[n++] = (int32_t)x;
        p = end;
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        if (*p == ',')
            p++;
        else if (*p) {
            free(v);
            return k3_errf(err, "--decode: expected ',' at \"%.20s\"", p);
        }
    }
    *ids = v;
    return (long)n;
}

static void print_escaped(const uint8_t *b, size_t n)
{
    putchar('\'');
    for (size_t i = 0; i < n; i++) {
        uint8_t c = b[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\r')
            fputs("\\r", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c == '\\' || c == '\'')
            printf("\\%c", c);
        else if (c < 0x20 || c == 0x7F)
            printf("\\x%02x", c);
        else
            putchar(c); /* UTF-8 bytes as they are; a split character shows as is */
    }
    putchar('\'');
}

int cmd_tokenize(int argc, char **argv)
{
    const char *val[O_COUNT] = {0};
    bool set[O_COUNT] = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *inline_val = NULL;
        int o = -1;
        if (a[0] == '-' && a[1] == '-' && a[2]) {
            const char *eq = strchr(a + 2, '=');
            size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            for (int k = 0; k < O_COUNT; k++)
                if (strlen(OPTS[k].name) == len && !strncmp(OPTS[k].name, a + 2, len))
                    o = k;
            if (eq)
                inline_val = eq + 1;
        } else if (a[0] == '-' && a[1] && !a[2]) {
            for (int k = 0; k < O_COUNT; k++)
                if (OPTS[k].short_name == a[1])
                    o = k;
        }
        if (o < 0)
            return usage_error(a[0] == '-' ? "unknown option %s" : "unexpected argument \"%s\"", a);
        if (o == O_HELP) {
            usage(stdout);
            return 0;
        }
        if (OPTS[o].arg) {
            if (!inline_val) {
                if (i + 1 >= argc)
                    return usage_error("%s needs a value", a);
                inline_val = argv[++i];
            }
            val[o] = inline_val;
        } else if (inline_val)
            return usage_error("%s takes no value", a);
        set[o] = true;
    }
    if (!set[O_MODEL])
        return usage_error("%s", "-m DIR is required");
    if (set[O_PROMPT] + set[O_FILE] + set[O_DECODE] != 1)
        return usage_error("%s", "give exactly one of -p TEXT, -f FILE, --decode IDS");

    struct k3_err err = {{0}};
    int vocab = 0;
    if (set[O_VOCAB]) {
        char *end;
        long v = strtol(val[O_VOCAB], &end, 10);
        if (!*val[O_VOCAB] || *end || v <= 0 || v > INT32_MAX)
            return usage_error("--vocab-size: \"%s\" is not a positive integer", val[O_VOCAB]);
        vocab = (int)v;
    } else if ((vocab = config_vocab_size(val[O_MODEL], &err)) < 0)
        return runtime_error(err.msg);

    const char *pattern = NULL;
    if (set[O_PATTERN]) {
        pattern = k3_tok_named_pattern(val[O_PATTERN]);
        if (!pattern)
            pattern = val[O_PATTERN];
    }
    int32_t *ids = NULL;
    long n_dec = 0;
    if (set[O_DECODE] && (n_dec = parse_ids(val[O_DECODE], &ids, &err)) < 0)
        return usage_error("%s", err.msg);

    struct k3_tokenizer *tok;
    if (k3_tok_load(&tok, val[O_MODEL], vocab, pattern, set[O_NO_SPECIALS], &err)) {
        free(ids);
        /* A malformed user regex is a usage error; everything else is at run time. */
        if (set[O_PATTERN] && !strncmp(err.msg, "pattern:", 8))
            return usage_error("--pattern: %s", err.msg + 9);
        return runtime_error(err.msg);
    }
    int rc = 0;
    size_t n_ids = 0;
    if (set[O_DECODE]) {
        n_ids = (size_t)n_dec;
        char *text;
        size_t len;
        if (!set[O_SHOW]) {
            if (k3_tok_decode(tok, ids, n_ids, &text, &len, &err))
                rc = runtime_error(err.msg);
            else {
                fwrite(text, 1, len, stdout);
                free(text);
            }
        }
    } else {
        char *text = NULL;
        size_t len = 0;
        if (set[O_PROMPT]) {
            text = strdup(val[O_PROMPT]);
            len = strlen(val[O_PROMPT]);
            if (!text)
                rc = runtime_error("out of memory");
        } else if (read_all(val[O_FILE], &text, &len, &err))
            rc = runtime_error(err.msg);
        if (!rc && k3_tok_encode(tok, text, len, set[O_SPECIAL], &ids, &n_ids, &err))
            rc = runtime_error(err.msg);
        free(text);
        if (!rc && !set[O_SHOW]) {
            for (size_t i = 0; i < n_ids; i++)
                printf(i ? ",%d" : "%d", ids[i]);
            putchar('\n');
        }
    }
    if (!rc && set[O_SHOW])
        for (size_t i = 0; i < n_ids; i++) {
            size_t len;
            const uint8_t *b = k3_tok_bytes(tok, ids[i], &len);
            if (!b) {
                snprintf(err.msg, sizeof err.msg, "id %d is not a token", ids[i]);
                rc = runtime_error(err.msg);
                break;
            }
            printf("%d\t", ids[i]);
            print_escaped(b, len);
            if (k3_tok_is_special(tok, ids[i]))
                fputs("\tspecial", stdout);
            putchar('\n');
        }
    if (fflush(stdout) && !rc)
        rc = runtime_error("writing standard output failed");
    free(ids);
    k3_tok_free(tok);
    return rc;
}
