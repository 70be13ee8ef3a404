/* tiktoken.model: one "<base64 bytes> <rank>" line per token, into the token table
 * (k3_tok_load_ranks, tokenizer_internal.h).  A rank is the token's id.  Every line is
 * checked and a problem named by file and line; the table is built only from a file
 * that parsed whole. */
#include <stdlib.h>

#include "engine/text/base64.h"
#include "engine/text/tokenizer_internal.h"

/* One token line, parsed. */
struct rank_line {
    uint32_t off, len; /* decoded bytes in rank_file.bytes */
    int32_t rank;
    uint32_t line;     /* 1-based line number */
};

/* The whole file parsed, before the table is built. */
struct rank_file {
    const char *path;
    struct rank_line *lines; /* [n_lines] in file order */
    size_t n_lines;
    uint8_t *bytes;          /* the decoded tokens back to back */
    size_t n_bytes;
    int32_t max_rank;
};

/* A line's two fields: the token's base64 [tok, tok_end) and its rank [num, end). */
struct fields {
    size_t tok, tok_end, num, end;
};

static bool is_blank(uint8_t c)
{
    return c == ' ' || c == '\t';
}

/* Splits data[p, e) as tiktoken's line.split() does (surrounding blanks and a CR are
 * tolerated).  Returns 1 for two fields, 0 for a blank line, -1 for anything else. */
static int split_line(const uint8_t *data, size_t p, size_t e, struct fields *f)
{
    while (e > p && (data[e - 1] == '\r' || is_blank(data[e - 1])))
        e--;
    while (p < e && is_blank(data[p]))
        p++;
    if (p == e)
        return 0;
    size_t q = p;
    while (q < e && !is_blank(data[q]))
        q++;
    size_t t = q;
    while (t < e && is_blank(data[t]))
        t++;
    *f = (struct fields){p, q, t, e};
    return q == p || t == q || t == e ? -1 : 1;
}

/* The rank in s[0..n): decimal digits only, at most INT32_MAX - 1 (an id + 1 must fit);
 * -1 (message in err) otherwise. */
static int32_t parse_rank(const struct rank_file *rf, uint32_t line, const uint8_t *s,
                          size_t n, struct k3_err *err)
{
    long long r = 0;
    for (size_t k = 0; k < n; k++) {
        if (s[k] < '0' || s[k] > '9' || r > INT32_MAX)
            return k3_errf(err, "%s:%u: bad rank \"%.*s\"", rf->path, line,
                           (int)(n > 20 ? 20 : n), (const char *)s);
        r = r * 10 + (s[k] - '0');
    }
    if (r > INT32_MAX - 1)
        return k3_errf(err, "%s:%u: rank %lld too large", rf->path, line, r);
    return (int32_t)r;
}

/* Parses data[p, e), line number `line`, appending its token to rf (blank lines add
 * nothing).  vocab_size > 0 bounds the rank. */
static int read_line(struct rank_file *rf, const uint8_t *data, size_t p, size_t e,
                     uint32_t line, int vocab_size, struct k3_err *err)
{
    struct fields f;
    int kind = split_line(data, p, e, &f);
    if (kind == 0)
        return 0;
    if (kind < 0) { /* at most 40 bytes of the line: the text need not be NUL-terminated */
        size_t n = f.end - f.tok;
        return k3_errf(err, "%s:%u: expected \"<base64> <rank>\", got \"%.*s\"", rf->path, line,
                       (int)(n > 40 ? 40 : n), (const char *)data + f.tok);
    }
    long dl = k3_b64_decode(data + f.tok, f.tok_end - f.tok, rf->bytes + rf->n_bytes);
    if (dl <= 0) {
        size_t n = f.tok_end - f.tok;
        return k3_errf(err, "%s:%u: bad base64 token \"%.*s\"", rf->path, line,
                       (int)(n > 40 ? 40 : n), (const char *)data + f.tok);
    }
    int32_t rank = parse_rank(rf, line, data + f.num, f.end - f.num, err);
    if (rank < 0)
        return -1;
    if (vocab_size > 0 && rank >= vocab_size)
        return k3_errf(err, "%s:%u: rank %d >= vocab_size %d", rf->path, line, rank, vocab_size);
    rf->lines[rf->n_lines++] = (struct rank_line){(uint32_t)rf->n_bytes, (uint32_t)dl, rank, line};
    rf->n_bytes += (size_t)dl;
    if (rank > rf->max_rank)
        rf->max_rank = rank;
    return 0;
}

/* Parses every line of data[0..n) into rf (its buffers sized for the worst case). */
static int read_lines(struct rank_file *rf, const uint8_t *data, size_t n, int vocab_size,
                      struct k3_err *err)
{
    size_t max_lines = 1;
    for (size_t i = 0; i < n; i++)
        max_lines += data[i] == '\n';
    rf->bytes = malloc(n * 3 / 4 + 4);
    rf->lines = malloc(max_lines * sizeof *rf->lines);
    if (!rf->bytes || !rf->lines)
        return k3_errf(err, "%s: out of memory", rf->path);
    uint32_t line = 0;
    for (size_t p = 0; p < n;) {
        size_t e = p;
        while (e < n && data[e] != '\n')
            e++;
        if (read_line(rf, data, p, e, ++line, vocab_size, err))
            return -1;
        p = e + 1;
    }
    if (rf->n_lines == 0)
        return k3_errf(err, "%s: no tokens", rf->path);
    return 0;
}

/* vocab_size as given, or sized from the files, and bounded then. */
static int size_vocab(struct k3_tokenizer *tok, const struct rank_file *rf, int vocab_size,
                      int min_ids, struct k3_err *err)
{
    if (vocab_size > 0) {
        tok->vocab_size = vocab_size;
        return 0;
    }
    tok->vocab_size = rf->max_rank + 1 > min_ids ? rf->max_rank + 1 : min_ids;
    if (tok->vocab_size > K3_TOK_MAX_VOCAB)
        return k3_errf(err, "%s: ids up to %d: more than %d tokens", rf->path,
                       tok->vocab_size - 1, K3_TOK_MAX_VOCAB);
    return 0;
}

/* Line of the first of rf's lines [0, before) with this rank (for messages). */
static uint32_t line_of_rank(const struct rank_file *rf, size_t before, int32_t rank)
{
    for (size_t k = 0; k < before; k++)
        if (rf->lines[k].rank == rank)
            return rf->lines[k].line;
    return 0;
}

/* Builds tok->map from rf: each rank once, each byte string once. */
static int index_ranks(struct k3_tokenizer *tok, const struct rank_file *rf, struct k3_err *err)
{
    if (k3_bm_init(&tok->map, tok->vocab_size, rf->n_lines))
        return k3_errf(err, "%s: out of memory", rf->path);
    for (size_t i = 0; i < rf->n_lines; i++) {
        const struct rank_line *r = &rf->lines[i];
        const uint8_t *bytes = rf->bytes + r->off;
        size_t n;
        if (k3_bm_bytes(&tok->map, r->rank, &n))
            return k3_errf(err, "%s:%u: duplicate rank %d (first on line %u)", rf->path, r->line,
                           r->rank, line_of_rank(rf, i, r->rank));
        int32_t other = k3_bm_find(&tok->map, bytes, r->len);
        if (other >= 0)
            return k3_errf(err, "%s:%u: duplicate token: rank %d has the same bytes as rank %d "
                           "(line %u)", rf->path, r->line, r->rank, other,
                           line_of_rank(rf, i, other));
        if (k3_bm_add(&tok->map, bytes, r->len, r->rank, true))
            return k3_errf(err, "%s: out of memory", rf->path);
    }
    return 0;
}

/* Byte-level BPE starts from single bytes: each needs a rank. */
static int check_single_bytes(const struct k3_tokenizer *tok, const char *path,
                              struct k3_err *err)
{
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        if (k3_bm_find(&tok->map, &c, 1) < 0)
            return k3_errf(err, "%s: the single byte 0x%02x has no rank (byte-level BPE needs "
                           "all 256)", path, b);
    }
    return 0;
}

int k3_tok_load_ranks(struct k3_tokenizer *tok, const char *path, const uint8_t *data,
                      size_t n, int vocab_size, int min_ids, struct k3_err *err)
{
    struct rank_file rf = {.path = path, .max_rank = -1};
    int rc = read_lines(&rf, data, n, vocab_size, err);
    if (!rc)
        rc = size_vocab(tok, &rf, vocab_size, min_ids, err);
    if (!rc)
        rc = index_ranks(tok, &rf, err);
    if (!rc)
        rc = check_single_bytes(tok, path, err);
    free(rf.bytes);
    free(rf.lines);
    return rc;
}
