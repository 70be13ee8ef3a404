/* synth never prints (err.h: only the CLI does): its progress reaches the caller as
 * notes, one per shard, and stderr stays empty. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/synth/synth.h"
#include "tests/check.h"
#include "tests/util.h"

struct heard {
    int n;
    char lines[8][256];
};

static void collect(void *ctx, const char *line)
{
    struct heard *h = ctx;
    if (h->n < 8)
        snprintf(h->lines[h->n], sizeof h->lines[0], "%s", line);
    h->n++;
}

int main(void)
{
    char dir[4096], log[4096];
    mkdir(test_tmp(), 0755);
    snprintf(dir, sizeof dir, "%s/synth-notes", test_tmp());
    snprintf(log, sizeof log, "%s/synth-notes.stderr", test_tmp());
    char cmd[8300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    REQUIRE(system(cmd) == 0, "%s", cmd);

    struct k3_config c;
    struct k3_err err = {{0}};
    REQUIRE(k3_config_named(&c, "k3-tiny", &err) == 0, "%s", err.msg);
    struct heard h = {0};
    const struct k3_synth_notes notes = {collect, &h};
    /* stderr into a file while the library runs */
    fflush(stderr);
    int saved = dup(2), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(saved >= 0 && fd >= 0 && dup2(fd, 2) == 2, "redirect stderr");
    int rc = k3_synth(&c, 1, dir, &notes, &err);
    fflush(stderr);
    dup2(saved, 2);
    close(fd);
    close(saved);
    k3_config_free(&c);
    REQUIRE(rc == 0, "%s", err.msg);

    struct stat st;
    CHECK(stat(log, &st) == 0 && st.st_size == 0, "synth wrote %lld bytes to stderr",
          (long long)st.st_size);
    CHECK(h.n == 3, "%d notes, want one per shard (3)", h.n);
    for (int i = 0; i < h.n && i < 3; i++) {
        char want[64];
        snprintf(want, sizeof want, "model-%05d-of-00003.safetensors (", i + 1);
        CHECK(!strncmp(h.lines[i], want, strlen(want)) && strstr(h.lines[i], " tensors)"),
              "note %d: \"%s\"", i, h.lines[i]);
    }
    system(cmd);
    return check_result();
}
