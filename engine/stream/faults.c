#include "engine/stream/faults.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/rng.h"

struct k3_faults {
    double eio, shorts, eagain, delay, corrupt, refuse;
    uint64_t eio_at, refuse_at; /* the chunk result, the submission (from 1; 0: none) */
    int lost_drive;      /* -1: none */
    uint64_t lost_after; /* reads on that drive that still succeed */
    uint64_t lost_seen;
    struct k3_rng rng;
    struct k3_fault_counts n;
};

/* [text, end) as a decimal number: digits only, at least one. */
static int decimal(const char *text, const char *end, uint64_t *out)
{
    uint64_t n = 0;
    if (text == end)
        return -1;
    for (const char *p = text; p < end; p++) {
        if (*p < '0' || *p > '9' || n > (UINT64_MAX - 9) / 10)
            return -1;
        n = n * 10 + (uint64_t)(*p - '0');
    }
    *out = n;
    return 0;
}

/* text as a number in [0, 1] written with digits and a point ("0.01", "1", ".5"). */
static int probability(const char *text, double *p)
{
    char *end;
    if (!text[0] || strspn(text, "0123456789.") != strlen(text))
        return -1;
    errno = 0;
    *p = strtod(text, &end);
    return *end || errno || !(*p >= 0 && *p <= 1) ? -1 : 0;
}

bool k3_faults_corrupt(const struct k3_faults *f) { return f->corrupt > 0; }

int k3_faults_parse(struct k3_faults **out, const char *spec, uint64_t seed, struct k3_err *err)
{
    struct k3_faults *f = calloc(1, sizeof *f);
    char *copy = strdup(spec);
    if (!f || !copy) {
        free(f);
        free(copy);
        return k3_errf(err, "out of memory");
    }
    f->lost_drive = -1;
    k3_rng_seed(&f->rng, seed);
    int rc = 0;
    for (char *item = copy, *next; !rc && item; item = next) {
        next = strchr(item, ',');
        if (next)
            *next++ = 0;
        char *colon = strchr(item, ':');
        if (!colon) {
            rc = k3_errf(err, "K3_FAULTS: \"%s\" is not kind:value", item);
            break;
        }
        *colon = 0;
        const char *kind = item, *value = colon + 1;
        if (!strcmp(kind, "drive-loss")) {
            uint64_t d = 0, after = 0;
            const char *at = strchr(value, '@');
            if (decimal(value, at ? at : value + strlen(value), &d) || d > INT32_MAX ||
                (at && decimal(at + 1, at + 1 + strlen(at + 1), &after)))
                rc = k3_errf(err, "K3_FAULTS: drive-loss:%s is not DRIVE[@READS]", value);
            f->lost_drive = (int)d;
            f->lost_after = after;
            continue;
        }
        uint64_t *at = !strcmp(kind, "eio-at")      ? &f->eio_at
                       : !strcmp(kind, "refuse-at") ? &f->refuse_at
                                                    : NULL;
        if (at) {
            if (decimal(value, value + strlen(value), at) || *at == 0)
                rc = k3_errf(err, "K3_FAULTS: %s:%s is not a count from 1", kind, value);
            continue;
        }
        double *slot = !strcmp(kind, "eio")       ? &f->eio
                       : !strcmp(kind, "short")   ? &f->shorts
                       : !strcmp(kind, "eagain")  ? &f->eagain
                       : !strcmp(kind, "delay")   ? &f->delay
                       : !strcmp(kind, "corrupt") ? &f->corrupt
                       : !strcmp(kind, "refuse")  ? &f->refuse
                                                  : NULL;
        double p = 0;
        if (!slot)
            rc = k3_errf(err, "K3_FAULTS: unknown kind \"%s\" (eio, short, eagain, delay, "
                              "corrupt, refuse, drive-loss, eio-at, refuse-at)", kind);
        else if (probability(value, &p))
            rc = k3_errf(err, "K3_FAULTS: %s:%s is not a probability in [0, 1]", kind, value);
        else
            *slot = p;
    }
    free(copy);
    if (rc) {
        free(f);
        return rc;
    }
    *out = f;
    return 0;
}

void k3_faults_free(struct k3_faults *f) { free(f); }

int32_t k3_faults_apply(struct k3_faults *f, uint32_t file, uint32_t len, int32_t res, bool *flip)
{
    *flip = false;
    bool eio_here = ++f->n.reads == f->eio_at;
    if ((int)file == f->lost_drive && f->lost_seen++ >= f->lost_after) {
        f->n.lost++;
        return -EIO;
    }
    if (eio_here) {
        f->n.eio++;
        return -EIO;
    }
    if (res <= 0)
        return res;
    double u = k3_rng_uniform(&f->rng);
    if ((u -= f->eio) < 0) {
        f->n.eio++;
        return -EIO;
    }
    if ((u -= f->shorts) < 0 && len > 4096) {
        f->n.shorts++;
        return (int32_t)(len / 2 / 4096 * 4096); /* an aligned part: resubmitted as the rest */
    }
    if ((u -= f->eagain) < 0) {
        f->n.eagain++;
        return -EAGAIN;
    }
    if ((u -= f->delay) < 0) {
        f->n.delays++;
        nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL);
        return res;
    }
    if ((u -= f->corrupt) < 0) {
        f->n.corrupt++;
        *flip = true;
    }
    return res;
}

int k3_faults_refuse(struct k3_faults *f)
{
    /* drawn from the generator only when refuse is asked for: without it, a seed's chunk
     * faults do not move with the number of submissions */
    bool here = ++f->n.submits == f->refuse_at;
    if (here || (f->refuse > 0 && k3_rng_uniform(&f->rng) < f->refuse)) {
        f->n.refused++;
        return -ENOMEM;
    }
    return 0;
}

struct k3_fault_counts k3_faults_counts(const struct k3_faults *f) { return f->n; }
