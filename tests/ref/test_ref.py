#!/usr/bin/python3
"""Self-checks of the reference model: /usr/bin/python3 tests/ref/test_ref.py

Hand-computed values for the pieces whose mistakes would be silent (MXFP4 nibble order
and scale codes, SiTU, router ties and bias, the AttnRes mix, the conv ring), then the
two forward paths on a micro checkpoint written here through the real loader.
"""

import json
import math
import os
import struct
import sys
import tempfile
import unittest

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k3_ref  # noqa: E402
from k3_ref import (ModelConfig, attn_res_mix, e8m0_scales, kda_short_conv, mxfp4_dequant,  # noqa: E402
                    route, situ, topk_lowest_index)


class MXFP4(unittest.TestCase):
    def test_nibble_order_by_position(self):
        # One row of 64 logical columns = 32 bytes and 2 scale groups.
        packed = np.zeros((2, 32), dtype=np.uint8)
        packed[0, 0] = 0xB2    # col 0 <- low 0x2 = +1.0, col 1 <- high 0xB = -1.5
        packed[0, 15] = 0x7F   # col 30 <- 0xF = -6, col 31 <- 0x7 = +6
        packed[0, 16] = 0x91   # col 32 (group 1) <- 0x1 = +0.5, col 33 <- 0x9 = -0.5
        packed[1, 3] = 0x50    # row 1: col 6 <- 0x0 = 0, col 7 <- 0x5 = +3
        scale = np.array([[127, 129], [126, 127]], dtype=np.uint8)   # 1, 4 / 0.5, 1
        w = mxfp4_dequant(packed, scale)
        self.assertEqual(w.shape, (2, 64))
        self.assertEqual((w[0, 0], w[0, 1]), (1.0, -1.5))
        self.assertEqual((w[0, 30], w[0, 31]), (-6.0, 6.0))
        self.assertEqual((w[0, 32], w[0, 33]), (0.5 * 4, -0.5 * 4))   # second group's scale
        self.assertEqual((w[1, 6], w[1, 7]), (0.0, 3.0 * 0.5))
        expected_nonzero = {(0, 0), (0, 1), (0, 30), (0, 31), (0, 32), (0, 33), (1, 7)}
        self.assertEqual({tuple(i) for i in np.argwhere(w != 0)}, expected_nonzero)

    def test_e2m1_table(self):
        packed = np.array([[n | (n << 4) for n in range(16)]], dtype=np.uint8)   # 32 columns
        w = mxfp4_dequant(packed, np.array([[127]], dtype=np.uint8))
        table = [0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6]
        self.assertEqual(list(w[0, 0::2]), table)
        self.assertEqual(list(w[0, 1::2]), table)
        self.assertTrue(math.copysign(1, w[0, 16]) < 0)   # nibble 8 is -0

    def test_e8m0_edge_codes(self):
        s = e8m0_scales([0, 1, 126, 127, 128, 254, 255])
        self.assertEqual(list(s), [2.0 ** -127, 2.0 ** -126, 0.5, 1.0, 2.0, 2.0 ** 127, 0.0])
        packed = np.full((1, 32), 0x77, dtype=np.uint8)     # every element +6
        w = mxfp4_dequant(packed, np.array([[255, 0]], dtype=np.uint8))
        self.assertTrue((w[0, :32] == 0).all())             # 255 zeroes its group only
        self.assertTrue((w[0, 32:] == 6 * 2.0 ** -127).all())
        # 2^-127 and 2^-128 (0.5 * 2^-127) survive the cast to float32 as subnormals.
        w = mxfp4_dequant(np.full((1, 16), 0x11, dtype=np.uint8), np.array([[0]], dtype=np.uint8))
        self.assertEqual(float(torch.tensor(w, dtype=torch.float32)[0, 0]), 2.0 ** -128)

    def test_float32_gives_the_bits_of_float64_rounded(self):
        # Every nibble under every scale code, 255 and the float32 overflow at 2^127 included.
        codes = np.arange(256, dtype=np.uint8).reshape(16, 16)
        packed = np.tile(np.arange(256, dtype=np.uint8), (16, 2))      # [16, 512]: 1024 columns
        w64 = torch.from_numpy(mxfp4_dequant(packed, np.repeat(codes, 2, axis=1)))
        w32 = torch.from_numpy(mxfp4_dequant(packed, np.repeat(codes, 2, axis=1), np.float32))
        self.assertEqual(w32.dtype, torch.float32)
        self.assertTrue(torch.equal(w64.to(torch.float32).view(torch.int32), w32.view(torch.int32)))


class SiTU(unittest.TestCase):
    def test_values(self):
        def want(g, u):
            return 4 * math.tanh(g / 4) / (1 + math.exp(-g)) * 25 * math.tanh(u / 25)
        g = torch.tensor([1.0, 8.0, -3.0, 0.0, 100.0], dtype=torch.float64)
        u = torch.tensor([1.0, 30.0, 2.0, 5.0, 1e4], dtype=torch.float64)
        got = situ(g, u, 4.0, 25.0)
        for i in range(5):
            self.assertAlmostEqual(float(got[i]), want(float(g[i]), float(u[i])), places=12)
        self.assertAlmostEqual(float(got[4]), 100.0, places=9)   # both caps: |SiTU| <= 100
        # sigmoid of the uncapped gate: at g = 8, sigma(8) not sigma(4 tanh 2).
        self.assertAlmostEqual(float(got[1]), 4 * math.tanh(2) / (1 + math.exp(-8)) * 25 * math.tanh(1.2),
                               places=12)


def router_config(**over):
    base = dict(num_experts=4, experts_per_token=2, n_group=1, topk_group=1, moe_renormalize=True,
                routed_scaling_factor=1.0)
    base.update(over)
    return type("RouterConfig", (), base)


class Router(unittest.TestCase):
    def test_ties_lower_index_wins(self):
        keys = torch.tensor([[0.5, 0.7, 0.5, 0.7, 0.1],
                             [0.3, 0.3, 0.3, 0.3, 0.3],
                             [0.0, -0.0, 1.0, 0.0, 0.0]])
        self.assertEqual(topk_lowest_index(keys, 3).tolist(), [[1, 3, 0], [0, 1, 2], [2, 0, 1]])

    def test_bias_selects_but_does_not_weigh(self):
        x = torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
        gate_w = torch.zeros(4, 4, dtype=torch.float64)
        gate_w[:, 0] = torch.tensor([2.0, 1.0, 0.0, -1.0])                  # logits [2, 1, 0, -1]
        bias = torch.tensor([0.0, 0.0, 5.0, 0.0], dtype=torch.float64)
        idx, w, changed = route(x, gate_w, bias, router_config())
        self.assertEqual(idx.tolist(), [[2, 0]])                            # by s + bias
        s = [1 / (1 + math.exp(-z)) for z in (0.0, 2.0)]
        self.assertAlmostEqual(float(w[0, 0]), s[0] / (s[0] + s[1] + 1e-20), places=14)
        self.assertAlmostEqual(float(w[0, 1]), s[1] / (s[0] + s[1] + 1e-20), places=14)
        self.assertTrue(bool(changed[0]))                                   # unbiased pick: {0, 1}
        _, w_scaled, same = route(x, gate_w, torch.zeros(4, dtype=torch.float64),
                                  router_config(routed_scaling_factor=2.5))
        self.assertFalse(bool(same[0]))
        self.assertAlmostEqual(float(w_scaled.sum()), 2.5, places=12)

    def test_grouped_topk(self):
        # 4 groups of 2. Group sums of top-2: g0 1.0, g1 1.1, g2 0.95, g3 0.2. Keep 2 groups
        # (g1, g0): expert 4 (0.9) is the best key overall but lies in a dropped group.
        keys = torch.tensor([[0.5, 0.5, 0.6, 0.5, 0.9, 0.05, 0.1, 0.1]])
        cfg = router_config(num_experts=8, experts_per_token=3, n_group=4, topk_group=2)
        self.assertEqual(k3_ref.select_experts(keys, cfg).tolist(), [[2, 0, 1]])

    def test_dropped_groups_never_chosen(self):
        # Kept groups g0, g1 (sums 0.7, 1.1); a kept key is negative (-0.3).  Moonshot's gate
        # masks the dropped groups with -inf, so expert 1 (-0.3) is chosen, not the dropped
        # expert 4 (0.2), as DeepSeek-V3's 0.0 would.
        keys = torch.tensor([[1.0, -0.3, 0.6, 0.5, 0.2, 0.1, 0.1, 0.05]])
        cfg = router_config(num_experts=8, experts_per_token=4, n_group=4, topk_group=2)
        self.assertEqual(k3_ref.select_experts(keys, cfg).tolist(), [[0, 2, 3, 1]])

    def test_groups_only_when_more_than_kept(self):
        # n_group == topk_group keeps every group: plain top-k, as Moonshot's gate.
        keys = torch.tensor([[0.5, 0.5, 0.6, 0.5, 0.9, 0.05, 0.1, 0.1]])
        cfg = router_config(num_experts=8, experts_per_token=3, n_group=4, topk_group=4)
        self.assertEqual(k3_ref.select_experts(keys, cfg).tolist(), [[4, 2, 0]])

    def test_use_grouped_topk_is_not_read(self):
        tc = micro_text_config(4)
        tc["topk_group"], tc["use_grouped_topk"] = 2, False
        cfg = k3_ref.ModelConfig.from_text_config(tc)
        self.assertEqual((cfg.n_group, cfg.topk_group), (4, 2))

    def test_top1_not_renormalized(self):
        x = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
        gate_w = torch.tensor([[0.5, 0.0], [-1.0, 0.0]], dtype=torch.float64)
        idx, w, _ = route(x, gate_w, torch.zeros(2, dtype=torch.float64),
                          router_config(num_experts=2, experts_per_token=1, routed_scaling_factor=2.0))
        self.assertEqual(idx.tolist(), [[0]])
        self.assertAlmostEqual(float(w[0, 0]), 2.0 / (1 + math.exp(-0.5)), places=14)


class AttnRes(unittest.TestCase):
    def test_equal_scores_average_raw_candidates(self):
        c0 = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
        c1 = torch.tensor([[0.0, 2.0]], dtype=torch.float64)
        ones = torch.ones(2, dtype=torch.float64)
        # N(c0) = [sqrt2, 0], N(c1) = [0, sqrt2]: scores equal, so the raw mean.
        mix = attn_res_mix([c0, c1], ones, ones.view(1, 2), 0.0)
        self.assertEqual(mix.tolist(), [[0.5, 1.0]])

    def test_query_and_gain_multiply(self):
        c0 = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
        c1 = torch.tensor([[0.0, 2.0]], dtype=torch.float64)
        norm = torch.tensor([2.0, 3.0], dtype=torch.float64)
        proj = torch.tensor([[0.5, 0.0]], dtype=torch.float64)    # n*w = [1, 0]
        a0 = math.exp(math.sqrt(2)) / (math.exp(math.sqrt(2)) + 1)  # scores sqrt2 and 0
        mix = attn_res_mix([c0, c1], norm, proj, 0.0)
        self.assertAlmostEqual(float(mix[0, 0]), a0, places=14)
        self.assertAlmostEqual(float(mix[0, 1]), 2 * (1 - a0), places=14)


class ShortConv(unittest.TestCase):
    def test_taps_and_ring(self):
        w = torch.tensor([[[1.0, 10.0, 100.0, 1000.0]]], dtype=torch.float64)   # tap 3 = current
        x = torch.tensor([[1e-3], [2e-3], [3e-3], [4e-3], [5e-3]], dtype=torch.float64)
        ring = torch.zeros(3, 1, dtype=torch.float64)
        y, ring_after = kda_short_conv(x, ring, w)
        pre = [1.0, 2.0 + 0.1, 3.0 + 0.2 + 0.01, 4.0 + 0.3 + 0.02 + 0.001, 5.0 + 0.4 + 0.03 + 0.002]
        for t in range(5):
            self.assertAlmostEqual(float(y[t, 0]), pre[t] / (1 + math.exp(-pre[t])), places=12)
        self.assertEqual(ring_after[:, 0].tolist(), [3e-3, 4e-3, 5e-3])       # last 3 raw inputs
        r = ring
        for t in range(5):                                                     # one at a time
            yt, r = kda_short_conv(x[t:t + 1], r, w)
            self.assertAlmostEqual(float(yt[0, 0]), float(y[t, 0]), places=14)


# --------------------------------------------------------------------------------------
# the two paths on a micro checkpoint


def write_safetensors(path, tensors):
    """tensors: name -> (dtype string, numpy array of the stored type)."""
    header, blobs, off = {}, [], 0
    for name, (dtype, a) in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def micro_text_config(n_group):
    return {
        "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 5, "rms_norm_eps": 1e-5,
        "hidden_act": "situ", "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
        "intermediate_size": 48, "first_k_dense_replace": 1, "moe_layer_freq": 1,
        "num_attention_heads": 2, "num_key_value_heads": 2, "q_lora_rank": 16, "kv_lora_rank": 16,
        "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 6, "mla_use_nope": True,
        "mla_use_output_gate": True, "num_experts": 8, "num_experts_per_token": 3, "num_shared_experts": 1,
        "moe_intermediate_size": 32, "routed_expert_hidden_size": 64, "latent_moe_use_norm": True,
        "moe_router_activation_func": "sigmoid", "topk_method": "noaux_tc", "use_grouped_topk": True,
        "num_expert_group": n_group, "topk_group": 1, "moe_renormalize": True, "routed_scaling_factor": 1.0,
        "attn_res_block_size": 2, "top_k": 50,
        "linear_attn_config": {"num_heads": 2, "head_dim": 8, "short_conv_kernel_size": 3,
                               "use_full_rank_gate": True, "gate_lower_bound": -5.0,
                               "kda_layers": [1, 2, 4], "full_attn_layers": [3, 5]},
    }


def write_micro_checkpoint(folder, n_group, seed=0):
    """Random weights for every tensor of §2 at micro sizes, split over two shards; the
    small vectors alternate between F32 and BF16 to exercise both readers."""
    tc = micro_text_config(n_group)
    cfg = ModelConfig.from_text_config(tc)
    rng = np.random.default_rng(seed)
    tensors = {}
    for i, (name, (shape, dtype)) in enumerate(k3_ref.expected_tensors(cfg).items()):
        if dtype == "U8":
            a = (rng.integers(0, 256, shape) if name.endswith("packed") else rng.integers(115, 122, shape))
            tensors[name] = ("U8", a.astype(np.uint8))
            continue
        if name.endswith("A_log"):
            a = np.zeros(shape)
            a[:cfg.kda_num_heads] = np.log(rng.uniform(1, 16, cfg.kda_num_heads))
        elif len(shape) == 1 or "res_proj" in name:
            a = rng.uniform(0.8, 1.2, shape) if "norm" in name else rng.normal(0, 0.3, shape)
        else:
            a = rng.normal(0, 0.15, shape)
        a = a.astype(np.float32)
        if dtype == "F32" and i % 2:
            dtype = "BF16"
        tensors[name] = ("F32", a) if dtype == "F32" else ("BF16", (a.view(np.uint32) >> 16).astype(np.uint16))
    names = sorted(tensors)
    weight_map = {}
    for shard, part in (("a.safetensors", names[::2]), ("b.safetensors", names[1::2])):
        write_safetensors(os.path.join(folder, shard), {n: tensors[n] for n in part})
        weight_map.update({n: shard for n in part})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "kimi_k3", "text_config": tc}, f)


class Paths(unittest.TestCase):
    PROMPT = [3, 60, 7, 7, 41, 0, 22, 9]

    def check_paths(self, n_group, dtype, rel_tol):
        with tempfile.TemporaryDirectory() as d:
            write_micro_checkpoint(d, n_group)
            model = k3_ref.K3Reference(d, dtype=dtype)
            # Shapes as §2; the only notes are the small vectors deliberately stored as BF16.
            self.assertTrue(model.audit_notes)
            self.assertTrue(all(n.endswith("dtype BF16, spec says F32") for n in model.audit_notes))
            pre, state = model.prefill(self.PROMPT[:5])
            inc_state = model.new_state()
            rows = [model.decode(t, inc_state) for t in self.PROMPT[:5]]
            inc = torch.cat([r.logits for r in rows])
            scale = pre.logits.abs().max()
            self.assertLessEqual(float((inc - pre.logits).abs().max()), rel_tol * float(scale))
            self.assertEqual(pre.bias_changed, sum(r.bias_changed for r in rows))
            self.assertLessEqual(float((torch.cat([r.layer_stats for r in rows]) - pre.layer_stats).abs().max()),
                                 rel_tol * float(pre.layer_stats.abs().max()))
            # Decoding after a prefill continues exactly like decoding from the start.
            tail_pre = [model.decode(t, state).logits for t in self.PROMPT[5:]]
            tail_inc = [model.decode(t, inc_state).logits for t in self.PROMPT[5:]]
            self.assertLessEqual(float((torch.cat(tail_pre) - torch.cat(tail_inc)).abs().max()),
                                 rel_tol * float(scale))
            self.assertEqual(state.pos, len(self.PROMPT))

    def test_incremental_equals_prefill_float64(self):
        self.check_paths(1, torch.float64, 1e-12)

    def test_incremental_equals_prefill_float32(self):
        self.check_paths(1, torch.float32, 1e-5)

    def test_incremental_equals_prefill_grouped_router(self):
        self.check_paths(2, torch.float64, 1e-12)

    def test_layer_lists_must_agree(self):
        tc = micro_text_config(1)
        tc["linear_attn_config"]["full_attn_layers"] = [3, 4, 5]
        with self.assertRaises(ValueError):
            ModelConfig.from_text_config(tc)


if __name__ == "__main__":
    unittest.main()
