/* `k3-uring pack`: a checkpoint folder to the striped layout on N drives. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/cli/cli.h"
#include "engine/base/options.h"
#include "engine/pack/pack.h"
#include "engine/pack/pack_format.h"

#define MAX_DRIVES 256
#define MIN_CHUNK (64u << 10)

int cmd_pack(int argc, char **argv)
{
    const char *checkpoint = NULL, *drive_list = NULL, *chunk_text = NULL;
    bool quiet = false;
    int replicas = 1;
    const struct k3_opt opts[] = {
        {"checkpoint", 'm', K3_OPT_STRING, &checkpoint, "DIR", "checkpoint folder as shipped", 0, 0},
        {"drives", 'd', K3_OPT_STRING, &drive_list, "D0,D1,..",
         "drive folders (mount points), in drive order", 0, 0},
        {"chunk", 0, K3_OPT_STRING, &chunk_text, "SIZE|record",
         "largest piece (e.g. 1M; at least 64K); \"record\" keeps records whole, one drive "
         "each; default: each record in one piece per drive", 0, 0},
        {"replicas", 0, K3_OPT_INT, &replicas, "N",
         "copies of every piece: 2 puts a second one on the next drive", 1, 2},
        {"quiet", 'q', K3_OPT_FLAG, &quiet, NULL, "one line per phase, no progress bar", 0, 0},
    };
    const char *usage = "usage: k3-uring pack --checkpoint DIR --drives D0,D1,.. [--chunk SIZE]";
    struct k3_err err = {{0}};
    int rc = k3_opts_parse(opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, usage, &err);
    if (rc > 0)
        return 0;
    struct k3_pack_opts po = {.checkpoint = checkpoint, .progress = !quiet, .replicas = replicas};
    if (!rc && (!checkpoint || !drive_list))
        rc = k3_errf(&err, "pack: --checkpoint and --drives are required (see --help)");
    if (!rc && chunk_text && !strcmp(chunk_text, "record")) {
        po.whole_records = true;
    } else if (!rc && chunk_text) {
        if (k3_parse_size(chunk_text, &po.chunk) || po.chunk < MIN_CHUNK)
            rc = k3_errf(&err, "--chunk: \"%s\" is not a size of at least 64K (or \"record\")",
                         chunk_text);
        po.chunk = k3_pack_round_up(po.chunk, K3_PACK_ALIGN);
    }
    char *list = drive_list ? strdup(drive_list) : NULL;
    const char *drives[MAX_DRIVES];
    int n = 0;
    for (char *t = list ? strtok(list, ",") : NULL; !rc && t; t = strtok(NULL, ","))
        if (n < MAX_DRIVES)
            drives[n++] = t;
        else
            rc = k3_errf(&err, "--drives: more than %d drives", MAX_DRIVES);
    if (!rc && list && !n)
        rc = k3_errf(&err, "--drives: no drives");
    if (rc) {
        fprintf(stderr, "k3-uring pack: %s\n", err.msg);
        free(list);
        return 2;
    }
    po.drives = drives;
    po.n_drives = n;
    rc = k3_pack(&po, &err);
    free(list);
    if (rc) {
        fprintf(stderr, "k3-uring pack: %s\n", err.msg);
        return 1;
    }
    return 0;
}
