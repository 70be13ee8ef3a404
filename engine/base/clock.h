/* The engine's clocks, in seconds as a double.
 *
 * Owns: k3_now, the monotonic clock every duration and deadline measured here reads (an
 * NTP step cannot stretch or cut it), and k3_cpu_seconds, the CPU time this process has
 * used over all its threads.  Does not own: iouring/'s k3io__now (iouring/ knows nothing
 * of engine/, and reads the same clock) or wall-clock dates.
 */
#ifndef K3_CLOCK_H
#define K3_CLOCK_H

/* CLOCK_MONOTONIC, seconds since an arbitrary start. */
double k3_now(void);

/* CPU seconds this process has used, every thread (CLOCK_PROCESS_CPUTIME_ID). */
double k3_cpu_seconds(void);

#endif
