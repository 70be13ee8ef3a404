#include "engine/base/clock.h"

#include <time.h>

static double seconds_of(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double k3_now(void) { return seconds_of(CLOCK_MONOTONIC); }

double k3_cpu_seconds(void) { return seconds_of(CLOCK_PROCESS_CPUTIME_ID); }
