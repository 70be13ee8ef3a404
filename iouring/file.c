#include "iouring/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

int k3io_open(struct k3io_file *f, const char *path, int flags, bool prefer_direct)
{
    f->fd = -1;
    f->direct = false;
    int fd = -1;
    if (prefer_direct) {
        fd = open(path, flags | O_DIRECT | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EINVAL)
            return -errno;
        f->direct = fd >= 0;
    }
    if (fd < 0)
        fd = open(path, flags | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st)) {
        int e = errno;
        close(fd);
        return -e;
    }
    f->fd = fd;
    f->size = (uint64_t)st.st_size;
    return 0;
}

void k3io_close(struct k3io_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
}

ssize_t k3io_pread_full(const struct k3io_file *f, void *buf, size_t len, uint64_t off)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(f->fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        done += (size_t)n;
    }
    return (ssize_t)done;
}

int k3io_pwrite_full(const struct k3io_file *f, const void *buf, size_t len, uint64_t off)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = pwrite(f->fd, (const char *)buf + done, len - done, (off_t)(off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EIO;
        done += (size_t)n;
    }
    return 0;
}

void *k3io_alloc(size_t len)
{
    const size_t huge = 2u << 20;
    size_t align = len >= huge ? huge : K3IO_ALIGN;
    size_t n = len ? (len + align - 1) / align * align : align;
    void *p = aligned_alloc(align, n);
    if (!p)
        return NULL;
    if (align == huge)
        madvise(p, n, MADV_HUGEPAGE); /* advice only: without THP it is ordinary memory */
    memset(p, 0, n);
    return p;
}

void *k3io_reserve(size_t len)
{
    const size_t huge = 2u << 20;
    size_t n = (len ? len : 1) + huge - 1;
    n -= n % huge;
    /* Over-map by a huge page and trim, for 2 MiB alignment without touching a byte. */
    uint8_t *raw = mmap(NULL, n + huge, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    size_t lead = (huge - (uintptr_t)raw % huge) % huge;
    if (lead)
        munmap(raw, lead);
    munmap(raw + lead + n, huge - lead);
    madvise(raw + lead, n, MADV_HUGEPAGE); /* advice only, as in k3io_alloc */
    return raw + lead;
}

void k3io_release(void *p, size_t len)
{
    const size_t huge = 2u << 20;
    if (p)
        munmap(p, ((len ? len : 1) + huge - 1) / huge * huge);
}

/* A number in a sysfs file, or 0. */
static uint64_t sysfs_number(const char *path)
{
    FILE *f = fopen(path, "r");
    unsigned long long v = 0;
    if (f && fscanf(f, "%llu", &v) != 1)
        v = 0;
    if (f)
        fclose(f);
    return v;
}

uint64_t k3io_device_max_read(const char *path)
{
    struct stat st;
    if (stat(path, &st))
        return 0;
    static const char *const where[] = {"queue", "../queue"}; /* a disk, a partition */
    for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
        char sys[128];
        snprintf(sys, sizeof sys, "/sys/dev/block/%u:%u/%s/max_sectors_kb", major(st.st_dev),
                 minor(st.st_dev), where[i]);
        uint64_t kb = sysfs_number(sys);
        if (kb)
            return kb << 10;
    }
    return 0;
}
