#include "engine/base/err.h"

#include <stdio.h>
#include <string.h>

int k3_errf(struct k3_err *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int k3_err_prefix(struct k3_err *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char old[sizeof err->msg];
    memcpy(old, err->msg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    size_t at = strlen(err->msg);
    snprintf(err->msg + at, sizeof err->msg - at, ": %s", old);
    return -1;
}
