/* A default pack's sizes for a config (pack_sizes.h). */
#include "engine/plan/pack_sizes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/base/files.h"
#include "engine/model/config_presets.h"
#include "engine/model/tensors.h"
#include "engine/pack/pack_format.h"
#include "engine/pack/pack_plan.h"

/* Bytes of the file dir/name, 0 when there is none. */
static uint64_t file_bytes(const char *dir, const char *name)
{
    char path[K3_PATH_MAX];
    struct stat st;
    if (k3_path_join(path, sizeof path, dir, name, NULL) || stat(path, &st))
        return 0;
    return (uint64_t)st.st_size;
}

/* The manifest's sections besides the tables: the config as pack stores it (the file's
 * bytes, or a preset's text), and, for a config.json inside a checkpoint folder, that
 * folder's tokenizer files. */
static void checkpoint_sections(const char *config, const struct k3_tensor_spec *specs, int n,
                                struct k3_pack_sections *sec)
{
    *sec = (struct k3_pack_sections){.n_tensors = (uint64_t)n};
    for (int i = 0; i < n; i++)
        sec->names += strlen(specs[i].name) + 1;
    if (k3_config_preset(config)) {
        sec->config = strlen(k3_config_preset(config));
        return;
    }
    char dir[K3_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", config);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    sec->config = file_bytes(dir, slash ? slash + 1 : config);
    sec->tiktoken = file_bytes(dir, "tiktoken.model");
    sec->tokconfig = file_bytes(dir, "tokenizer_config.json");
}

/* Each spec's bytes as synth stores it, its large matrices as trunk type tt holds them
 * ([n], malloc'd; NULL when out of memory); in *q8 the Q8_0 matrices' bytes. */
static uint64_t *spec_bytes(const struct k3_tensor_spec *specs, int n, enum k3_trunk_type tt,
                            double *q8)
{
    uint64_t *bytes = calloc((size_t)n, sizeof *bytes);
    *q8 = 0;
    for (int i = 0; bytes && i < n; i++) {
        int64_t numel = 1;
        for (int d = 0; d < specs[i].ndim; d++)
            numel *= specs[i].shape[d];
        enum k3_dtype dt = k3_spec_trunk_dtype(&specs[i], tt);
        bytes[i] = k3_dtype_bytes(dt, numel);
        if (dt == K3_DT_Q8_0)
            *q8 += (double)bytes[i];
    }
    return bytes;
}

static double overlapping_trunk_bytes(const struct k3_tensor_spec *specs, int n,
                                      const uint64_t *bytes)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        switch (specs[i].slot) {
        case K3_SLOT_SHARED_GATE: case K3_SLOT_SHARED_UP: case K3_SLOT_SHARED_DOWN:
        case K3_SLOT_LATENT_DOWN:
            sum += (double)bytes[i];
            break;
        default:
            break;
        }
    return sum;
}

int k3_plan_pack_of(const struct k3_config *c, const char *config, int n_drives,
                    enum k3_trunk_type tt, struct k3_plan_pack *out, struct k3_err *err)
{
    *out = (struct k3_plan_pack){0};
    struct k3_tensor_spec *specs;
    int n;
    if (k3_trunk_specs(c, &specs, &n))
        return k3_errf(err, "out of memory");
    uint64_t *bytes = spec_bytes(specs, n, tt, &out->q8);
    struct k3_trunk_layout t = {0};
    struct k3_pack_plan pp = {0};
    struct k3_record_layout rec;
    k3_record_layout_init(&rec, c);
    struct k3_pack_geometry g = {.n_drives = n_drives, .replicas = 1};
    int rc = bytes && !k3_trunk_layout_init(&t, c, specs, n, bytes) ? 0
                                                                     : k3_errf(err, "out of memory");
    if (!rc)
        rc = k3_pack_plan(&pp, c, t.segment_bytes, t.n_segments, rec.bytes, &g, err);
    if (!rc && !(out->segments = calloc((size_t)t.n_segments, sizeof *out->segments)))
        rc = k3_errf(err, "out of memory");
    for (int s = 0; !rc && s < t.n_segments; s++)
        out->segments[s] = k3_pack_round_up(t.segment_bytes[s], K3_PACK_ALIGN);
    if (!rc) {
        struct k3_pack_sections sec;
        checkpoint_sections(config, specs, n, &sec);
        out->overlapping = overlapping_trunk_bytes(specs, n, bytes);
        out->pack = (struct k3_budget_pack){
            .n_segments = t.n_segments,
            .segment_bytes = out->segments,
            .vector_bytes = k3_budget_vector_bytes(specs, n),
            .record_bytes = k3_pack_round_up(rec.bytes, K3_PACK_ALIGN),
            .embed_piece_bytes = pp.trunk_piece,
            .manifest_bytes = k3_pack_manifest_bytes(&pp, &sec),
        };
    }
    k3_pack_plan_free(&pp);
    k3_trunk_layout_free(&t);
    free(bytes);
    free(specs);
    return rc;
}

void k3_plan_pack_free(struct k3_plan_pack *pk)
{
    free(pk->segments);
    *pk = (struct k3_plan_pack){0};
}
