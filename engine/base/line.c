#include "engine/base/line.h"

#include <stdio.h>

void k3_vline(k3_line_fn fn, void *ctx, const char *fmt, va_list ap)
{
    if (!fn)
        return;
    char line[K3_LINE_MAX];
    vsnprintf(line, sizeof line, fmt, ap);
    fn(ctx, line);
}

void k3_line(k3_line_fn fn, void *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    k3_vline(fn, ctx, fmt, ap);
    va_end(ap);
}
