/* Small file helpers shared by the loaders and writers: bounded path joining, whole
 * small files in and out. */
#ifndef K3_FILES_H
#define K3_FILES_H

#include <stddef.h>

#include "engine/base/err.h"

#define K3_PATH_MAX 4096

/* buf = dir/file; -1 (with err) when it does not fit. */
int k3_path_join(char *buf, size_t cap, const char *dir, const char *file, struct k3_err *err);

/* Creates dir and any missing parents (mode 0755); an existing folder is fine. */
int k3_mkdir_parents(const char *dir, struct k3_err *err);

/* Reads a whole file (at most 256 MB) into a NUL-terminated malloc'd buffer. */
int k3_read_small_file(const char *path, char **text, size_t *len, struct k3_err *err);

/* Writes text and a final newline to dir/file. */
int k3_write_text(const char *dir, const char *file, const char *text, struct k3_err *err);

#endif
