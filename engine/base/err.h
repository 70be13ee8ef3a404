/* Error reporting for library code.
 *
 * Library functions never print or exit: they fill a k3_err with one line that names
 * the file, field, value, drive or offset at fault, and return -1 (or a negative errno
 * for pure I/O helpers).  Only main() prints the message and chooses the exit code.
 *
 * Owns: struct k3_err and the two functions that fill it.  Does not own: printing the
 * message or choosing the exit code (engine/cli/).
 */
#ifndef K3_ERR_H
#define K3_ERR_H

#include <stdarg.h>

struct k3_err {
    char msg[512];
};

/* Fills err (if non-NULL) with a printf-style message and returns -1. */
__attribute__((format(printf, 2, 3))) int k3_errf(struct k3_err *err, const char *fmt, ...);

/* Prepends "prefix: " to the message already in err; returns -1. */
__attribute__((format(printf, 2, 3))) int k3_err_prefix(struct k3_err *err, const char *fmt, ...);

#endif
