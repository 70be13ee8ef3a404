/* The trunk type (engine/model/trunk_type.h): the names, the rule by role on full K3's
 * specs (every large projection and lm_head Q8_0, the embedding, routers, KDA gates, MLA
 * kv_b and every vector bf16/f32; the trunk's bytes about halved), and the type a tensor
 * table shows, refusing one that mixes types or holds a non-matrix as Q8_0. */
#include <stdlib.h>
#include <string.h>

#include "engine/model/config.h"
#include "engine/model/tensors.h"
#include "engine/model/trunk_type.h"
#include "tests/check.h"

static void test_names(void)
{
    enum k3_trunk_type t = K3_TRUNK_BF16;
    struct k3_err e = {{0}};
    CHECK(!k3_trunk_type_parse("q8_0", &t, &e) && t == K3_TRUNK_Q8_0, "q8_0");
    CHECK(!k3_trunk_type_parse("bf16", &t, &e) && t == K3_TRUNK_BF16, "bf16");
    CHECK(k3_trunk_type_parse("Q8_0", &t, &e) && strstr(e.msg, "--trunk-type Q8_0: not a trunk "
                                                         "type (bf16, q8_0)"), "%s", e.msg);
    CHECK(!strcmp(k3_trunk_type_name(K3_TRUNK_Q8_0), "q8_0"), "name");
}

static void test_rule(void)
{
    struct k3_config c;
    struct k3_err e = {{0}};
    REQUIRE(!k3_config_named(&c, "k3", &e), "%s", e.msg);
    struct k3_tensor_spec *s;
    int n;
    REQUIRE(!k3_trunk_specs(&c, &s, &n), "specs");
    double bf16 = 0, q8 = 0;
    int q8_count = 0;
    for (int i = 0; i < n; i++) {
        int64_t numel = 1;
        for (int d = 0; d < s[i].ndim; d++)
            numel *= s[i].shape[d];
        bool takes = k3_spec_takes_q8_0(&s[i]);
        q8_count += takes;
        enum k3_dtype dt = k3_spec_trunk_dtype(&s[i], K3_TRUNK_Q8_0);
        CHECK((dt == K3_DT_Q8_0) == takes, "%s: dtype %d", s[i].name, dt);
        CHECK(k3_spec_trunk_dtype(&s[i], K3_TRUNK_BF16) == k3_spec_dtype(&s[i]), "%s", s[i].name);
        bf16 += (double)k3_dtype_bytes(k3_spec_dtype(&s[i]), numel);
        q8 += (double)k3_dtype_bytes(dt, numel);
        switch (s[i].slot) {
        case K3_SLOT_LM_HEAD: case K3_SLOT_KDA_Q: case K3_SLOT_KDA_O: case K3_SLOT_MLA_QB:
        case K3_SLOT_DENSE_DOWN: case K3_SLOT_SHARED_UP: case K3_SLOT_LATENT_UP:
            CHECK(takes, "%s stays bf16", s[i].name);
            break;
        case K3_SLOT_EMBED: case K3_SLOT_ROUTER: case K3_SLOT_KDA_FA: case K3_SLOT_KDA_FB:
        case K3_SLOT_KDA_B: case K3_SLOT_MLA_KVB: case K3_SLOT_FINAL_NORM:
        case K3_SLOT_ROUTER_BIAS: case K3_SLOT_KDA_ALOG:
            CHECK(!takes, "%s is Q8_0", s[i].name);
            break;
        default:
            break;
        }
    }
    /* 69 KDA x 5 + 24 MLA x 5 + dense 3 + 92 MoE x 5 + lm_head */
    CHECK(q8_count == 69 * 5 + 24 * 5 + 3 + 92 * 5 + 1, "%d matrices Q8_0", q8_count);
    CHECK(q8 < 0.56 * bf16 && q8 > 0.5 * bf16, "trunk %.1f GB as q8_0, %.1f as bf16", q8 / 1e9,
          bf16 / 1e9);

    enum k3_dtype *dt = malloc(sizeof *dt * (size_t)n);
    enum k3_trunk_type t;
    for (int i = 0; i < n; i++)
        dt[i] = k3_spec_trunk_dtype(&s[i], K3_TRUNK_Q8_0);
    CHECK(!k3_trunk_type_of(s, dt, n, &t, "m", &e) && t == K3_TRUNK_Q8_0, "q8_0 table: %s", e.msg);
    for (int i = 0; i < n; i++)
        dt[i] = k3_spec_dtype(&s[i]);
    CHECK(!k3_trunk_type_of(s, dt, n, &t, "m", &e) && t == K3_TRUNK_BF16, "bf16 table: %s", e.msg);
    int last = -1, embed = -1;
    for (int i = 0; i < n; i++) {
        last = k3_spec_takes_q8_0(&s[i]) ? i : last;
        embed = s[i].slot == K3_SLOT_EMBED ? i : embed;
    }
    dt[last] = K3_DT_Q8_0;
    CHECK(k3_trunk_type_of(s, dt, n, &t, "m", &e) && strstr(e.msg, "mixes two"), "mixed: %s", e.msg);
    dt[last] = K3_DT_BF16;
    dt[embed] = K3_DT_Q8_0;
    CHECK(k3_trunk_type_of(s, dt, n, &t, "m", &e) && strstr(e.msg, "embed_tokens.weight is Q8_0"),
          "the embedding as Q8_0: %s", e.msg);
    free(dt);
    free(s);
    k3_config_free(&c);
}

int main(void)
{
    test_names();
    test_rule();
    return check_result();
}
