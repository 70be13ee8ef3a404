/* Calibrations (rates.h): one parser for the built-in file and the user's. */
#include "engine/plan/rates.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>

#include "engine/base/files.h"

/* calibration.S */
extern const char k3_calibration_json[], k3_calibration_json_end[];

/* Key `key` of root into *dst when present: a number above min (or at least min, with
 * min_ok); -1 naming the key otherwise.  *dst stays as it was when absent. */
static int number(json_t *root, const char *key, double min, bool min_ok, double *dst,
                  const char *name, struct k3_err *err)
{
    json_t *v = json_object_get(root, key);
    if (!v)
        return 0;
    double x = json_is_number(v) ? json_number_value(v) : min - 1;
    if (!(x > min || (min_ok && x == min)))
        return k3_errf(err, "%s: %s must be a %s", name, key,
                       min_ok ? "number >= 0" : "positive number");
    *dst = x;
    return 0;
}

/* Without a many-row measurement, a prompt pass is taken to run at the one-row rates: 2
 * flops per weight, MXFP4 at 17 bytes per 32 weights, bf16 at 2 bytes.  Q8_0's, unless
 * given, are bf16's scaled by the fractions measured beside them. */
static void complete(struct k3_rates *r)
{
    if (!r->mxfp4_gflops)
        r->mxfp4_gflops = r->mxfp4_core * 2 * 32 / 17;
    if (!r->bf16_gflops)
        r->bf16_gflops = r->bf16_core;
    if (!r->q8_core)
        r->q8_core = r->bf16_core * r->q8_gbps_of_bf16;
    if (!r->q8_gflops)
        r->q8_gflops = r->bf16_gflops * r->q8_gflops_of_bf16;
}

int k3_rates_parse(const char *json, size_t len, const char *name, const struct k3_rates *fallback,
                   struct k3_rates *r, struct k3_err *err)
{
    *r = (struct k3_rates){0};
    if (fallback) {
        r->read_cpu = fallback->read_cpu;
        r->q8_gbps_of_bf16 = fallback->q8_gbps_of_bf16;
        r->q8_gflops_of_bf16 = fallback->q8_gflops_of_bf16;
    }
    json_error_t jerr;
    json_t *root = json_loadb(json, len, 0, &jerr);
    if (!root)
        return k3_errf(err, "%s: %s", name, jerr.text);
    json_t *m = json_object_get(root, "mxfp4_gbps_per_core"), *bf = json_object_get(root, "bf16_gbps_per_core");
    int rc = json_is_number(m) && json_is_number(bf) && json_number_value(m) > 0 &&
                     json_number_value(bf) > 0
                 ? 0
                 : k3_errf(err, "%s: needs positive mxfp4_gbps_per_core and bf16_gbps_per_core",
                           name);
    if (!rc) {
        r->mxfp4_core = json_number_value(m);
        r->bf16_core = json_number_value(bf);
    }
    const char *keys[6] = {"mxfp4_gflops_per_core", "bf16_gflops_per_core", "q8_0_gflops_per_core",
                           "q8_0_gbps_per_core", "q8_0_gbps_of_bf16", "q8_0_gflops_of_bf16"};
    double *dst[6] = {&r->mxfp4_gflops, &r->bf16_gflops, &r->q8_gflops, &r->q8_core,
                      &r->q8_gbps_of_bf16, &r->q8_gflops_of_bf16};
    for (int i = 0; !rc && i < 6; i++)
        rc = number(root, keys[i], 0, false, dst[i], name, err);
    if (!rc)
        rc = number(root, "read_cpu_s_per_gb", 0, true, &r->read_cpu, name, err);
    bool has_cpu = json_object_get(root, "read_cpu_s_per_gb") != NULL;
    json_decref(root);
    if (!rc && !fallback && (!has_cpu || !r->q8_gbps_of_bf16 || !r->q8_gflops_of_bf16))
        rc = k3_errf(err, "%s: needs read_cpu_s_per_gb, q8_0_gbps_of_bf16 and q8_0_gflops_of_bf16",
                     name);
    if (!rc)
        complete(r);
    return rc;
}

int k3_rates_builtin(struct k3_rates *r, struct k3_err *err)
{
    return k3_rates_parse(k3_calibration_json,
                          (size_t)(k3_calibration_json_end - k3_calibration_json),
                          "the built-in calibration (engine/plan/calibration.json)", NULL, r, err);
}

int k3_rates_load(const char *path, struct k3_rates *r, struct k3_err *err)
{
    struct k3_rates builtin;
    if (k3_rates_builtin(&builtin, err))
        return -1;
    char *text;
    size_t len;
    if (k3_read_small_file(path, &text, &len, err))
        return -1;
    int rc = k3_rates_parse(text, len, path, &builtin, r, err);
    free(text);
    return rc;
}
