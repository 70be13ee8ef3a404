/* Strict UTF-8: which bytes form well-formed characters (no overlongs, surrogates or
 * code points above U+10FFFF), as the encoder's input check, the pre-tokenizer's step
 * over an empty match and the output stream (utf8_stream.c) read it.
 * Owns: k3_utf8_lead, k3_utf8_seq and k3_utf8_invalid_at.  Does not own: the output stream's replacement of bad bytes (k3_utf8_push in
 * tokenizer.h).
 */
#ifndef K3_TEXT_UTF8_H
#define K3_TEXT_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* The length of the character lead byte c begins (0: c begins none), and the range
 * [*lo, *hi] its second byte must fall in (Unicode's table 3-7). */
static inline size_t k3_utf8_lead(uint8_t c, uint8_t *lo, uint8_t *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF) {
        *lo = c == 0xE0 ? 0xA0 : 0x80;
        *hi = c == 0xED ? 0x9F : 0xBF;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        *lo = c == 0xF0 ? 0x90 : 0x80;
        *hi = c == 0xF4 ? 0x8F : 0xBF;
        return 4;
    }
    return 0;
}

/* Length of the well-formed character at s[0..n) (n >= 1), or 0 when it is ill-formed
 * or cut short. */
size_t k3_utf8_seq(const uint8_t *s, size_t n);

/* Offset of the first byte that does not begin a well-formed UTF-8 sequence, or n if
 * all is well formed. */
size_t k3_utf8_invalid_at(const uint8_t *s, size_t n);

#endif
