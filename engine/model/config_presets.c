/* The named model configurations of k3-model.md §6, as shipped-style config.json text.
 * `k3` is the released model; `k3-tiny` is the correctness model; `k3-bench` has real
 * I/O widths (896 experts, 5 MB records) for benchmarks; `k3-slice` has every width of K3
 * in a few layers, for per-layer times at K3's widths and the reference at them;
 * `k3-dsv2` has DeepSeek-V2-Lite's MoE shape, for replaying its routing traces.  Each
 * carries K3's quantization_config (quant_config.h), as K3's own config.json does. */
#include "engine/model/config_presets.h"

#include <string.h>

#include "engine/model/quant_config.h"

#define K3_TEXT_COMMON                                                                     \
    "\"architectures\": [\"KimiLinearForCausalLM\"], \"model_type\": \"kimi_linear\", "      \
    "\"dtype\": \"bfloat16\", \"rms_norm_eps\": 1e-05, \"hidden_act\": \"situ\", "             \
    "\"activation_situ_beta\": 4.0, \"activation_situ_linear_beta\": 25.0, "                  \
    "\"first_k_dense_replace\": 1, \"moe_layer_freq\": 1, \"mla_use_nope\": true, "            \
    "\"mla_use_output_gate\": true, \"latent_moe_use_norm\": true, "                          \
    "\"moe_router_activation_func\": \"sigmoid\", \"topk_method\": \"noaux_tc\", "             \
    "\"use_grouped_topk\": true, \"num_expert_group\": 1, \"topk_group\": 1, "                 \
    "\"moe_renormalize\": true, \"routed_scaling_factor\": 1.0, "                              \
    "\"num_nextn_predict_layers\": 0, \"tie_word_embeddings\": false, \"top_k\": 50, "         \
    "\"quantization_config\": " K3_QUANT_CONFIG_JSON ", "

static const char k3_full[] =
    "{\"architectures\": [\"KimiK3ForConditionalGeneration\"], \"model_type\": \"kimi_k3\", "
    "\"media_placeholder_token_id\": 163605, \"text_config\": {" K3_TEXT_COMMON
    "\"vocab_size\": 163840, \"hidden_size\": 7168, \"num_hidden_layers\": 93, "
    "\"intermediate_size\": 33792, \"num_attention_heads\": 96, \"num_key_value_heads\": 96, "
    "\"q_lora_rank\": 1536, \"kv_lora_rank\": 512, \"qk_nope_head_dim\": 128, "
    "\"qk_rope_head_dim\": 64, \"v_head_dim\": 128, \"num_experts\": 896, "
    "\"num_experts_per_token\": 16, \"num_shared_experts\": 2, \"moe_intermediate_size\": 3072, "
    "\"routed_expert_hidden_size\": 3584, \"attn_res_block_size\": 12, "
    "\"max_position_embeddings\": 1048576, \"bos_token_id\": 163584, \"eos_token_id\": 163586, "
    "\"pad_token_id\": 163839, \"linear_attn_config\": {\"num_heads\": 96, \"head_dim\": 128, "
    "\"short_conv_kernel_size\": 4, \"use_full_rank_gate\": true, \"gate_lower_bound\": -5.0, "
    "\"full_attn_layers\": [4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 64, 68, "
    "72, 76, 80, 84, 88, 92, 93], \"kda_layers\": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, "
    "18, 19, 21, 22, 23, 25, 26, 27, 29, 30, 31, 33, 34, 35, 37, 38, 39, 41, 42, 43, 45, 46, 47, "
    "49, 50, 51, 53, 54, 55, 57, 58, 59, 61, 62, 63, 65, 66, 67, 69, 70, 71, 73, 74, 75, 77, 78, "
    "79, 81, 82, 83, 85, 86, 87, 89, 90, 91]}}}";

static const char k3_tiny[] =
    "{\"architectures\": [\"KimiK3ForConditionalGeneration\"], \"model_type\": \"kimi_k3\", "
    "\"media_placeholder_token_id\": 2037, \"text_config\": {" K3_TEXT_COMMON
    "\"vocab_size\": 2048, \"hidden_size\": 256, \"num_hidden_layers\": 13, "
    "\"intermediate_size\": 384, \"num_attention_heads\": 4, \"num_key_value_heads\": 4, "
    "\"q_lora_rank\": 64, \"kv_lora_rank\": 64, \"qk_nope_head_dim\": 32, "
    "\"qk_rope_head_dim\": 16, \"v_head_dim\": 24, \"num_experts\": 64, "
    "\"num_experts_per_token\": 16, \"num_shared_experts\": 2, \"moe_intermediate_size\": 96, "
    "\"routed_expert_hidden_size\": 128, \"attn_res_block_size\": 3, "
    "\"max_position_embeddings\": 4096, \"bos_token_id\": 2032, \"eos_token_id\": 2034, "
    "\"pad_token_id\": 2047, \"linear_attn_config\": {\"num_heads\": 4, \"head_dim\": 32, "
    "\"short_conv_kernel_size\": 4, \"use_full_rank_gate\": true, \"gate_lower_bound\": -5.0, "
    "\"full_attn_layers\": [4, 8, 12, 13], \"kda_layers\": [1, 2, 3, 5, 6, 7, 9, 10, 11]}}}";

static const char k3_bench[] =
    "{\"architectures\": [\"KimiK3ForConditionalGeneration\"], \"model_type\": \"kimi_k3\", "
    "\"media_placeholder_token_id\": 163605, \"text_config\": {" K3_TEXT_COMMON
    "\"vocab_size\": 163840, \"hidden_size\": 2048, \"num_hidden_layers\": 5, "
    "\"intermediate_size\": 8192, \"num_attention_heads\": 16, \"num_key_value_heads\": 16, "
    "\"q_lora_rank\": 512, \"kv_lora_rank\": 512, \"qk_nope_head_dim\": 128, "
    "\"qk_rope_head_dim\": 64, \"v_head_dim\": 128, \"num_experts\": 896, "
    "\"num_experts_per_token\": 16, \"num_shared_experts\": 2, \"moe_intermediate_size\": 3072, "
    "\"routed_expert_hidden_size\": 1024, \"attn_res_block_size\": 2, "
    "\"max_position_embeddings\": 131072, \"bos_token_id\": 163584, \"eos_token_id\": 163586, "
    "\"pad_token_id\": 163839, \"linear_attn_config\": {\"num_heads\": 16, \"head_dim\": 128, "
    "\"short_conv_kernel_size\": 4, \"use_full_rank_gate\": true, \"gate_lower_bound\": -5.0, "
    "\"full_attn_layers\": [4, 5], \"kda_layers\": [1, 2, 3]}}}";

/* k3-slice: every width of the released K3 (hidden 7168, vocab 163840, MLA 96 heads with
 * q_lora 1536, kv_lora 512, qk 128 + 64, v 128; KDA 96 x 128; dense 33792; latent 3584;
 * experts 3072 wide; shared 2 x 3072; 17,547,264-byte records) in 4 layers, map KKKM:
 * layer 0 KDA + dense, 1 and 2 KDA + MoE, 3 MLA + MoE.  AttnRes blocks of 2 put a
 * boundary at layer 2 (a KDA layer, as all of K3's are); 64 experts per MoE layer
 * instead of 896: a token's reads and compute per layer are K3's, only the router is
 * narrower.  Sizes (tests/unit/test_config.c checks them): routed reads 16 x 3 records =
 * 842,268,672 B per token; trunk 5,190,973,888 parameters = 10,382,908,160 B as shipped
 * (embed + lm_head 4.70 GB; per layer KDA 0.888 GB, MLA 0.464, dense MLP 1.453, MoE
 * trunk 0.368); 192 records = 3,369,074,688 B; checkpoint 13.75 GB. */
static const char k3_slice[] =
    "{\"architectures\": [\"KimiK3ForConditionalGeneration\"], \"model_type\": \"kimi_k3\", "
    "\"media_placeholder_token_id\": 163605, \"text_config\": {" K3_TEXT_COMMON
    "\"vocab_size\": 163840, \"hidden_size\": 7168, \"num_hidden_layers\": 4, "
    "\"intermediate_size\": 33792, \"num_attention_heads\": 96, \"num_key_value_heads\": 96, "
    "\"q_lora_rank\": 1536, \"kv_lora_rank\": 512, \"qk_nope_head_dim\": 128, "
    "\"qk_rope_head_dim\": 64, \"v_head_dim\": 128, \"num_experts\": 64, "
    "\"num_experts_per_token\": 16, \"num_shared_experts\": 2, \"moe_intermediate_size\": 3072, "
    "\"routed_expert_hidden_size\": 3584, \"attn_res_block_size\": 2, "
    "\"max_position_embeddings\": 1048576, \"bos_token_id\": 163584, \"eos_token_id\": 163586, "
    "\"pad_token_id\": 163839, \"linear_attn_config\": {\"num_heads\": 96, \"head_dim\": 128, "
    "\"short_conv_kernel_size\": 4, \"use_full_rank_gate\": true, \"gate_lower_bound\": -5.0, "
    "\"full_attn_layers\": [4], \"kda_layers\": [1, 2, 3]}}}";

/* k3-dsv2: K3's layer kinds (KDA and MLA, AttnRes, latent MoE) with DeepSeek-V2-Lite's MoE
 * shape, so that its published routing traces (routes v1) replay on it: one dense layer,
 * then 26 MoE layers of 64 routed experts, top-6, 2 shared, experts 1408 wide over a
 * latent of 2048 (4,616,192-byte records, 7.68 GB of experts).  Other widths are
 * DeepSeek-V2-Lite's where K3 has the same part (hidden 2048, dense 10944, 16 heads, MLA
 * kv_lora 512, qk 128 + 64, v 128). */
static const char k3_dsv2[] =
    "{\"architectures\": [\"KimiK3ForConditionalGeneration\"], \"model_type\": \"kimi_k3\", "
    "\"media_placeholder_token_id\": 163605, \"text_config\": {" K3_TEXT_COMMON
    "\"vocab_size\": 163840, \"hidden_size\": 2048, \"num_hidden_layers\": 27, "
    "\"intermediate_size\": 10944, \"num_attention_heads\": 16, \"num_key_value_heads\": 16, "
    "\"q_lora_rank\": 512, \"kv_lora_rank\": 512, \"qk_nope_head_dim\": 128, "
    "\"qk_rope_head_dim\": 64, \"v_head_dim\": 128, \"num_experts\": 64, "
    "\"num_experts_per_token\": 6, \"num_shared_experts\": 2, \"moe_intermediate_size\": 1408, "
    "\"routed_expert_hidden_size\": 2048, \"attn_res_block_size\": 4, "
    "\"max_position_embeddings\": 131072, \"bos_token_id\": 163584, \"eos_token_id\": 163586, "
    "\"pad_token_id\": 163839, \"linear_attn_config\": {\"num_heads\": 16, \"head_dim\": 128, "
    "\"short_conv_kernel_size\": 4, \"use_full_rank_gate\": true, \"gate_lower_bound\": -5.0, "
    "\"full_attn_layers\": [4, 8, 12, 16, 20, 24, 27], \"kda_layers\": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26]}}}";

static const struct {
    const char *name;
    const char *json;
} presets[] = {
    {"k3", k3_full},
    {"k3-tiny", k3_tiny},
    {"k3-bench", k3_bench},
    {"k3-slice", k3_slice},
    {"k3-dsv2", k3_dsv2},
};

const char *k3_config_preset(const char *name)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(presets[i].name, name))
            return presets[i].json;
    return NULL;
}

const char *k3_config_preset_names(void)
{
    return "k3, k3-tiny, k3-bench, k3-slice, k3-dsv2";
}
