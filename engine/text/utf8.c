/* Strict UTF-8 validation.  See utf8.h. */
#include "engine/text/utf8.h"

size_t k3_utf8_seq(const uint8_t *s, size_t n)
{
    uint8_t lo, hi;
    size_t need = k3_utf8_lead(s[0], &lo, &hi);
    if (need <= 1)
        return need;
    if (n < need || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < need; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return need;
}

size_t k3_utf8_invalid_at(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = k3_utf8_seq(s + i, n - i);
        if (!k)
            return i;
        i += k;
    }
    return n;
}
