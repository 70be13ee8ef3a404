/* Small file helpers shared by the loaders, writers, CLI and tests: bounded path
 * joining, whole small files in and out.  The one place a whole file is read: every
 * caller goes through k3_read_fd (directly for stdin, else through k3_read_small_file).
 * Owns: k3_path_join, k3_mkdir_parents, the small-file bound and the whole-file reads and
 * writes.  Does not own: the checkpoint's and the drives' bulk reads (model/, stream/, iouring/). */
#ifndef K3_FILES_H
#define K3_FILES_H

#include <stddef.h>

#include "engine/base/err.h"

#define K3_PATH_MAX 4096

/* buf = dir/file; -1 (with err) when it does not fit. */
int k3_path_join(char *buf, size_t cap, const char *dir, const char *file, struct k3_err *err);

/* Creates dir and any missing parents (mode 0755); an existing folder is fine. */
int k3_mkdir_parents(const char *dir, struct k3_err *err);

/* The most a whole-file read takes: configs, indexes, vocabularies, prompts. */
#define K3_SMALL_FILE_MAX ((size_t)256 << 20)

/* Reads fd to its end, at most max bytes, into a malloc'd buffer with a NUL after the
 * data; the data may be binary (*len counts it, NULs included).  Works on pipes as on
 * regular files.  name names the file in messages. */
int k3_read_fd(int fd, const char *name, size_t max, char **data, size_t *len,
               struct k3_err *err);

/* Opens path and reads all of it (at most K3_SMALL_FILE_MAX bytes) as k3_read_fd does. */
int k3_read_small_file(const char *path, char **data, size_t *len, struct k3_err *err);

/* Writes text and a final newline to dir/file. */
int k3_write_text(const char *dir, const char *file, const char *text, struct k3_err *err);

#endif
