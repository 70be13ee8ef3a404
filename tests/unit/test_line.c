/* engine/base/line: a printf-style line handed to a caller's callback, once; nothing
 * without a callback; a line naming a path of K3_PATH_MAX bytes arrives whole, and one
 * longer than K3_LINE_MAX is cut to K3_LINE_MAX - 1 bytes. */
#include <stdarg.h>
#include <string.h>

#include "engine/base/files.h"
#include "engine/base/line.h"
#include "tests/check.h"

struct heard {
    int calls;
    size_t len;
    char line[2 * K3_LINE_MAX];
};

static void hear(void *ctx, const char *line)
{
    struct heard *h = ctx;
    h->calls++;
    h->len = strlen(line);
    snprintf(h->line, sizeof h->line, "%s", line);
}

__attribute__((format(printf, 2, 3))) static void through_v(struct heard *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    k3_vline(hear, h, fmt, ap);
    va_end(ap);
}

int main(void)
{
    struct heard h = {0};
    k3_line(hear, &h, "drive %d: %s (%.1f MB)", 3, "/mnt/a", 2.25);
    CHECK(h.calls == 1 && !strcmp(h.line, "drive 3: /mnt/a (2.2 MB)"), "%d calls: \"%s\"",
          h.calls, h.line);
    through_v(&h, "%s=%llu", "bytes", 18446744073709551615ull);
    CHECK(h.calls == 2 && !strcmp(h.line, "bytes=18446744073709551615"), "v: \"%s\"", h.line);

    k3_line(NULL, &h, "nobody listens %d", 1);
    CHECK(h.calls == 2, "a NULL callback was called");

    static char path[K3_PATH_MAX], big[2 * K3_LINE_MAX];
    memset(path, 'p', sizeof path - 1);
    k3_line(hear, &h, "drive %s refuses O_DIRECT; the engine will read it through the page "
            "cache", path);
    CHECK(h.len == strlen(path) + 71 && strstr(h.line, "page cache"),
          "a line naming a %zu-byte path: %zu bytes, ends \"%s\"", strlen(path), h.len,
          h.line + (h.len > 20 ? h.len - 20 : 0));
    memset(big, 'b', sizeof big - 1);
    k3_line(hear, &h, "%s", big);
    CHECK(h.len == K3_LINE_MAX - 1, "a %zu-byte line arrived as %zu bytes", strlen(big), h.len);
    return check_result();
}
