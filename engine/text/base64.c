/* Standard base64.  See base64.h. */
#include "engine/text/base64.h"

static int8_t b64_value(uint8_t c)
{
    if (c >= 'A' && c <= 'Z')
        return (int8_t)(c - 'A');
    if (c >= 'a' && c <= 'z')
        return (int8_t)(c - 'a' + 26);
    if (c >= '0' && c <= '9')
        return (int8_t)(c - '0' + 52);
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

long k3_b64_decode(const uint8_t *s, size_t n, uint8_t *out)
{
    if (n == 0 || n % 4)
        return -1;
    long o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int8_t v[4];
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
            } else {
                if (pad)
                    return -1;
                v[k] = b64_value(s[i + k]);
                if (v[k] < 0)
                    return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2)
            out[o++] = (uint8_t)(w >> 8);
        if (pad < 1)
            out[o++] = (uint8_t)w;
        if ((pad == 1 && (w & 0xFF)) || (pad == 2 && (w & 0xFFFF)))
            return -1; /* non-canonical trailing bits */
    }
    return o;
}

size_t k3_b64_encode(const uint8_t *p, size_t n, char *out)
{
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t w = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        out[o++] = A[w >> 18];
        out[o++] = A[(w >> 12) & 63];
        out[o++] = A[(w >> 6) & 63];
        out[o++] = A[w & 63];
    }
    if (i < n) {
        uint32_t w = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
        out[o++] = A[w >> 18];
        out[o++] = A[(w >> 12) & 63];
        out[o++] = i + 1 < n ? A[(w >> 6) & 63] : '=';
        out[o++] = '=';
    }
    return o;
}
