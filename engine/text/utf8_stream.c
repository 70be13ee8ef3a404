/* The UTF-8 output stream: decoded token bytes out as text that is always valid UTF-8
 * (k3_utf8_push / k3_utf8_flush, tokenizer.h). */
#include <string.h>

#include "engine/text/tokenizer.h"
#include "engine/text/utf8.h"

static size_t put_fffd(char *out)
{
    out[0] = (char)0xEF;
    out[1] = (char)0xBF;
    out[2] = (char)0xBD;
    return 3;
}

/* How many bytes of s[0..n) (n >= 1) form a well-formed prefix of a character, and the
 * full length that character needs (0 when s[0] is no lead). */
static size_t utf8_prefix(const uint8_t *s, size_t n, size_t *need)
{
    uint8_t lo, hi;
    *need = k3_utf8_lead(s[0], &lo, &hi);
    if (*need <= 1)
        return *need;
    size_t k = 1;
    if (k < n) {
        if (s[1] < lo || s[1] > hi)
            return 1;
        k = 2;
        while (k < n && k < *need && (s[k] & 0xC0) == 0x80)
            k++;
    }
    return k;
}

size_t k3_utf8_push(struct k3_utf8_stream *st, const uint8_t *bytes, size_t len, char *out)
{
    size_t o = 0, i = 0;
    /* Finish the held-back character first, byte by byte. */
    while (st->n_pending && i < len) {
        st->pending[st->n_pending++] = bytes[i];
        size_t need, k = utf8_prefix(st->pending, (size_t)st->n_pending, &need);
        if (k == (size_t)st->n_pending) { /* still a well-formed prefix */
            i++;
            if (k == need) {
                memcpy(out + o, st->pending, k);
                o += k;
                st->n_pending = 0;
            }
            continue;
        }
        /* bytes[i] does not continue it: U+FFFD for the prefix, then rescan bytes[i]. */
        o += put_fffd(out + o);
        st->n_pending = 0;
    }
    while (i < len) {
        if (bytes[i] < 0x80) {
            out[o++] = (char)bytes[i++];
            continue;
        }
        size_t need, k = utf8_prefix(bytes + i, len - i, &need);
        if (need == 0) {
            o += put_fffd(out + o);
            i++;
        } else if (k == need) {
            memcpy(out + o, bytes + i, k);
            o += k;
            i += k;
        } else if (i + k == len) { /* a well-formed prefix cut by the end: hold it */
            memcpy(st->pending, bytes + i, k);
            st->n_pending = (int)k;
            i += k;
        } else {
            o += put_fffd(out + o);
            i += k;
        }
    }
    return o;
}

size_t k3_utf8_flush(struct k3_utf8_stream *st, char *out)
{
    if (!st->n_pending)
        return 0;
    st->n_pending = 0;
    return put_fffd(out);
}
