/* The planner's calibration (engine/plan/rates.h): the built-in rates are the checked-in
 * engine/plan/calibration.json's; a file's missing keys are completed (many-row rates
 * from one-row ones, Q8_0's from bf16's by the measured fractions, the read path's CPU
 * and the fractions from the built-in); bad values are refused naming the file and key. */
#include <string.h>

#include "engine/plan/rates.h"
#include "tests/check.h"
#include "tests/util.h"

static int parse(const char *json, const struct k3_rates *fallback, struct k3_rates *r,
                 struct k3_err *err)
{
    return k3_rates_parse(json, strlen(json), "cal.json", fallback, r, err);
}

static void test_builtin_is_the_file(void)
{
    struct k3_err err = {{0}};
    struct k3_rates built, file;
    REQUIRE(!k3_rates_builtin(&built, &err), "%s", err.msg);
    char path[4096];
    snprintf(path, sizeof path, "%s/engine/plan/calibration.json", test_root());
    REQUIRE(!k3_rates_load(path, &file, &err), "%s", err.msg);
    CHECK(!memcmp(&built, &file, sizeof built), "the embedded calibration is not %s", path);
    CHECK(built.mxfp4_core > 0 && built.bf16_core > 0 && built.read_cpu > 0 &&
              built.q8_gbps_of_bf16 > 0 && built.q8_gflops_of_bf16 > 0,
          "built-in: %g %g %g %g %g", built.mxfp4_core, built.bf16_core, built.read_cpu,
          built.q8_gbps_of_bf16, built.q8_gflops_of_bf16);
}

static void test_completed(void)
{
    struct k3_err err = {{0}};
    struct k3_rates built, r;
    REQUIRE(!k3_rates_builtin(&built, &err), "%s", err.msg);
    REQUIRE(!parse("{\"mxfp4_gbps_per_core\": 17, \"bf16_gbps_per_core\": 10, \"note\": \"x\"}",
                   &built, &r, &err), "%s", err.msg);
    CHECK(r.mxfp4_core == 17 && r.bf16_core == 10, "one-row rates %g %g", r.mxfp4_core, r.bf16_core);
    /* 2 flops a weight, 17 bytes per 32 MXFP4 weights; bf16 flops at its bytes' rate */
    CHECK(r.mxfp4_gflops == 17.0 * 2 * 32 / 17 && r.bf16_gflops == 10, "many-row %g %g",
          r.mxfp4_gflops, r.bf16_gflops);
    CHECK(r.read_cpu == built.read_cpu, "read CPU %g, not the built-in %g", r.read_cpu, built.read_cpu);
    CHECK(r.q8_core == 10 * built.q8_gbps_of_bf16 && r.q8_gflops == 10 * built.q8_gflops_of_bf16,
          "Q8_0 %g %g from bf16's 10", r.q8_core, r.q8_gflops);

    REQUIRE(!parse("{\"mxfp4_gbps_per_core\": 1, \"bf16_gbps_per_core\": 2, \"read_cpu_s_per_gb\": 0,"
                   " \"q8_0_gbps_per_core\": 3, \"bf16_gflops_per_core\": 40,"
                   " \"q8_0_gflops_of_bf16\": 0.5}", &built, &r, &err), "%s", err.msg);
    CHECK(r.read_cpu == 0 && r.q8_core == 3 && r.bf16_gflops == 40 && r.q8_gflops == 20,
          "given keys: read CPU %g, Q8_0 %g GB/s, %g GFLOP/s", r.read_cpu, r.q8_core, r.q8_gflops);
}

static void test_refused(void)
{
    static const struct {
        const char *json, *want;
    } bad[] = {
        {"{\"mxfp4_gbps_per_core\": 5}", "cal.json: needs positive mxfp4_gbps_per_core"},
        {"{\"mxfp4_gbps_per_core\": 5, \"bf16_gbps_per_core\": 0}", "needs positive"},
        {"{\"mxfp4_gbps_per_core\": 5, \"bf16_gbps_per_core\": 1, \"read_cpu_s_per_gb\": -1}",
         "cal.json: read_cpu_s_per_gb must be a number >= 0"},
        {"{\"mxfp4_gbps_per_core\": 5, \"bf16_gbps_per_core\": 1, \"q8_0_gbps_of_bf16\": \"a\"}",
         "cal.json: q8_0_gbps_of_bf16 must be a positive number"},
        {"{\"mxfp4_gbps_per_core\": 5, \"bf16_gbps_per_core\": 1, \"mxfp4_gflops_per_core\": 0}",
         "mxfp4_gflops_per_core must be a positive number"},
        {"[1, 2", "cal.json: "},
    };
    struct k3_rates built, r;
    struct k3_err err = {{0}};
    REQUIRE(!k3_rates_builtin(&built, &err), "%s", err.msg);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err.msg[0] = 0;
        CHECK(parse(bad[i].json, &built, &r, &err) == -1 && strstr(err.msg, bad[i].want),
              "%s: \"%s\", want \"%s\"", bad[i].json, err.msg, bad[i].want);
    }
    /* without a fallback (the built-in's own file) every key the others borrow is needed */
    CHECK(parse("{\"mxfp4_gbps_per_core\": 5, \"bf16_gbps_per_core\": 1}", NULL, &r, &err) == -1 &&
              strstr(err.msg, "needs read_cpu_s_per_gb"), "no fallback: \"%s\"", err.msg);
    CHECK(k3_rates_load("/nonexistent/cal.json", &r, &err) == -1 &&
              strstr(err.msg, "/nonexistent/cal.json"), "missing file: \"%s\"", err.msg);
}

int main(void)
{
    test_builtin_is_the_file();
    test_completed();
    test_refused();
    return check_result();
}
