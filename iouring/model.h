/* A drive model (--drive-model RATE[,LATENCY]): the reader times every read as if each of
 * its files were a drive of a given bandwidth and latency, and hands a read back no
 * earlier than that drive would have.  The bytes still come from the real files through
 * the real backend, so the output does not change; the model can only slow reads down.
 * It exists because blk-throttle refunds a drive's idle time (an idle throttled drive
 * reads the next burst faster), so a read path that leaves its drives idle (--sync) could
 * not be measured on emulated drives.
 *
 * The model, per drive, for a read of `bytes` started (handed to the backend) at `submit`:
 *
 *   start      = max(submit, busy_until)   reads are served in the order they start; an
 *                                          idle drive's past is never banked
 *   busy_until = start + bytes / rate      the drive moves one read's bytes at a time
 *   release    = busy_until + latency      and hands them on latency after it has
 *
 * Latency sits after the transfer and outside busy_until because on NVMe the per-command
 * latency (flash read, controller, completion) overlaps other commands in a deep queue,
 * while the bandwidth is shared: n reads of b bytes queued at once finish at
 * n·b/rate + latency (the drive streams at rate), and a lone read costs latency + b/rate,
 * the two figures fio gives for one drive (iodepth 64 and iodepth 1).
 *
 * Owns: the arithmetic above, the RATE[,LATENCY] syntax.  Does not own: holding reads
 * back until their time (reader.c, model.c), what the figures are reported as.
 */
#ifndef K3IO_MODEL_H
#define K3IO_MODEL_H

#include <stddef.h>
#include <stdint.h>

struct k3io_drive_model {
    double rate;    /* bytes per second, per file (drive); 0: no model */
    double latency; /* seconds, >= 0 */
};

/* One read on one drive: advances *busy_until and returns the release time (seconds on
 * the caller's clock, the same as submit's). */
static inline double k3io_model_read(const struct k3io_drive_model *m, double *busy_until,
                                     double submit, uint64_t bytes)
{
    double start = submit > *busy_until ? submit : *busy_until;
    *busy_until = start + (double)bytes / m->rate;
    return *busy_until + m->latency;
}

/* "7GB/s", "7GB/s,80us", "500MiB/s,1ms", "1e9": RATE is bytes per second with an optional
 * unit B/s, KB/s, MB/s, GB/s, TB/s (powers of 1000, as drives are rated) or KiB/s, MiB/s,
 * GiB/s, TiB/s (the "/s" may be left out); LATENCY a number with a unit ns, us, ms or s
 * (0 needs none; default 0).  Returns 0, or -EINVAL with why (a phrase naming the part
 * that is wrong) filled. */
int k3io_drive_model_parse(const char *text, struct k3io_drive_model *out, char *why,
                           size_t why_len);

/* "7 GB/s, 80 us" (the model as a person reads it). */
void k3io_drive_model_format(const struct k3io_drive_model *m, char *buf, size_t len);

#endif
