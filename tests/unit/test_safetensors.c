/* safetensors header and index parsing: what is accepted, and that every malformed
 * case is an error naming the file and the tensor. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/model/safetensors.h"
#include "tests/check.h"

static int parse(const char *json, uint64_t data_size, struct k3_st_header *h, struct k3_err *e)
{
    return k3_st_parse(h, "shard.safetensors", json, strlen(json), data_size, e);
}

static void expect_error(const char *json, uint64_t data_size, const char *needle)
{
    struct k3_st_header h;
    struct k3_err e = {{0}};
    int rc = parse(json, data_size, &h, &e);
    CHECK(rc == -1, "accepted: %s", json);
    CHECK(strstr(e.msg, "shard.safetensors") && strstr(e.msg, needle),
          "message \"%s\" should name the file and \"%s\"", e.msg, needle);
}

static void test_valid(void)
{
    const char *json = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"b\":{\"dtype\":\"U8\",\"shape\":[4,2],\"data_offsets\":[16,24]},"
                       "\"a\":{\"dtype\":\"BF16\",\"shape\":[2,4],\"data_offsets\":[0,16]}}";
    struct k3_st_header h;
    struct k3_err e = {{0}};
    REQUIRE(parse(json, 24, &h, &e) == 0, "%s", e.msg);
    CHECK(h.n_tensors == 2, "two tensors, metadata skipped: %d", h.n_tensors);
    CHECK(!strcmp(h.tensors[0].name, "a") && h.tensors[0].offset == 0, "sorted by offset");
    CHECK(h.tensors[0].dtype == K3_DT_BF16 && h.tensors[0].ndim == 2 && h.tensors[0].shape[1] == 4,
          "dtype and shape");
    CHECK(h.tensors[1].nbytes == 8, "U8 [4,2] is 8 bytes");
    k3_st_header_free(&h);
}

static void test_malformed(void)
{
    expect_error("{\"a\":", 0, "malformed JSON");
    expect_error("[1,2]", 0, "object");
    expect_error("{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, "Q4");
    expect_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0]}}", 2, "tensor a");
    expect_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[-2],\"data_offsets\":[0,2]}}", 2, "shape");
    /* span disagrees with dtype × shape */
    expect_error("{\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,4]}}", 4, "needs 6");
    /* a hole, then an overlap */
    expect_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}", 4, "hole");
    expect_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                 "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}",
                 4, "overlap");
    /* the file is shorter than the tensors need: a truncated shard */
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 10,
                 "truncated");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 9, "after");
    expect_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                 "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                 2, "malformed JSON"); /* duplicate names */
}

static void test_write_read_round_trip(void)
{
    char path[] = "/tmp/k3-st-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0, "mkstemp");
    FILE *f = fdopen(fd, "wb+");
    struct k3_st_tensor t[2] = {
        {.name = "x", .dtype = K3_DT_F32, .ndim = 1, .shape = {3}, .nbytes = 12},
        {.name = "y", .dtype = K3_DT_U8, .ndim = 2, .shape = {2, 5}, .nbytes = 10},
    };
    struct k3_err e = {{0}};
    REQUIRE(k3_st_write_header(f, t, 2, path, &e) == 0, "%s", e.msg);
    long header_end = ftell(f);
    CHECK(header_end % 8 == 0, "data starts 8-byte aligned (at %ld)", header_end);
    static const char data[22] = {0};
    fwrite(data, 1, sizeof data, f);
    fflush(f);
    struct k3_st_header h;
    REQUIRE(k3_st_read_header(&h, path, fd, (uint64_t)ftell(f), &e) == 0, "%s", e.msg);
    CHECK(h.n_tensors == 2 && h.data_start == (uint64_t)header_end, "round trip");
    CHECK(h.tensors[1].offset == (uint64_t)header_end + 12, "absolute offset of y");
    k3_st_header_free(&h);
    /* A header length pointing past the end of the file. */
    CHECK(ftruncate(fd, 20) == 0, "truncate");
    CHECK(k3_st_read_header(&h, path, fd, 20, &e) == -1 && strstr(e.msg, path), "%s", e.msg);
    fclose(f);
    unlink(path);
}

static void test_index(void)
{
    struct k3_st_index_entry *entries;
    int n;
    struct k3_err e = {{0}};
    const char *ok = "{\"metadata\":{},\"weight_map\":{\"b\":\"s2\",\"a\":\"s1\"}}";
    REQUIRE(k3_st_parse_index("idx.json", ok, strlen(ok), &entries, &n, &e) == 0, "%s", e.msg);
    CHECK(n == 2 && !strcmp(entries[0].name, "a") && !strcmp(entries[0].shard, "s1"), "sorted");
    k3_st_index_free(entries, n);
    const char *bad[] = {"{\"weight_map\":[]}", "{\"weight_map\":{\"a\":\"../x\"}}",
                         "{\"weight_map\":{\"a\":3}}", "{"};
    for (int i = 0; i < 4; i++) {
        CHECK(k3_st_parse_index("idx.json", bad[i], strlen(bad[i]), &entries, &n, &e) == -1,
              "accepted %s", bad[i]);
        CHECK(strstr(e.msg, "idx.json") != NULL, "names the file: %s", e.msg);
    }
}

int main(void)
{
    test_valid();
    test_malformed();
    test_write_read_round_trip();
    test_index();
    return check_result();
}
