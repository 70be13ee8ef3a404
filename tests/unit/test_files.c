/* k3_read_fd / k3_read_small_file, the one whole-file read: binary data comes back
 * whole and NUL-terminated, pipes read to their end, and a file over the limit or a
 * folder is refused with its name in the message. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/base/files.h"
#include "tests/check.h"
#include "tests/util.h"

static void write_bytes(const char *path, const char *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(fd >= 0 && write(fd, data, len) == (ssize_t)len, "cannot write %s", path);
    close(fd);
}

static void test_binary_file(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/binary", dir);
    static const char bytes[] = {'a', 0, 'b', (char)0xFF, 0};
    write_bytes(path, bytes, sizeof bytes);
    char *data;
    size_t len;
    struct k3_err err;
    REQUIRE(!k3_read_small_file(path, &data, &len, &err), "%s", err.msg);
    CHECK(len == sizeof bytes && !memcmp(data, bytes, len) && data[len] == 0,
          "binary data read back: %zu bytes", len);
    free(data);
    snprintf(path, sizeof path, "%s/empty", dir);
    write_bytes(path, "", 0);
    REQUIRE(!k3_read_small_file(path, &data, &len, &err), "%s", err.msg);
    CHECK(len == 0 && data[0] == 0, "an empty file is an empty string");
    free(data);
}

/* More than the first guess of a pipe's size (64 KiB), read to EOF. */
static void test_pipe(void)
{
    enum { N = 200000 };
    char *want = malloc(N);
    REQUIRE(want, "out of memory");
    for (size_t i = 0; i < N; i++)
        want[i] = (char)(i * 7 + i / 251);
    int fds[2];
    REQUIRE(!pipe(fds), "pipe");
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        close(fds[0]);
        for (size_t o = 0; o < N;) {
            ssize_t n = write(fds[1], want + o, N - o < 4096 ? N - o : 4096);
            if (n <= 0)
                _exit(1);
            o += (size_t)n;
        }
        _exit(0);
    }
    close(fds[1]);
    char *data;
    size_t len;
    struct k3_err err;
    REQUIRE(!k3_read_fd(fds[0], "pipe", K3_SMALL_FILE_MAX, &data, &len, &err), "%s", err.msg);
    close(fds[0]);
    waitpid(pid, NULL, 0);
    CHECK(len == N && !memcmp(data, want, N) && data[N] == 0, "pipe: %zu bytes of %d", len, N);
    free(data);
    free(want);
}

static void test_limits(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/big", dir);
    static char big[3 << 20];
    memset(big, 'x', sizeof big);
    write_bytes(path, big, sizeof big);
    char *data = NULL;
    size_t len;
    struct k3_err err = {{0}};
    int fd = open(path, O_RDONLY);
    REQUIRE(fd >= 0, "open %s", path);
    CHECK(k3_read_fd(fd, path, 2 << 20, &data, &len, &err) == -1 && !data &&
              strstr(err.msg, path) && strstr(err.msg, "larger than 2 MB"),
          "a regular file over the limit: \"%s\"", err.msg);
    close(fd);
    /* The same through a pipe, where the size is only known by reading. */
    int fds[2];
    REQUIRE(!pipe(fds), "pipe");
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        close(fds[0]);
        ssize_t n = write(fds[1], big, sizeof big);
        _exit(n == (ssize_t)sizeof big ? 0 : 1);
    }
    close(fds[1]);
    CHECK(k3_read_fd(fds[0], "stdin", 1 << 20, &data, &len, &err) == -1 && !data &&
              strstr(err.msg, "stdin: larger than 1 MB"),
          "a pipe over the limit: \"%s\"", err.msg);
    close(fds[0]);
    waitpid(pid, NULL, 0);
    CHECK(k3_read_small_file(dir, &data, &len, &err) == -1 && !data && strstr(err.msg, dir),
          "a folder: \"%s\"", err.msg);
    snprintf(path, sizeof path, "%s/absent", dir);
    CHECK(k3_read_small_file(path, &data, &len, &err) == -1 && strstr(err.msg, path) &&
              strstr(err.msg, "No such file"),
          "a missing file: \"%s\"", err.msg);
}

int main(void)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/test_files", test_tmp());
    mkdir(test_tmp(), 0755);
    mkdir(dir, 0755);
    test_binary_file(dir);
    test_pipe();
    test_limits(dir);
    return check_result();
}
