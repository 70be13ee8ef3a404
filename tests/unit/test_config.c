/* config.json: the presets parse to K3's numbers (k3-slice to every width of K3), and
 * contradictions or configs outside the family are refused with the key named. */
#include <stdlib.h>
#include <string.h>

#include "engine/model/config.h"
#include "engine/model/config_presets.h"
#include "engine/model/quant_config.h"
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

/* The specs of layer l (`layers.{l}.` stripped from their names), in table order. */
static int layer_specs(const struct k3_tensor_spec *all, int n, int l, const struct k3_tensor_spec **out)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (all[i].layer == l)
            out[k++] = &all[i];
    return k;
}

static const char *below_layer(const char *name)
{
    const char *at = strstr(name, "layers.");
    at = at ? strchr(at + strlen("layers."), '.') : NULL;
    return at ? at + 1 : name;
}

/* Layer ls of the slice has the tensors of K3's layer lk, shape for shape, but for the
 * router's width (num_experts rows instead of 896). */
static void check_layer_as_k3(const struct k3_tensor_spec *slice, int ns, int ls,
                              const struct k3_tensor_spec *k3, int nk, int lk, int experts)
{
    const struct k3_tensor_spec *a[64], *b[64];
    int na = layer_specs(slice, ns, ls, a), nb = layer_specs(k3, nk, lk, b);
    REQUIRE(na == nb && na > 0 && na <= 64, "slice layer %d has %d tensors, K3 layer %d has %d", ls, na,
            lk, nb);
    for (int i = 0; i < na; i++) {
        CHECK(!strcmp(below_layer(a[i]->name), below_layer(b[i]->name)) && a[i]->ndim == b[i]->ndim,
              "slice layer %d: %s against K3's %s", ls, a[i]->name, b[i]->name);
        bool router = a[i]->slot == K3_SLOT_ROUTER || a[i]->slot == K3_SLOT_ROUTER_BIAS;
        for (int d = 0; d < a[i]->ndim; d++) {
            int64_t want = router && d == 0 ? experts : b[i]->shape[d];
            CHECK(a[i]->shape[d] == want, "%s dim %d: %lld, want %lld", a[i]->name, d,
                  (long long)a[i]->shape[d], (long long)want);
        }
    }
}

/* k3-slice: K3's every width in four layers (KKKM, dense layer 0, a block boundary
 * inside) and 64 experts; the sizes its preset comment and the README state. */
static void test_slice_is_k3_wide(void)
{
    struct k3_config k, s;
    struct k3_err e = {{0}};
    REQUIRE(k3_config_named(&k, "k3", &e) == 0, "%s", e.msg);
    REQUIRE(k3_config_named(&s, "k3-slice", &e) == 0, "%s", e.msg);
    CHECK(s.vocab == k.vocab && s.hidden == k.hidden && s.dense_inter == k.dense_inter &&
              s.mla_heads == k.mla_heads && s.q_lora == k.q_lora && s.kv_lora == k.kv_lora &&
              s.qk_nope == k.qk_nope && s.qk_rope == k.qk_rope && s.v_head == k.v_head &&
              s.kda_heads == k.kda_heads && s.kda_head_dim == k.kda_head_dim &&
              s.conv_kernel == k.conv_kernel && s.top_k == k.top_k && s.n_shared == k.n_shared &&
              s.moe_inter == k.moe_inter && s.latent == k.latent && s.n_group == k.n_group &&
              s.first_dense == k.first_dense && s.moe_freq == k.moe_freq,
          "a width differs from K3's");
    CHECK(k3_kda_width(&s) == 12288 && k3_mla_out_width(&s) == 12288 &&
              k3_shared_inter(&s) == 6144,
          "KDA %d, MLA out %d, shared %d", k3_kda_width(&s), k3_mla_out_width(&s),
          k3_shared_inter(&s));
    struct k3_record_layout rs, rk;
    k3_record_layout_init(&rs, &s);
    k3_record_layout_init(&rk, &k);
    CHECK(rs.bytes == 17547264 && !memcmp(&rs, &rk, sizeof rs), "record %llu B",
          (unsigned long long)rs.bytes);

    char map[8] = {0};
    for (int l = 0; l < s.n_layers && l < 7; l++)
        map[l] = s.attn[l] == K3_ATTN_MLA ? 'M' : 'K';
    CHECK(!strcmp(map, "KKKM"), "layer map %s", map);
    CHECK(s.attn_res_block < s.n_layers && k3_max_blocks(&s) == 2, "a block boundary inside");
    CHECK(k3_moe_layer_count(&s) == 3 && s.n_experts == 64, "3 MoE layers of 64 experts");

    struct k3_tensor_spec *ss, *ks;
    int ns, nk;
    REQUIRE(k3_trunk_specs(&s, &ss, &ns) == 0 && k3_trunk_specs(&k, &ks, &nk) == 0, "specs");
    check_layer_as_k3(ss, ns, -1, ks, nk, -1, s.n_experts); /* embed, lm_head, output mix */
    check_layer_as_k3(ss, ns, 0, ks, nk, 0, s.n_experts);   /* KDA + dense */
    check_layer_as_k3(ss, ns, 1, ks, nk, 1, s.n_experts);   /* KDA + MoE */
    check_layer_as_k3(ss, ns, 2, ks, nk, 2, s.n_experts);
    check_layer_as_k3(ss, ns, 3, ks, nk, 3, s.n_experts);   /* MLA + MoE */

    uint64_t trunk = 0;
    for (int i = 0; i < ns; i++) {
        uint64_t b = (uint64_t)k3_dtype_size(k3_spec_dtype(&ss[i]));
        for (int d = 0; d < ss[i].ndim; d++)
            b *= (uint64_t)ss[i].shape[d];
        trunk += b;
    }
    CHECK(trunk == 10382908160ull, "trunk %llu B as shipped", (unsigned long long)trunk);
    CHECK(rs.bytes * 64 * 3 == 3369074688ull && rs.bytes * 16 * 3 == 842268672ull,
          "records on disk, routed bytes per token");
    /* Per layer the state is K3's: 3 of its 69 KDA layers, 1 of its 24 MLA layers. */
    CHECK(k3_seq_state_bytes(&s, 1) == (434110464ull + 30523392ull) / 69 * 3 + 576 * 4,
          "state bytes %llu", (unsigned long long)k3_seq_state_bytes(&s, 1));
    free(ss);
    free(ks);
    k3_config_free(&s);
    k3_config_free(&k);
}

/* The tiny preset with one substring replaced (NULL when absent); *n: its length. */
static char *tiny_with(const char *from, const char *to, size_t *n)
{
    const char *base = k3_config_preset("k3-tiny");
    const char *at = strstr(base, from);
    if (!at)
        return NULL;
    *n = strlen(base) - strlen(from) + strlen(to);
    char *text = malloc(*n + 1);
    size_t pre = (size_t)(at - base);
    memcpy(text, base, pre);
    strcpy(text + pre, to);
    strcat(text, at + strlen(from));
    return text;
}

/* The tiny preset with one substring replaced must fail, naming `needle`. */
static void expect_refused(const char *from, const char *to, const char *needle)
{
    size_t n;
    char *text = tiny_with(from, to, &n);
    REQUIRE(text, "preset lacks \"%s\"", from);
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

/* The tiny preset with one substring replaced parses; c is the result. */
static void expect_parsed(const char *from, const char *to, struct k3_config *c)
{
    size_t n;
    char *text = tiny_with(from, to, &n);
    REQUIRE(text, "preset lacks \"%s\"", from);
    struct k3_err e = {{0}};
    REQUIRE(k3_config_parse(c, "cfg.json", text, n, &e) == 0, "%s -> %s: %s", from, to, e.msg);
    free(text);
}

/* use_grouped_topk is not read (Moonshot's gate groups whenever num_expert_group > 1 and
 * > topk_group); the groups still must divide the experts and supply top_k of them. */
static void test_grouping_keys(void)
{
    struct k3_config c;
    expect_parsed("\"use_grouped_topk\": true, \"num_expert_group\": 1, \"topk_group\": 1",
                  "\"use_grouped_topk\": false, \"num_expert_group\": 8, \"topk_group\": 2", &c);
    CHECK(c.n_group == 8 && c.topk_group == 2 && k3_route_grouped(&c) &&
              k3_route_choosable(&c) == 16,
          "use_grouped_topk false: %d groups, %d kept, %d choosable", c.n_group, c.topk_group,
          k3_route_choosable(&c));
    k3_config_free(&c);
    expect_parsed("\"use_grouped_topk\": true, ", "", &c);
    CHECK(c.n_group == 1, "use_grouped_topk absent: parsed");
    k3_config_free(&c);
    expect_parsed("\"num_expert_group\": 1, \"topk_group\": 1",
                  "\"num_expert_group\": 4, \"topk_group\": 4", &c);
    CHECK(!k3_route_grouped(&c) && k3_route_choosable(&c) == 64, "every group kept: not grouped");
    k3_config_free(&c);
    expect_refused("\"num_expert_group\": 1, \"topk_group\": 1",
                   "\"num_expert_group\": 8, \"topk_group\": 1", "cannot supply 16 experts");
    expect_refused("\"num_expert_group\": 1", "\"num_expert_group\": 7", "do not divide 64");
}

/* quantization_config (quant_config.h): the presets carry K3's; a config without one is
 * read; one that describes other bytes than K3's MXFP4 is refused, the value named, in
 * text_config or at the root. */
static void test_quantization_config(void)
{
    const char *tiny = k3_config_preset("k3-tiny");
    CHECK(strstr(tiny, "\"quantization_config\": " K3_QUANT_CONFIG_JSON), "k3-tiny carries it");
    CHECK(strstr(k3_config_preset("k3"), "\"quantization_config\": " K3_QUANT_CONFIG_JSON),
          "k3 carries it");
    struct k3_config c;
    expect_parsed("\"quantization_config\": " K3_QUANT_CONFIG_JSON ", ", "", &c);
    CHECK(c.n_experts == 64, "no quantization_config: read");
    k3_config_free(&c);
    expect_parsed("\"quantization_status\": \"compressed\"", "\"quantization_status\": null", &c);
    k3_config_free(&c);
    const char *q = "text_config.quantization_config.";
    char needle[160];
    snprintf(needle, sizeof needle, "%sformat: \"nvfp4-pack-quantized\", expected", q);
    expect_refused("\"format\": \"mxfp4-pack-quantized\", \"global",
                   "\"format\": \"nvfp4-pack-quantized\", \"global", needle);
    expect_refused("\"quant_method\": \"compressed-tensors\"", "\"quant_method\": \"mxfp4\"",
                   "quant_method: \"mxfp4\", expected \"compressed-tensors\"");
    expect_refused("\"quantization_status\": \"compressed\"",
                   "\"quantization_status\": \"frozen\"", "quantization_status: \"frozen\"");
    expect_refused("\"num_bits\": 4", "\"num_bits\": 8",
                   "config_groups.group_0.weights.num_bits: 8, expected 4");
    expect_refused("\"group_size\": 32", "\"group_size\": 16",
                   "config_groups.group_0.weights.group_size: 16, expected 32");
    expect_refused("\"type\": \"float\"", "\"type\": \"int\"",
                   "weights.type: \"int\", expected \"float\"");
    expect_refused("\"strategy\": \"group\"", "\"strategy\": \"tensor_group\"",
                   "weights.strategy: \"tensor_group\"");
    expect_refused("\"scale_dtype\": \"torch.uint8\"", "\"scale_dtype\": \"torch.float8_e4m3fn\"",
                   "weights.scale_dtype: \"torch.float8_e4m3fn\"");
    expect_refused("{\"group_0\": {\"format\": \"mxfp4-pack-quantized\"",
                   "{\"group_0\": {\"format\": \"int-quantized\"",
                   "config_groups.group_0.format: \"int-quantized\"");
    expect_refused("\"weights\": {\"actorder\"", "\"w\": {\"actorder\"",
                   "config_groups.group_0.weights: missing");
    expect_refused("\"media_placeholder_token_id\": 2037,",
                   "\"media_placeholder_token_id\": 2037, \"quantization_config\": "
                   "{\"quant_method\": \"compressed-tensors\", \"format\": \"int-quantized\"},",
                   "cfg.json: quantization_config.format: \"int-quantized\"");
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
    test_slice_is_k3_wide();
    test_refusals();
    test_grouping_keys();
    test_quantization_config();
    return check_result();
}
