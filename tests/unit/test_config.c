/* config.json: the presets parse to K3's numbers, and contradictions or configs outside
 * the family are refused with the key named. */
#include <stdlib.h>
#include <string.h>

#include "engine/model/config.h"
#include "engine/model/config_presets.h"
#include "engine/forward/forward.h"
#include "engine/model/tensors.h"
#include "tests/check.h"

static void test_full_k3(void)
{
    struct k3_config c;
    struct k3_err e = {{0}};
    REQUIRE(k3_config_named(&c, "k3", &e) == 0, "%s", e.msg);
    CHECK(c.n_layers == 93 && c.hidden == 7168 && c.n_experts == 896, "sizes");
    CHECK(c.top_k == 16, "routing top-k from num_experts_per_token, not the sampling top_k=50");
    int mla = 0;
    for (int l = 0; l < c.n_layers; l++)
        mla += c.attn[l] == K3_ATTN_MLA;
    CHECK(mla == 24 && c.attn[3] == K3_ATTN_MLA && c.attn[91] == K3_ATTN_MLA &&
              c.attn[92] == K3_ATTN_MLA && c.attn[0] == K3_ATTN_KDA && c.attn[90] == K3_ATTN_KDA,
          "24 MLA layers at 0-based 3, 7, ..., 91, 92");
    CHECK(k3_moe_layer_count(&c) == 92 && !k3_layer_is_moe(&c, 0), "layer 0 dense, 92 MoE");
    CHECK(k3_max_blocks(&c) == 8, "8 stored AttnRes blocks");
    struct k3_record_layout r;
    k3_record_layout_init(&r, &c);
    CHECK(r.bytes == 17547264, "expert record %llu B, want 17,547,264", (unsigned long long)r.bytes);
    CHECK(r.bytes * 16 * 92 == 25829572608ull, "25.83 GB routed per token");
    /* KDA state + conv rings: 434,110,464 + 30,523,392 bytes (k3-model.md §6.3), plus
     * the MLA cache of one position: 24 layers × 576 floats. */
    CHECK(k3_seq_state_bytes(&c, 1) == 434110464ull + 30523392ull + 24ull * 576 * 4,
          "state bytes %llu", (unsigned long long)k3_seq_state_bytes(&c, 1));
    struct k3_tensor_spec *specs;
    int n;
    REQUIRE(k3_trunk_specs(&c, &specs, &n) == 0, "specs");
    int64_t params = 0;
    for (int i = 0; i < n; i++) {
        int64_t p = 1;
        for (int d = 0; d < specs[i].ndim; d++)
            p *= specs[i].shape[d];
        params += p;
    }
    CHECK(n == 2460, "2,460 trunk tensors, got %d", n);
    /* k3-model.md §0: exactly 56,743,648,000 (A_log counted at its shipped length 128). */
    CHECK(params == 56743648000ll, "trunk parameters %lld", (long long)params);
    free(specs);
    k3_config_free(&c);
}

static void test_tiny_schedule(void)
{
    struct k3_config c;
    struct k3_err e = {{0}};
    REQUIRE(k3_config_named(&c, "k3-tiny", &e) == 0, "%s", e.msg);
    char map[32] = {0};
    for (int l = 0; l < c.n_layers; l++)
        map[l] = c.attn[l] == K3_ATTN_MLA ? 'M' : 'K';
    CHECK(!strcmp(map, "KKKMKKKMKKKMM"), "layer map %s", map);
    CHECK(k3_max_blocks(&c) == 5, "boundaries 0,3,6,9,12");
    struct k3_record_layout r;
    k3_record_layout_init(&r, &c);
    CHECK(r.bytes == 19584, "tiny record %llu B", (unsigned long long)r.bytes);
    k3_config_free(&c);
    REQUIRE(k3_config_named(&c, "k3-bench", &e) == 0, "%s", e.msg);
    k3_record_layout_init(&r, &c);
    CHECK(r.bytes == 5013504, "bench record %llu B", (unsigned long long)r.bytes);
    k3_config_free(&c);
}

/* The tiny preset with one substring replaced must fail, naming `needle`. */
static void expect_refused(const char *from, const char *to, const char *needle)
{
    const char *base = k3_config_preset("k3-tiny");
    const char *at = strstr(base, from);
    REQUIRE(at, "preset lacks \"%s\"", from);
    size_t n = strlen(base) - strlen(from) + strlen(to);
    char *text = malloc(n + 1);
    size_t pre = (size_t)(at - base);
    memcpy(text, base, pre);
    strcpy(text + pre, to);
    strcat(text, at + strlen(from));
    struct k3_config c;
    struct k3_err e = {{0}};
    int rc = k3_config_parse(&c, "cfg.json", text, n, &e);
    CHECK(rc == -1, "accepted with %s -> %s", from, to);
    CHECK(strstr(e.msg, "cfg.json") && strstr(e.msg, needle), "message \"%s\" lacks \"%s\"",
          e.msg, needle);
    if (!rc)
        k3_config_free(&c);
    free(text);
}

static void test_refusals(void)
{
    expect_refused("\"kda_layers\": [1, 2, 3,", "\"kda_layers\": [1, 2, 3, 4,", "twice");
    expect_refused("\"kda_layers\": [1, 2, 3,", "\"kda_layers\": [1, 2,", "neither");
    expect_refused("[4, 8, 12, 13]", "[4, 8, 12, 14]", "full_attn_layers");
    expect_refused("\"kimi_linear\"", "\"deepseek_v3\"", "model_type");
    expect_refused("\"kimi_k3\"", "\"llama\"", "model_type");
    expect_refused("\"situ\"", "\"silu\"", "hidden_act");
    expect_refused("\"num_experts_per_token\": 16", "\"num_experts_per_token\": 65",
                   "num_experts_per_token");
    expect_refused("\"hidden_size\": 256", "\"hidden_size\": \"256\"", "hidden_size");
    expect_refused("\"hidden_size\": 256,", "", "hidden_size: missing");
    expect_refused("\"routed_expert_hidden_size\": 128", "\"routed_expert_hidden_size\": 100",
                   "multiples of 32");
    expect_refused("\"mla_use_nope\": true", "\"mla_use_nope\": false", "mla_use_nope");
    expect_refused("\"vocab_size\": 2048", "\"vocab_size\": 2000", "vocab_size");
    expect_refused("{\"architectures\"", "{\"architectures\"\"", "malformed JSON");
}

int main(void)
{
    test_full_k3();
    test_tiny_schedule();
    test_refusals();
    return check_result();
}
