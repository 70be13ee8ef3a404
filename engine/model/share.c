#include "engine/model/share.h"

#include <stdio.h>

int k3_share_path(const char *path, int rank, char *out, size_t cap, struct k3_err *err)
{
    size_t n = 0;
    for (const char *p = path; *p; p++) {
        char piece[16] = {*p, 0};
        if (*p == '%') {
            p++;
            if (*p == 'r')
                snprintf(piece, sizeof piece, "%d", rank);
            else if (*p != '%')
                return k3_errf(err, "%s: '%%%c' (a path may hold %%r, the rank, or %%%%)", path,
                               *p ? *p : ' ');
        }
        for (const char *q = piece; *q; q++) {
            if (n + 1 >= cap)
                return k3_errf(err, "%s: too long for rank %d", path, rank);
            out[n++] = *q;
        }
    }
    out[n] = 0;
    return 0;
}
