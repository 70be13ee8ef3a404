/* The PCRE2 pre-tokenizer.  See pretok.h. */
#include "engine/text/pretok.h"

#include <string.h>

#include "engine/text/utf8.h"

int k3_pretok_init(struct k3_pretok *p, const char *pattern, struct k3_err *err)
{
    int ec;
    PCRE2_SIZE eo;
    p->jit = false;
    p->code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                            &ec, &eo, NULL);
    if (!p->code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return k3_errf(err, "pattern: %s at offset %zu of \"%.60s%s\"", (char *)msg, (size_t)eo,
                       pattern, strlen(pattern) > 60 ? "..." : "");
    }
    p->jit = pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

void k3_pretok_free(struct k3_pretok *p)
{
    pcre2_code_free(p->code);
    p->code = NULL;
}

int k3_pretok_iter_init(struct k3_pretok_iter *it, const struct k3_pretok *p,
                        const uint8_t *s, size_t len, struct k3_err *err)
{
    memset(it, 0, sizeof *it);
    it->p = p;
    it->s = s;
    it->len = len;
    it->md = pcre2_match_data_create(1, NULL);
    if (!it->md)
        return k3_errf(err, "pre-tokenizer: out of memory");
    return 0;
}

void k3_pretok_iter_free(struct k3_pretok_iter *it)
{
    pcre2_match_data_free(it->md);
    pcre2_match_context_free(it->mc);
    pcre2_jit_stack_free(it->stack);
    memset(it, 0, sizeof *it);
}

/* JIT matching runs on a 32 KiB machine stack by default; patterns that backtrack
 * through long runs can need more, so a failed match retries with a larger stack. */
static int grow_jit_stack(struct k3_pretok_iter *it)
{
    size_t size = it->stack_size ? it->stack_size * 8 : 1 << 20;
    if (size > (size_t)256 << 20)
        return -1;
    if (!it->mc && !(it->mc = pcre2_match_context_create(NULL)))
        return -1;
    pcre2_jit_stack_free(it->stack);
    it->stack = pcre2_jit_stack_create(32 << 10, size, NULL);
    if (!it->stack)
        return -1;
    it->stack_size = size;
    pcre2_jit_stack_assign(it->mc, NULL, it->stack);
    return 0;
}

/* The first match at or after it->pos (PCRE2's return code), on a larger JIT stack when
 * the match needs one. */
static int match_from_pos(struct k3_pretok_iter *it)
{
    for (;;) {
        int rc = it->p->jit
                     ? pcre2_jit_match(it->p->code, it->s, it->len, it->pos, 0, it->md, it->mc)
                     : pcre2_match(it->p->code, it->s, it->len, it->pos, PCRE2_NO_UTF_CHECK,
                                   it->md, it->mc);
        if (rc != PCRE2_ERROR_JIT_STACKLIMIT || grow_jit_stack(it))
            return rc;
    }
}

int k3_pretok_next(struct k3_pretok_iter *it, size_t *start, size_t *end, struct k3_err *err)
{
    while (it->pos < it->len) {
        int rc = match_from_pos(it);
        if (rc == PCRE2_ERROR_NOMATCH) {
            it->pos = it->len;
            return 0;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return k3_errf(err, "pre-tokenizer: match failed at byte %zu: %s", it->pos,
                           (char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(it->md);
        if (ov[1] == ov[0]) { /* empty match (user patterns): step one character */
            size_t k = k3_utf8_seq(it->s + ov[0], it->len - ov[0]);
            it->pos = ov[0] + (k ? k : 1);
            continue;
        }
        *start = ov[0];
        *end = ov[1];
        it->pos = ov[1];
        return 1;
    }
    return 0;
}
