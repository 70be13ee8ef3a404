#include "engine/stream/faults.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/rng.h"

struct k3_faults {
    double eio, shorts, eagain, delay, corrupt;
    int lost_drive;      /* -1: none */
    uint64_t lost_after; /* reads on that drive that still succeed */
    uint64_t lost_seen;
    struct k3_rng rng;
    struct k3_fault_counts n;
};

int k3_faults_seed_env(uint64_t *seed, struct k3_err *err)
{
    const char *v = getenv("K3_FAULTS_SEED");
    *seed = 1;
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (*v < '0' || *v > '9' || *end || errno)
        return k3_errf(err, "K3_FAULTS_SEED=%s: not a decimal number below 2^64", v);
    *seed = n;
    return 0;
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
    for (char *save = NULL, *item = strtok_r(copy, ",", &save); !rc && item;
         item = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(item, ':'), *end;
        if (!colon) {
            rc = k3_errf(err, "K3_FAULTS: \"%s\" is not kind:value", item);
            break;
        }
        *colon = 0;
        const char *kind = item, *value = colon + 1;
        if (!strcmp(kind, "drive-loss")) {
            long d = strtol(value, &end, 10);
            long after = *end == '@' ? strtol(end + 1, &end, 10) : 0;
            if (d < 0 || after < 0 || *end)
                rc = k3_errf(err, "K3_FAULTS: drive-loss:%s is not DRIVE[@READS]", value);
            f->lost_drive = (int)d;
            f->lost_after = (uint64_t)after;
            continue;
        }
        double p = strtod(value, &end);
        double *slot = !strcmp(kind, "eio")       ? &f->eio
                       : !strcmp(kind, "short")   ? &f->shorts
                       : !strcmp(kind, "eagain")  ? &f->eagain
                       : !strcmp(kind, "delay")   ? &f->delay
                       : !strcmp(kind, "corrupt") ? &f->corrupt
                                                  : NULL;
        if (!slot)
            rc = k3_errf(err, "K3_FAULTS: unknown kind \"%s\" (eio, short, eagain, delay, "
                              "corrupt, drive-loss)", kind);
        else if (*end || !(p >= 0 && p <= 1))
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
    if ((int)file == f->lost_drive && f->lost_seen++ >= f->lost_after) {
        f->n.lost++;
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

struct k3_fault_counts k3_faults_counts(const struct k3_faults *f) { return f->n; }
