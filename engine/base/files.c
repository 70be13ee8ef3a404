#include "engine/base/files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int k3_path_join(char *buf, size_t cap, const char *dir, const char *file, struct k3_err *err)
{
    int n = snprintf(buf, cap, "%s/%s", dir, file);
    if (n < 0 || (size_t)n >= cap)
        return k3_errf(err, "%s/%s: path too long", dir, file);
    return 0;
}

int k3_mkdir_parents(const char *dir, struct k3_err *err)
{
    char path[K3_PATH_MAX];
    size_t n = strlen(dir);
    if (n >= sizeof path)
        return k3_errf(err, "%s: path too long", dir);
    memcpy(path, dir, n + 1);
    for (char *p = path + 1; ; p++) {
        if (*p != '/' && *p)
            continue;
        char saved = *p;
        *p = 0;
        if (mkdir(path, 0755) && errno != EEXIST)
            return k3_errf(err, "%s: %s", path, strerror(errno));
        if (!(*p = saved))
            return 0;
    }
}

/* Bytes to allocate before the first read: a regular file's size (plus the NUL and one
 * byte to see the end without growing), else a guess; SIZE_MAX when the file already
 * holds more than max. */
static size_t first_capacity(int fd, size_t max)
{
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode))
        return (size_t)1 << 16;
    if ((uint64_t)st.st_size > max)
        return SIZE_MAX;
    return (size_t)st.st_size + 2;
}

int k3_read_fd(int fd, const char *name, size_t max, char **data, size_t *len,
               struct k3_err *err)
{
    *data = NULL;
    *len = 0;
    size_t cap = first_capacity(fd, max), got = 0;
    if (cap == SIZE_MAX)
        return k3_errf(err, "%s: larger than %zu MB", name, max >> 20);
    char *buf = malloc(cap);
    for (;;) {
        if (!buf)
            return k3_errf(err, "%s: out of memory", name);
        if (got == cap - 1) { /* full: grow up to max + 1 bytes, enough to see an excess */
            size_t grown = cap > max / 2 ? max + 2 : 2 * cap;
            if (grown <= cap) {
                free(buf);
                return k3_errf(err, "%s: larger than %zu MB", name, max >> 20);
            }
            char *nb = realloc(buf, grown);
            if (!nb)
                free(buf);
            buf = nb;
            cap = grown;
            continue;
        }
        ssize_t n = read(fd, buf + got, cap - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            free(buf);
            return k3_errf(err, "%s: read failed: %s", name, strerror(e));
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    buf[got] = 0;
    *data = buf;
    *len = got;
    return 0;
}

int k3_read_small_file(const char *path, char **data, size_t *len, struct k3_err *err)
{
    *data = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return k3_errf(err, "%s: %s", path, strerror(errno));
    int rc = k3_read_fd(fd, path, K3_SMALL_FILE_MAX, data, len, err);
    close(fd);
    return rc;
}

int k3_write_text(const char *dir, const char *file, const char *text, struct k3_err *err)
{
    char path[K3_PATH_MAX];
    if (k3_path_join(path, sizeof path, dir, file, err))
        return -1;
    FILE *f = fopen(path, "wb");
    if (!f)
        return k3_errf(err, "%s: %s", path, strerror(errno));
    int bad = fputs(text, f) == EOF || fputc('\n', f) == EOF;
    bad |= fclose(f) != 0;
    return bad ? k3_errf(err, "%s: write failed: %s", path, strerror(errno)) : 0;
}
