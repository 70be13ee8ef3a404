/* Standard base64 (RFC 4648 alphabet, '=' padding), as tiktoken.model writes each
 * token's bytes.  Decoding is strict: no whitespace, no missing padding, no stray
 * trailing bits, so one token has exactly one spelling.
 * Owns: k3_b64_decode and k3_b64_encode.  Does not own: reading tiktoken.model
 * (tiktoken.c). */
#ifndef K3_TEXT_BASE64_H
#define K3_TEXT_BASE64_H

#include <stddef.h>
#include <stdint.h>

/* Bytes base64 of n bytes takes. */
#define K3_B64_LEN(n) (((size_t)(n) + 2) / 3 * 4)

/* Decodes s[0..n) into out (room for n / 4 * 3 bytes); the decoded length, or -1 when
 * s is not canonical base64 of at least one byte. */
long k3_b64_decode(const uint8_t *s, size_t n, uint8_t *out);

/* Encodes p[0..n) into out (room for K3_B64_LEN(n) bytes, no NUL); returns the length. */
size_t k3_b64_encode(const uint8_t *p, size_t n, char *out);

#endif
