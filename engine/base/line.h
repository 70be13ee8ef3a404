/* One line for a caller's callback: how library code says something that is not an error
 * (progress, a warning, a request served).  It formats the line here and hands it on;
 * the caller shows it or not (the library never prints: err.h).
 * Owns: k3_line_fn, the formatting of one line and its bound (K3_LINE_MAX).  Does not own: the callbacks' meaning, or what a caller does with the line. */
#ifndef K3_LINE_H
#define K3_LINE_H

#include <stdarg.h>

#include "engine/base/files.h"

/* A line's bytes at most, its NUL included: one naming a whole path is not cut. */
#define K3_LINE_MAX (K3_PATH_MAX + 512)

typedef void (*k3_line_fn)(void *ctx, const char *line);

/* Formats fmt (printf's) into a line, cut at K3_LINE_MAX - 1 bytes, and calls
 * fn(ctx, line) once; does nothing when fn is NULL. */
__attribute__((format(printf, 3, 4))) void k3_line(k3_line_fn fn, void *ctx, const char *fmt, ...);
__attribute__((format(printf, 3, 0))) void k3_vline(k3_line_fn fn, void *ctx, const char *fmt,
                                                   va_list ap);

#endif
