#include "engine/base/files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_SMALL_FILE (256u << 20)

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

int k3_read_small_file(const char *path, char **text, size_t *len, struct k3_err *err)
{
    *text = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return k3_errf(err, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > MAX_SMALL_FILE) {
        close(fd);
        return k3_errf(err, "%s: not a regular file of at most %u MB", path, MAX_SMALL_FILE >> 20);
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    if (!buf || got != (size_t)st.st_size) {
        free(buf);
        return k3_errf(err, "%s: read failed", path);
    }
    buf[got] = 0;
    *text = buf;
    *len = got;
    return 0;
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
