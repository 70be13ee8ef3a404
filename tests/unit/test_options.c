/* The option table parser (engine/base/options.h): every kind takes its values; range,
 * syntax and name errors are one line naming the flag and the value (enum and set errors
 * list the allowed names); unknown flags, bare arguments and missing values are errors;
 * --help lists every flag and its default exactly once; the value listing shows what
 * was parsed; token id lists parse with spaces and fail where they go wrong. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/options.h"
#include "tests/check.h"

enum mode { MODE_FAST, MODE_SLOW, MODE_OFF };

static const struct k3_opt_choice mode_choices[] = {
    {"fast", MODE_FAST}, {"slow", MODE_SLOW}, {"off", MODE_OFF}, {NULL, 0}};
static const struct k3_opt_choice ram_choices[] = {
    {"floor", UINT64_MAX}, {"trunk", 0}, {NULL, 0}};
static const struct k3_opt_choice color_choices[] = {
    {"all", 7}, {"red", 1}, {"green", 2}, {"blue", 4}, {NULL, 0}};

static struct values {
    const char *name, *file;
    int count;
    uint64_t seed, ram;
    float rate;
    bool verbose;
    int mode, on;
    unsigned colors;
    struct k3_opt_ints threads;
} v;

static const struct k3_opt opts[] = {
    {.name = "name", .short_name = 'N', .type = K3_OPT_STRING, .dst = &v.name, .arg = "TEXT",
     .help = "a name"},
    {.name = "count", .short_name = 'c', .type = K3_OPT_INT, .dst = &v.count, .arg = "N",
     .help = "how many", .min = 1, .max = 10},
    {.name = "seed", .type = K3_OPT_U64, .dst = &v.seed, .arg = "N", .help = "a seed"},
    {.name = "rate", .type = K3_OPT_FLOAT, .dst = &v.rate, .arg = "R", .help = "a rate",
     .min = 0, .max = 2},
    {.name = "verbose", .short_name = 'v', .type = K3_OPT_FLAG, .dst = &v.verbose,
     .help = "say more"},
    {.name = "ram", .type = K3_OPT_SIZE, .dst = &v.ram, .choices = ram_choices, .min = 65536,
     .help = "a budget"},
    {.name = "mode", .type = K3_OPT_ENUM, .dst = &v.mode, .choices = mode_choices,
     .help = "how to go"},
    {.name = "predict", .type = K3_OPT_ENUM, .dst = &v.on, .choices = k3_opt_on_off,
     .help = "a switch"},
    {.name = "colors", .type = K3_OPT_SET, .dst = &v.colors, .choices = color_choices,
     .help = "some colors"},
    {.name = "threads", .type = K3_OPT_INTS, .dst = &v.threads, .arg = "N,..",
     .help = "thread counts", .min = 1, .max = 64},
    {.name = "FILE", .type = K3_OPT_STRING, .dst = &v.file, .positional = true,
     .help = "a file"},
};
#define N_OPTS K3_OPTS_COUNT(opts)

static void reset(void)
{
    v = (struct values){.count = 3, .seed = 7, .ram = 0, .rate = 0.5f, .mode = MODE_SLOW,
                        .on = 1, .colors = 7, .threads = {2, {1, 2}}};
}

/* Parses the words of line (split at spaces) after a program name: k3_opts_parse's rc. */
static int parse(const char *line, struct k3_err *err)
{
    static char buf[512];
    char *argv[32] = {"prog"};
    int argc = 1;
    reset();
    snprintf(buf, sizeof buf, "%s", line);
    for (char *w = strtok(buf, " "); w && argc < 32; w = strtok(NULL, " "))
        argv[argc++] = w;
    err->msg[0] = 0;
    return k3_opts_parse(opts, N_OPTS, argc, argv, err);
}

static void accepts(void)
{
    struct k3_err e;
    REQUIRE(parse("--name x -c 4 --seed 18446744073709551615 --rate=1.5 -v --mode off "
                  "--predict off --colors blue,red --threads 4,8,16 data.bin", &e) == 0,
            "%s", e.msg);
    CHECK(!strcmp(v.name, "x"), "name %s", v.name);
    CHECK(v.count == 4, "count %d", v.count);
    CHECK(v.seed == UINT64_MAX, "seed %llu", (unsigned long long)v.seed);
    CHECK(v.rate == 1.5f, "rate %g", v.rate);
    CHECK(v.verbose, "-v");
    CHECK(v.mode == MODE_OFF, "mode %d", v.mode);
    CHECK(v.on == 0, "predict %d", v.on);
    CHECK(v.colors == 5, "colors %u", v.colors);
    CHECK(v.threads.n == 3 && v.threads.v[0] == 4 && v.threads.v[2] == 16, "threads n %d",
          v.threads.n);
    CHECK(v.file && !strcmp(v.file, "data.bin"), "FILE %s", v.file ? v.file : "(null)");

    /* Sizes: suffixes are powers of 1024; a name stands for its value. */
    REQUIRE(parse("--ram 1.5G", &e) == 0, "%s", e.msg);
    CHECK(v.ram == 1536ull << 20, "1.5G is %llu", (unsigned long long)v.ram);
    REQUIRE(parse("--ram 64KiB", &e) == 0, "%s", e.msg);
    CHECK(v.ram == 65536, "64KiB is %llu", (unsigned long long)v.ram);
    REQUIRE(parse("--ram floor", &e) == 0, "%s", e.msg);
    CHECK(v.ram == UINT64_MAX, "floor is %llu", (unsigned long long)v.ram);
    REQUIRE(parse("--colors all", &e) == 0, "%s", e.msg);
    CHECK(v.colors == 7, "all is %u", v.colors);

    /* Nothing given: the defaults stay. */
    REQUIRE(parse("", &e) == 0, "%s", e.msg);
    CHECK(v.count == 3 && v.mode == MODE_SLOW && !v.name && !v.file, "defaults changed");
}

/* line fails (rc -1) with a one-line message that contains want. */
static void fails(const char *line, const char *want)
{
    struct k3_err e;
    int rc = parse(line, &e);
    CHECK(rc == -1, "\"%s\" gave rc %d", line, rc);
    CHECK(strstr(e.msg, want), "\"%s\": message \"%s\" lacks \"%s\"", line, e.msg, want);
    CHECK(!strchr(e.msg, '\n'), "\"%s\": message of several lines: %s", line, e.msg);
}

static void errors(void)
{
    /* range errors name the flag (as written) and the value */
    fails("--count 11", "--count: 11 is outside [1, 10]");
    fails("-c 0", "-c: 0 is outside [1, 10]");
    fails("--rate 3", "--rate: 3 is outside [0, 2]");
    fails("--threads 1,65", "--threads: 65 is outside [1, 64]");
    fails("--ram 1K", "--ram: \"1K\" is below 64K");
    /* syntax errors */
    fails("--count x", "--count: \"x\" is not an integer");
    fails("--count 99999999999", "--count: \"99999999999\" is not an integer");
    fails("--seed -1", "--seed: \"-1\" is not a non-negative integer");
    fails("--rate 1e999", "--rate: \"1e999\" is not a number");
    fails("--rate nan", "--rate: \"nan\" is not a number");
    fails("--threads 1,,2", "--threads: \"1,,2\" is not a comma-separated list of integers");
    fails("--threads 1,2,3,4,5,6,7,8,9", "--threads: \"1,2,3,4,5,6,7,8,9\" has more than 8 values");
    fails("--ram lots", "--ram: \"lots\" is not a size (e.g. 512M, 8G), floor or trunk");
    /* enum and set errors list the allowed names */
    fails("--mode medium", "--mode: \"medium\" is not fast, slow or off");
    fails("--predict maybe", "--predict: \"maybe\" is not on or off");
    fails("--colors red,pink", "--colors: \"pink\" is not all, red, green or blue");
    /* unknown flags and arguments, missing values, values given to flags */
    fails("--bogus", "--bogus: unknown option");
    fails("-x", "-x: unknown option");
    fails("a.bin b.bin", "b.bin: unknown argument");
    fails("--count", "--count: needs a value (N)");
    fails("--mode", "--mode: needs a value (fast|slow|off)");
    fails("--colors", "--colors: needs a value (all,red,green,blue)");
    fails("--ram", "--ram: needs a value (SIZE|floor|trunk)");
    fails("--verbose=1", "--verbose=1: takes no value");

    struct k3_err e;
    CHECK(parse("--count 4 --help --bogus", &e) == 1, "--help is not rc 1");
    CHECK(parse("-h", &e) == 1, "-h is not rc 1");
}

static char *help_text(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    reset();
    k3_opts_help(f, "usage: prog [options]", opts, N_OPTS);
    fclose(f);
    return text;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* Every flag once, every default once, a default at most once a line. */
static void help(void)
{
    char *text = help_text();
    const char *flags[] = {"-N, --name TEXT", "-c, --count N", "--seed N", "--rate R",
                           "-v, --verbose", "--ram SIZE|floor|trunk", "--mode fast|slow|off",
                           "--predict on|off", "--colors all,red,green,blue", "--threads N,..",
                           "  FILE ", "-h, --help"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        CHECK(count(text, flags[i]) == 1, "help lists \"%s\" %d times:\n%s", flags[i],
              count(text, flags[i]), text);
    const char *defaults[] = {"(default 3)", "(default 7)", "(default 0.5)", "(default trunk)",
                              "(default slow)", "(default on)", "(default all)", "(default 1,2)"};
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
        CHECK(count(text, defaults[i]) == 1, "help shows \"%s\" %d times:\n%s", defaults[i],
              count(text, defaults[i]), text);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        CHECK(count(line, "default") <= 1, "a default twice: %s", line);
        CHECK(!strstr(line, "--name") || !strstr(line, "default"), "an unset string: %s", line);
    }
    free(text);

    /* .def stands in for a value that does not say the default */
    struct k3_opt worded = {.name = "vocab", .type = K3_OPT_INT, .dst = &v.count, .arg = "N",
                            .help = "ids below N", .min = 1, .max = 10, .def = "from config.json"};
    char *t = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&t, &len);
    k3_opts_help(f, "usage", &worded, 1);
    fclose(f);
    CHECK(strstr(t, "ids below N (default from config.json)") && count(t, "default") == 1,
          "worded default: %s", t);
    free(t);
}

/* The listing of values after a parse: what a benchmark ran with. */
static void listing(void)
{
    struct k3_err e;
    REQUIRE(parse("--mode fast --colors green --threads 3 --ram 8G", &e) == 0, "%s", e.msg);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    k3_opts_print_values(f, opts, N_OPTS);
    fclose(f);
    const char *want[] = {"  --mode       fast\n", "  --colors     green\n", "  --threads    3\n",
                          "  --ram        8G\n", "  --name       \n", "  --count      3\n"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(strstr(text, want[i]), "listing lacks \"%s\":\n%s", want[i], text);
    free(text);
}

static void id_lists(void)
{
    struct k3_err e = {{0}};
    int32_t *ids = NULL;
    int n = 0;
    REQUIRE(k3_parse_id_list("--ids", " 5, 17 ,300\n", &ids, &n, &e) == 0, "%s", e.msg);
    CHECK(n == 3 && ids[0] == 5 && ids[1] == 17 && ids[2] == 300, "got %d ids", n);
    free(ids);
    REQUIRE(k3_parse_id_list("--ids", "", &ids, &n, &e) == 0, "%s", e.msg);
    CHECK(n == 0 && !ids, "empty list gave %d ids", n);
    const char *bad[][2] = {{"5,x,7", "--ids: \"5,x,7\" is not a comma-separated list of token ids (bad id at \"x,7\")"},
                            {"1 2", "(expected ',' at \"2\")"},
                            {"1,-2", "bad id at \"-2\""},
                            {"3000000000", "bad id at \"3000000000\""},
                            {"1,", "bad id at \"\""}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(k3_parse_id_list("--ids", bad[i][0], &ids, &n, &e) == -1, "\"%s\" parsed", bad[i][0]);
        CHECK(strstr(e.msg, bad[i][1]), "\"%s\": \"%s\" lacks \"%s\"", bad[i][0], e.msg, bad[i][1]);
    }
}

int main(void)
{
    accepts();
    errors();
    help();
    listing();
    id_lists();
    return check_result();
}
