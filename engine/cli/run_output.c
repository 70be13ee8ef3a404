/* What `run` writes: generated text or ids on stdout, --logits-out, --dump-layers. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "engine/cli/run.h"

void run_emit(struct emitter *e, int32_t id)
{
    if (e->ids) {
        printf(e->count ? ",%d" : "%d", id);
    } else if (e->special || !k3_tok_is_special(e->tok, id)) {
        size_t len;
        const uint8_t *bytes = k3_tok_bytes(e->tok, id, &len);
        char buf[1024];
        const size_t max_in = (sizeof buf - 9) / 3; /* K3_UTF8_OUT_MAX(max_in) fits buf */
        while (bytes && len) { /* a token's bytes, in pieces the buffer holds */
            size_t take = len < max_in ? len : max_in;
            fwrite(buf, 1, k3_utf8_push(&e->utf8, bytes, take, buf), stdout);
            bytes += take;
            len -= take;
        }
    }
    e->count++;
    fflush(stdout);
}

void run_emit_end(struct emitter *e)
{
    char buf[16];
    if (!e->ids)
        fwrite(buf, 1, k3_utf8_flush(&e->utf8, buf), stdout);
    putchar('\n');
    fflush(stdout);
}

/* ---- --logits-out ---------------------------------------------------------------- */

int run_logits_open(struct logits_file *lf, const char *path, struct k3_err *err)
{
    lf->path = path;
    int n = snprintf(lf->tmp, sizeof lf->tmp, "%s.partial", path);
    if (n < 0 || (size_t)n >= sizeof lf->tmp)
        return k3_errf(err, "--logits-out %s: path too long", path);
    if (!(lf->f = fopen(lf->tmp, "wb")))
        return k3_errf(err, "--logits-out %s: %s", lf->tmp, strerror(errno));
    return 0;
}

int run_logits_write(struct logits_file *lf, const float *rows, int n, int vocab,
                     struct k3_err *err)
{
    if (lf->f && fwrite(rows, sizeof(float) * (size_t)vocab, (size_t)n, lf->f) != (size_t)n)
        return k3_errf(err, "%s: write failed: %s", lf->tmp, strerror(errno));
    return 0;
}

int run_logits_commit(struct logits_file *lf, struct k3_err *err)
{
    FILE *f = lf->f;
    lf->f = NULL;
    int rc = 0;
    if (fclose(f))
        rc = k3_errf(err, "%s: write failed: %s", lf->tmp, strerror(errno));
    else if (rename(lf->tmp, lf->path))
        rc = k3_errf(err, "--logits-out %s: %s", lf->path, strerror(errno));
    if (rc)
        unlink(lf->tmp);
    return rc;
}

void run_logits_close(struct logits_file *lf, bool keep)
{
    if (!lf->f)
        return;
    fclose(lf->f);
    lf->f = NULL;
    if (!keep)
        unlink(lf->tmp);
}

/* ---- --dump-layers --------------------------------------------------------------- */

void run_dump_hook(void *ctx, int pos, int layer, const float *x, int H)
{
    struct layer_dump *d = ctx;
    if (pos >= d->positions)
        return;
    double ss = 0, sum = 0, mx = 0;
    for (int i = 0; i < H; i++) {
        ss += (double)x[i] * x[i];
        sum += x[i];
        mx = fabs(x[i]) > mx ? fabs(x[i]) : mx;
    }
    float *s = d->stats + ((size_t)pos * (d->layers + 1) + layer) * 3;
    s[0] = (float)sqrt(ss / H);
    s[1] = (float)(sum / H);
    s[2] = (float)mx;
}

int run_dump_write(const struct layer_dump *d, int positions, const char *path,
                   struct k3_err *err)
{
    json_t *rows = json_array();
    for (int p = 0; p < positions; p++) {
        json_t *layers = json_array();
        for (int l = 0; l <= d->layers; l++) {
            const float *s = d->stats + ((size_t)p * (d->layers + 1) + l) * 3;
            json_array_append_new(layers, json_pack("[f, f, f]", s[0], s[1], s[2]));
        }
        json_array_append_new(rows, layers);
    }
    json_t *root = json_pack("{s:s, s:o}", "fields", "rms, mean, max_abs", "layer_stats", rows);
    int rc = json_dump_file(root, path, JSON_COMPACT) ? k3_errf(err, "%s: write failed", path) : 0;
    json_decref(root);
    return rc;
}
