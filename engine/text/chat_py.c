/* JSON values as encoding_k3.py's Python sees them: truthiness, str.strip()'s whitespace,
 * str() of a scalar, json.dumps (ensure_ascii=False) with the default or the compact,
 * key-sorted separators, and float's repr. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat_internal.h"
#include "engine/text/utf8.h"

void k3_chat_buf_put(struct k3_chat_buf *b, const void *s, size_t n)
{
    if (b->oom || !n)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void k3_chat_buf_free(struct k3_chat_buf *b)
{
    free(b->p);
    *b = (struct k3_chat_buf){0};
}

static void put_str(struct k3_chat_buf *b, const char *s)
{
    k3_chat_buf_put(b, s, strlen(s));
}

bool k3_py_truthy(const json_t *v)
{
    switch (v ? json_typeof(v) : JSON_NULL) {
    case JSON_TRUE:
        return true;
    case JSON_INTEGER:
        return json_integer_value(v) != 0;
    case JSON_REAL:
        return json_real_value(v) != 0.0;
    case JSON_STRING:
        return json_string_length(v) > 0;
    case JSON_ARRAY:
        return json_array_size(v) > 0;
    case JSON_OBJECT:
        return json_object_size(v) > 0;
    default:
        return false;
    }
}

/* Python's str.isspace() for one code point (Py_UNICODE_ISSPACE). */
static bool py_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

bool k3_py_blank(const char *s, size_t n)
{
    const uint8_t *p = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        size_t k = k3_utf8_seq(p + i, n - i);
        if (!k)
            return false;
        uint32_t c = k == 1 ? p[i] : p[i] & (0x7F >> k);
        for (size_t j = 1; j < k; j++)
            c = c << 6 | (p[i + j] & 0x3F);
        if (!py_space(c))
            return false;
        i += k;
    }
    return true;
}

/* The shortest digits of |x| that read back as x (what %.*e rounds to at the first
 * precision that round-trips), and the decimal point's position: x = 0.DIGITS * 10^*point. */
static int shortest_digits(double x, char digits[20], int *point)
{
    char e[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, fabs(x));
        if (strtod(e, NULL) == fabs(x))
            break;
    }
    int n = 0;
    const char *p = e;
    for (; *p != 'e'; p++)
        if (*p != '.')
            digits[n++] = *p;
    while (n > 1 && digits[n - 1] == '0')
        n--;
    digits[n] = 0;
    *point = atoi(p + 1) + 1;
    return n;
}

/* float_repr_style 'short' with Py_DTSF_ADD_DOT_0: positional when the point falls in
 * (-4, 16], else d.ddde+XX with at least two exponent digits. */
size_t k3_py_float_repr(double x, char out[32])
{
    char d[20], *o = out;
    int point, n = shortest_digits(x, d, &point);
    if (signbit(x))
        *o++ = '-';
    if (point > 16 || point <= -4) {
        *o++ = d[0];
        if (n > 1) {
            *o++ = '.';
            memcpy(o, d + 1, (size_t)n - 1);
            o += n - 1;
        }
        o += sprintf(o, "e%c%02d", point - 1 < 0 ? '-' : '+', abs(point - 1));
    } else if (point <= 0) {
        memcpy(o, "0.", 2);
        memset(o + 2, '0', (size_t)-point);
        o += 2 - point;
        memcpy(o, d, (size_t)n);
        o += n;
    } else if (point >= n) {
        memcpy(o, d, (size_t)n);
        memset(o + n, '0', (size_t)(point - n));
        o += point;
        memcpy(o, ".0", 2);
        o += 2;
    } else {
        memcpy(o, d, (size_t)point);
        o[point] = '.';
        memcpy(o + point + 1, d + point, (size_t)(n - point));
        o += n + 1;
    }
    *o = 0;
    return (size_t)(o - out);
}

int k3_py_str(struct k3_chat_buf *b, const json_t *v)
{
    char num[32];
    switch (json_typeof(v)) {
    case JSON_STRING:
        k3_chat_buf_put(b, json_string_value(v), json_string_length(v));
        return 0;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        put_str(b, num);
        return 0;
    case JSON_REAL:
        k3_chat_buf_put(b, num, k3_py_float_repr(json_real_value(v), num));
        return 0;
    case JSON_TRUE:
        put_str(b, "True");
        return 0;
    case JSON_FALSE:
        put_str(b, "False");
        return 0;
    case JSON_NULL:
        put_str(b, "None");
        return 0;
    default:
        return -1;
    }
}

/* json's py_encode_basestring: only '"', '\\' and the C0 controls are escaped. */
static void put_json_string(struct k3_chat_buf *b, const char *s, size_t n)
{
    k3_chat_buf_put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        k3_chat_buf_put(b, s + run, i - run);
        run = i + 1;
        char esc[8];
        const char *named = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n"
                          : c == '\r' ? "\\r" : c == '\t' ? "\\t" : c == '\b' ? "\\b"
                          : c == '\f' ? "\\f" : NULL;
        if (!named)
            snprintf(esc, sizeof esc, "\\u%04x", c);
        put_str(b, named ? named : esc);
    }
    k3_chat_buf_put(b, s + run, n - run);
    k3_chat_buf_put(b, "\"", 1);
}

static int by_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void put_object(struct k3_chat_buf *b, const json_t *v, bool sorted_compact)
{
    size_t n = json_object_size(v), i = 0;
    const char **keys = malloc((n ? n : 1) * sizeof *keys);
    if (!keys) {
        b->oom = true;
        return;
    }
    const char *key;
    const json_t *value;
    json_object_foreach((json_t *)v, key, value)
        keys[i++] = key;
    if (sorted_compact)
        qsort(keys, n, sizeof *keys, by_key);
    k3_chat_buf_put(b, "{", 1);
    for (i = 0; i < n; i++) {
        if (i)
            put_str(b, sorted_compact ? "," : ", ");
        put_json_string(b, keys[i], strlen(keys[i]));
        put_str(b, sorted_compact ? ":" : ": ");
        k3_py_json(b, json_object_get(v, keys[i]), sorted_compact);
    }
    k3_chat_buf_put(b, "}", 1);
    free(keys);
}

void k3_py_json(struct k3_chat_buf *b, const json_t *v, bool sorted_compact)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        put_object(b, v, sorted_compact);
        return;
    case JSON_ARRAY:
        k3_chat_buf_put(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                put_str(b, sorted_compact ? "," : ", ");
            k3_py_json(b, json_array_get(v, i), sorted_compact);
        }
        k3_chat_buf_put(b, "]", 1);
        return;
    case JSON_STRING:
        put_json_string(b, json_string_value(v), json_string_length(v));
        return;
    case JSON_TRUE:
        put_str(b, "true");
        return;
    case JSON_FALSE:
        put_str(b, "false");
        return;
    case JSON_NULL:
        put_str(b, "null");
        return;
    default:
        k3_py_str(b, v); /* numbers: an int's digits, a float's repr */
        return;
    }
}
