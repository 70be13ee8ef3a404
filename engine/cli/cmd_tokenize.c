/* `k3-uring tokenize`: encode text to ids or decode ids to text with a model's tokenizer,
 * or render an OpenAI chat request with K3's chat encoding (the prompt, its segments or
 * its ids).  Exit codes: 0 ok, 1 runtime error, 2 usage error (see cli.h). */
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
#include "engine/base/options.h"
#include "engine/text/chat.h"
#include "engine/text/tokenizer.h"

struct tokenize_opts {
    const char *model, *pattern, *prompt, *file, *decode, *chat;
    int vocab; /* 0: from config.json */
    bool no_specials, special, show, segments, ids;
};

static int usage_error(const char *msg)
{
    fprintf(stderr, "k3-uring tokenize: %s\n", msg);
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

/* The ids of -p TEXT or -f FILE. */
static int encode(const struct k3_tokenizer *tok, const struct tokenize_opts *o, int32_t **ids,
                  size_t *n_ids, struct k3_err *err)
{
    char *text = NULL;
    size_t len = 0;
    if (o->prompt) {
        len = strlen(o->prompt);
        if (!(text = strdup(o->prompt)))
            return k3_errf(err, "out of memory");
    } else if (read_all(o->file, &text, &len, err)) {
        return -1;
    }
    int rc = k3_tok_encode(tok, text, len, o->special, ids, n_ids, err);
    free(text);
    return rc;
}

/* --show: one token a line, id, then its bytes escaped. */
static int show(const struct k3_tokenizer *tok, const int32_t *ids, size_t n_ids,
                struct k3_err *err)
{
    for (size_t i = 0; i < n_ids; i++) {
        size_t len;
        const uint8_t *b = k3_tok_bytes(tok, ids[i], &len);
        if (!b)
            return k3_errf(err, "id %d is not a token", ids[i]);
        printf("%d\t", ids[i]);
        print_escaped(b, len);
        if (k3_tok_is_special(tok, ids[i]))
            fputs("\tspecial", stdout);
        putchar('\n');
    }
    return 0;
}

static int decode(const struct k3_tokenizer *tok, const int32_t *ids, size_t n_ids,
                  struct k3_err *err)
{
    char *text;
    size_t len;
    if (k3_tok_decode(tok, ids, n_ids, &text, &len, err))
        return -1;
    fwrite(text, 1, len, stdout);
    free(text);
    return 0;
}

/* Loads the tokenizer the options name into *tok: 0, or the process exit code. */
static int load(const struct tokenize_opts *o, struct k3_tokenizer **tok)
{
    struct k3_err err = {{0}};
    int vocab = o->vocab ? o->vocab : config_vocab_size(o->model, &err);
    if (vocab < 0)
        return runtime_error(err.msg);
    const char *pattern = k3_tok_named_pattern(o->pattern);
    if (k3_tok_load(tok, o->model, vocab, pattern ? pattern : o->pattern, o->no_specials, &err)) {
        /* A malformed user regex is a usage error; everything else is at run time. */
        if (!strncmp(err.msg, "pattern:", 8)) {
            char msg[sizeof err.msg + 16];
            snprintf(msg, sizeof msg, "--pattern: %s", err.msg + 9);
            return usage_error(msg);
        }
        return runtime_error(err.msg);
    }
    return 0;
}

/* ids comma-separated, or with --show one a line. */
static int print_ids(const struct k3_tokenizer *tok, const struct tokenize_opts *o,
                     const int32_t *ids, size_t n_ids, struct k3_err *err)
{
    if (o->show)
        return show(tok, ids, n_ids, err);
    for (size_t i = 0; i < n_ids; i++)
        printf(i ? ",%d" : "%d", ids[i]);
    putchar('\n');
    return 0;
}

/* Loads the tokenizer and does what the options ask: the process exit code. */
static int tokenize(const struct tokenize_opts *o, const int32_t *ids, size_t n_ids)
{
    struct k3_tokenizer *tok;
    int rc = load(o, &tok);
    if (rc)
        return rc;
    struct k3_err err = {{0}};
    int32_t *encoded = NULL;
    if (!o->decode) {
        rc = encode(tok, o, &encoded, &n_ids, &err);
        ids = encoded;
    }
    if (!rc && o->decode && !o->show)
        rc = decode(tok, ids, n_ids, &err);
    else if (!rc)
        rc = print_ids(tok, o, ids, n_ids, &err);
    free(encoded);
    k3_tok_free(tok);
    if (rc)
        return runtime_error(err.msg);
    if (fflush(stdout))
        return runtime_error("writing standard output failed");
    return 0;
}

/* --chat's request rendered into *segs: 0, or -1 with err naming the file and the field. */
static int render_request(const char *path, struct k3_chat_segs *segs, struct k3_err *err)
{
    char *body;
    size_t len;
    if (read_all(path, &body, &len, err))
        return -1;
    json_error_t je;
    json_t *req = json_loadb(body, len, 0, &je);
    free(body);
    if (!req)
        return k3_errf(err, "%s:%d:%d: %s", path, je.line, je.column, je.text);
    struct k3_chat_opts opts;
    struct k3_chat_fault fault;
    int rc = k3_chat_request_opts(req, &opts, &fault) ||
             k3_chat_render(json_object_get(req, "messages"), json_object_get(req, "tools"),
                            &opts, segs, &fault);
    json_decref(req);
    return rc ? k3_errf(err, "%s: %s", path, fault.message) : 0;
}

/* --segments: one [text, special] JSON array a line. */
static int print_segments(const struct k3_chat_segs *segs, struct k3_err *err)
{
    for (size_t i = 0; i < segs->n; i++) {
        json_t *pair = json_pack("[s%b]", segs->v[i].text, segs->v[i].len, segs->v[i].special);
        char *line = pair ? json_dumps(pair, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        json_decref(pair);
        if (!line)
            return k3_errf(err, "out of memory");
        puts(line);
        free(line);
    }
    return 0;
}

static int print_prompt(const struct k3_chat_segs *segs, struct k3_err *err)
{
    size_t len;
    char *text = k3_chat_segs_join(segs, &len);
    if (!text)
        return k3_errf(err, "out of memory");
    fwrite(text, 1, len, stdout);
    free(text);
    return 0;
}

/* --chat REQUEST: the prompt, its segments, or its ids: the process exit code. */
static int chat(const struct tokenize_opts *o)
{
    struct k3_tokenizer *tok = NULL;
    int rc = o->ids || o->show ? load(o, &tok) : 0;
    if (rc)
        return rc;
    struct k3_err err = {{0}};
    struct k3_chat_segs segs = {0};
    rc = render_request(o->chat, &segs, &err);
    if (!rc && (o->ids || o->show)) {
        int32_t *ids = NULL;
        size_t n = 0;
        rc = k3_chat_segs_encode(tok, &segs, &ids, &n, &err) || print_ids(tok, o, ids, n, &err);
        free(ids);
    } else if (!rc) {
        rc = o->segments ? print_segments(&segs, &err) : print_prompt(&segs, &err);
    }
    k3_chat_segs_free(&segs);
    k3_tok_free(tok);
    if (rc)
        return runtime_error(err.msg);
    if (fflush(stdout))
        return runtime_error("writing standard output failed");
    return 0;
}

int cmd_tokenize(int argc, char **argv)
{
    struct tokenize_opts o = {.pattern = "k3"};
    const struct k3_opt opts[] = {
        {.name = "model", .short_name = 'm', .type = K3_OPT_STRING, .dst = &o.model, .arg = "DIR",
         .help = "model directory: tiktoken.model, tokenizer_config.json"},
        {.name = "pattern", .type = K3_OPT_STRING, .dst = &o.pattern, .arg = "NAME|REGEX",
         .help = "pre-tokenizer: k3, cl100k, o200k, or a PCRE2 regex (UTF, UCP)"},
        {.name = "vocab-size", .type = K3_OPT_INT, .dst = &o.vocab, .arg = "N",
         .help = "ids must be < N", .min = 1, .max = INT32_MAX,
         .def = "DIR/config.json's vocab_size, else largest id + 1"},
        {.name = "no-specials", .type = K3_OPT_FLAG, .dst = &o.no_specials,
         .help = "do not read tokenizer_config.json (a foreign vocabulary)"},
        {.name = "special", .type = K3_OPT_FLAG, .dst = &o.special,
         .help = "template text: match special tokens (without: they are plain text)"},
        {.name = "prompt", .short_name = 'p', .type = K3_OPT_STRING, .dst = &o.prompt,
         .arg = "TEXT", .help = "encode TEXT"},
        {.name = "file", .short_name = 'f', .type = K3_OPT_STRING, .dst = &o.file, .arg = "FILE",
         .help = "encode the bytes of FILE ('-': standard input)"},
        {.name = "decode", .type = K3_OPT_STRING, .dst = &o.decode, .arg = "IDS",
         .help = "decode comma-separated ids, print the bytes"},
        {.name = "show", .type = K3_OPT_FLAG, .dst = &o.show,
         .help = "print one token a line: id, then its bytes escaped"},
        {.name = "chat", .type = K3_OPT_STRING, .dst = &o.chat, .arg = "REQUEST",
         .help = "render an OpenAI chat request body (a JSON file, '-': standard input) with "
                 "K3's chat encoding, checked as serve checks it; prints the prompt"},
        {.name = "segments", .type = K3_OPT_FLAG, .dst = &o.segments,
         .help = "with --chat: print the prompt's segments, one [text, special] JSON array a line"},
        {.name = "ids", .type = K3_OPT_FLAG, .dst = &o.ids,
         .help = "with --chat: print the prompt's ids (needs -m), comma-separated"},
    };
    const char *usage = "usage: k3-uring tokenize -m DIR [options] (-p TEXT | -f FILE | --decode IDS)\n"
                        "       k3-uring tokenize [-m DIR] --chat REQUEST [--segments | --ids | --show]\n"
                        "Prints the ids of the text, comma-separated, or the decoded bytes; or the\n"
                        "rendered chat prompt, its segments or its ids.";
    struct k3_err err = {{0}};
    int rc = k3_opts_parse(opts, K3_OPTS_COUNT(opts), argc, argv, &err);
    if (rc > 0) {
        k3_opts_help(stdout, usage, opts, K3_OPTS_COUNT(opts));
        return 0;
    }
    if (rc)
        return usage_error(err.msg);
    if (!!o.prompt + !!o.file + !!o.decode + !!o.chat != 1)
        return usage_error("give exactly one of -p TEXT, -f FILE, --decode IDS, --chat REQUEST");
    if ((o.segments || o.ids) && !o.chat)
        return usage_error("--segments and --ids go with --chat");
    if (o.segments + o.ids + o.show > 1)
        return usage_error("give at most one of --segments, --ids, --show");
    if (!o.model && !(o.chat && !o.ids && !o.show))
        return usage_error("-m DIR is required");
    if (o.chat)
        return chat(&o);
    int32_t *ids = NULL;
    int n_ids = 0;
    if (o.decode && k3_parse_id_list("--decode", o.decode, &ids, &n_ids, &err))
        return usage_error(err.msg);
    rc = tokenize(&o, ids, (size_t)n_ids);
    free(ids);
    return rc;
}
