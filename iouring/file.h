/* Files on the drives: opened for O_DIRECT where the filesystem allows it, buffered
 * where it refuses (EINVAL, e.g. tmpfs before Linux 6.6, ramfs), and read or written
 * in full with EINTR and short transfers handled.
 *
 * Owns: the open flags and the fallback decision for one file, aligned buffers.
 * Does not own: what the bytes mean, rings and batching (reader.h).  Functions return 0
 * or a byte count, and -errno on failure; they never print.
 */
#ifndef K3IO_FILE_H
#define K3IO_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Offsets, lengths and buffers of direct I/O are kept multiples of this (the largest
 * logical block size in use; ext4 and NVMe need 512 or 4096). */
#define K3IO_ALIGN 4096u

struct k3io_file {
    int fd;
    bool direct;   /* O_DIRECT in effect */
    uint64_t size; /* at open */
};

/* Opens path with flags (O_RDONLY, or O_RDWR|O_CREAT...) plus O_DIRECT when prefer_direct,
 * falling back to buffered I/O when the filesystem refuses O_DIRECT. */
int k3io_open(struct k3io_file *f, const char *path, int flags, bool prefer_direct);
void k3io_close(struct k3io_file *f);

/* Reads len bytes at off; returns the bytes read (fewer only at end of file) or -errno. */
ssize_t k3io_pread_full(const struct k3io_file *f, void *buf, size_t len, uint64_t off);
/* Writes len bytes at off; 0 or -errno. */
int k3io_pwrite_full(const struct k3io_file *f, const void *buf, size_t len, uint64_t off);

/* The most the block device under path (a file or folder on it) takes in one request,
 * in bytes (its queue/max_sectors_kb; a partition's is its disk's): a read above it is
 * split by the kernel, so a larger chunk buys nothing.  0 when there is no such device
 * (tmpfs, overlay) or sysfs does not say. */
uint64_t k3io_device_max_read(const char *path);

/* Page-aligned memory (K3IO_ALIGN), zeroed; NULL on failure.  Free with free().  Areas
 * of 2 MiB or more are 2 MiB-aligned and asked to be transparent huge pages: fewer,
 * physically larger pieces per read (bench/results/engine-choices.md). */
void *k3io_alloc(size_t len);

/* Address space for len bytes, 2 MiB-aligned, asked to be transparent huge pages, and
 * not touched: each page is faulted in (zeroed) when first written or pinned, so memory
 * is taken as it is used, up to len.  NULL on failure.  Free with k3io_release(p, len). */
void *k3io_reserve(size_t len);
void k3io_release(void *p, size_t len);

#endif
