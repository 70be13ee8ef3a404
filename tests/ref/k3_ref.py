"""An independent PyTorch implementation of the Kimi-K3 text model, the project's own.

Written from the model description (k3-model.md; section numbers below refer to it), never
from the C engine, so that the two can check each other.  It reads a checkpoint folder as
K3 ships it (root config.json with a nested text_config, model.safetensors.index.json,
shards, tensor prefix `language_model.`, MXFP4 routed experts) and computes in float32
(or float64) with the experts dequantized exactly.

One forward function serves both paths: `forward(ids, state)` runs T tokens starting at
`state.pos` and updates the carried state (KDA recurrent state and conv rings, MLA latent
cache).  Prefill is one call with the whole prompt on a fresh state (MLA as causal
attention over the prompt); decode is one call per token.
"""

import functools
import json
import math
import os
import struct
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

# The choices k3-model.md marks with a warning sign, each one named constant (§7).
MLA_NORM_EPS = 1e-6        # §3.5.7: eps of q_a_layernorm and kv_a_layernorm (not rms_norm_eps)
KDA_L2_EPS = 1e-6          # §3.4.3: eps inside the per-head L2 norm of q and k
ROUTER_RENORM_EPS = 1e-20  # §3.7.6: w / (sum w + 1e-20)

PREFIX = "language_model."
MODEL = PREFIX + "model."


# --------------------------------------------------------------------------------------
# safetensors (no package: 8-byte LE header length N, N bytes of JSON, then the data)

_ST_DTYPES = {"BF16": "<u2", "F16": "<f2", "F32": "<f4", "F64": "<f8", "U8": "u1", "I8": "i1"}


class SafetensorsFile:
    """The header of one shard and a read-only map of its data."""

    def __init__(self, path):
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        self.path = path
        self.entries = header
        self.data_start = 8 + n
        self.data = np.memmap(path, dtype=np.uint8, mode="r")

    def raw(self, name):
        """The tensor as stored: a numpy array of the on-disk dtype (BF16 as uint16)."""
        e = self.entries[name]
        if e["dtype"] not in _ST_DTYPES:
            raise ValueError(f"{self.path}: {name}: unsupported dtype {e['dtype']}")
        dt = np.dtype(_ST_DTYPES[e["dtype"]])
        begin, end = e["data_offsets"]
        count = int(np.prod(e["shape"], dtype=np.int64))
        if end - begin != count * dt.itemsize:
            raise ValueError(f"{self.path}: {name}: {end - begin} bytes for shape {e['shape']} {e['dtype']}")
        buf = self.data[self.data_start + begin:self.data_start + end]
        return buf.view(dt).reshape(e["shape"])


def to_float(raw, dtype_name, torch_dtype):
    """Widen a stored tensor to torch_dtype.  BF16 -> F32 is exact: the 16 bits become the
    high half of a float32 (§3.0).  One new array of the widened size (K3's lm_head is
    4.7 GB in f32), written in place, so a read of the map costs no second copy."""
    if dtype_name == "BF16":
        wide = np.empty(raw.shape, dtype=np.uint32)
        np.copyto(wide, raw)
        wide <<= 16
        arr = wide.view(np.float32)
    else:
        arr = np.array(raw)                                   # a writable copy of the map
    return torch.from_numpy(arr).to(torch_dtype)


class Checkpoint:
    """A checkpoint folder as shipped: config.json, model.safetensors.index.json, shards."""

    def __init__(self, folder):
        with open(os.path.join(folder, "config.json")) as f:
            self.root_config = json.load(f)
        with open(os.path.join(folder, "model.safetensors.index.json")) as f:
            self.weight_map = json.load(f)["weight_map"]
        self.shards = {s: SafetensorsFile(os.path.join(folder, s)) for s in sorted(set(self.weight_map.values()))}
        for name, shard in self.weight_map.items():
            if name not in self.shards[shard].entries:
                raise ValueError(f"index maps {name} to {shard}, whose header does not have it")

    def _entry(self, name):
        if name not in self.weight_map:
            raise KeyError(f"checkpoint has no tensor {name}")
        return self.shards[self.weight_map[name]].entries[name]

    def dtype(self, name):
        return self._entry(name)["dtype"]

    def shape(self, name):
        return tuple(self._entry(name)["shape"])

    def raw(self, name):
        self._entry(name)
        return self.shards[self.weight_map[name]].raw(name)


# --------------------------------------------------------------------------------------
# §1 config


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    num_layers: int
    rms_norm_eps: float
    situ_beta: float            # β₁, gate cap
    situ_linear_beta: float     # β₂, up cap
    intermediate_size: int
    first_k_dense_replace: int
    moe_layer_freq: int
    tie_word_embeddings: bool
    # MLA
    num_attention_heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    mla_use_output_gate: bool
    # MoE
    num_experts: int
    experts_per_token: int
    num_shared_experts: int
    moe_intermediate_size: int
    routed_expert_hidden_size: int
    latent_moe_use_norm: bool
    n_group: int
    topk_group: int
    moe_renormalize: bool
    routed_scaling_factor: float
    # AttnRes
    attn_res_block_size: int
    # KDA
    kda_num_heads: int
    kda_head_dim: int
    conv_kernel: int
    gate_lower_bound: float
    kda_layers: frozenset = field(default_factory=frozenset)  # 0-based

    @staticmethod
    def from_text_config(tc):
        """Reads text_config.  Refuses the variants this model family does not use rather
        than computing something else silently."""
        def need(cond, what):
            if not cond:
                raise ValueError(f"config: unsupported {what}")
        need(tc.get("hidden_act") == "situ", f"hidden_act {tc.get('hidden_act')!r} (expected 'situ')")
        need(tc.get("mla_use_nope") is True, "mla_use_nope != true (rotary is not part of K3)")
        need(tc.get("moe_router_activation_func") == "sigmoid", "moe_router_activation_func (expected 'sigmoid')")
        need(tc.get("topk_method") == "noaux_tc", "topk_method (expected 'noaux_tc')")
        need(tc.get("q_lora_rank") is not None, "q_lora_rank null (Kimi-Linear MLA without query bottleneck)")
        la = tc["linear_attn_config"]
        need(la.get("use_full_rank_gate") is True, "linear_attn_config.use_full_rank_gate != true")
        L = tc["num_hidden_layers"]
        kda = set(la["kda_layers"])
        full = set(la["full_attn_layers"])
        # §1.3: both lists ship; they must be disjoint and cover 1..L (1-based ids).
        if kda & full or kda | full != set(range(1, L + 1)):
            raise ValueError(f"config: kda_layers {sorted(kda)} and full_attn_layers {sorted(full)} "
                             f"are not a partition of 1..{L}")
        # use_grouped_topk is not read: Moonshot's gate never does (§3.7.3).
        return ModelConfig(
            vocab_size=tc["vocab_size"], hidden_size=tc["hidden_size"], num_layers=L,
            rms_norm_eps=tc["rms_norm_eps"],
            situ_beta=tc["activation_situ_beta"], situ_linear_beta=tc["activation_situ_linear_beta"],
            intermediate_size=tc["intermediate_size"], first_k_dense_replace=tc["first_k_dense_replace"],
            moe_layer_freq=tc["moe_layer_freq"], tie_word_embeddings=tc.get("tie_word_embeddings", False),
            num_attention_heads=tc["num_attention_heads"], q_lora_rank=tc["q_lora_rank"],
            kv_lora_rank=tc["kv_lora_rank"], qk_nope_head_dim=tc["qk_nope_head_dim"],
            qk_rope_head_dim=tc["qk_rope_head_dim"], v_head_dim=tc["v_head_dim"],
            mla_use_output_gate=tc["mla_use_output_gate"],
            num_experts=tc["num_experts"],
            experts_per_token=tc["num_experts_per_token"],  # not text_config.top_k (§1.1 trap)
            num_shared_experts=tc["num_shared_experts"], moe_intermediate_size=tc["moe_intermediate_size"],
            routed_expert_hidden_size=tc["routed_expert_hidden_size"],
            latent_moe_use_norm=tc["latent_moe_use_norm"],
            n_group=tc.get("num_expert_group", 1), topk_group=tc.get("topk_group", 1),
            moe_renormalize=tc["moe_renormalize"], routed_scaling_factor=tc["routed_scaling_factor"],
            attn_res_block_size=tc["attn_res_block_size"],
            kda_num_heads=la["num_heads"], kda_head_dim=la["head_dim"],
            conv_kernel=la["short_conv_kernel_size"], gate_lower_bound=la["gate_lower_bound"],
            kda_layers=frozenset(i - 1 for i in kda),
        )

    def is_kda(self, l):
        return l in self.kda_layers

    def is_moe(self, l):
        return l >= self.first_k_dense_replace and l % self.moe_layer_freq == 0


def expected_tensors(cfg):
    """§2 as a table: name -> (shape, dtype the spec gives).  Experts are listed too."""
    H, V = cfg.hidden_size, cfg.vocab_size
    P = cfg.kda_num_heads * cfg.kda_head_dim
    nh, dn, dr, dv = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    Hl, I = cfg.routed_expert_hidden_size, cfg.moe_intermediate_size
    Ish = cfg.num_shared_experts * I
    t = {MODEL + "embed_tokens.weight": ((V, H), "BF16"),
         MODEL + "norm.weight": ((H,), "BF16"),
         MODEL + "output_attn_res_norm.weight": ((H,), "BF16"),
         MODEL + "output_attn_res_proj.weight": ((1, H), "BF16")}
    if not cfg.tie_word_embeddings:
        t[PREFIX + "lm_head.weight"] = ((V, H), "BF16")
    for l in range(cfg.num_layers):
        p = f"{MODEL}layers.{l}."
        for n in ("input_layernorm", "post_attention_layernorm", "self_attention_res_norm", "mlp_res_norm"):
            t[p + n + ".weight"] = ((H,), "BF16")
        for n in ("self_attention_res_proj", "mlp_res_proj"):
            t[p + n + ".weight"] = ((1, H), "BF16")
        a = p + "self_attn."
        if cfg.is_kda(l):
            for n in ("q", "k", "v"):
                t[a + n + "_proj.weight"] = ((P, H), "BF16")
                t[a + n + "_conv1d.weight"] = ((P, 1, cfg.conv_kernel), "F32")
            t[a + "f_a_proj.weight"] = ((cfg.kda_head_dim, H), "BF16")
            t[a + "f_b_proj.weight"] = ((P, cfg.kda_head_dim), "BF16")
            t[a + "b_proj.weight"] = ((cfg.kda_num_heads, H), "BF16")
            t[a + "A_log"] = ((cfg.kda_head_dim,), "F32")  # padded to head_dim (§2, §6)
            t[a + "dt_bias"] = ((P,), "F32")
            t[a + "g_proj.weight"] = ((P, H), "BF16")
            t[a + "o_norm.weight"] = ((cfg.kda_head_dim,), "F32")
            t[a + "o_proj.weight"] = ((H, P), "BF16")
        else:
            t[a + "q_a_proj.weight"] = ((cfg.q_lora_rank, H), "BF16")
            t[a + "q_a_layernorm.weight"] = ((cfg.q_lora_rank,), "BF16")
            t[a + "q_b_proj.weight"] = ((nh * (dn + dr), cfg.q_lora_rank), "BF16")
            t[a + "kv_a_proj_with_mqa.weight"] = ((cfg.kv_lora_rank + dr, H), "BF16")
            t[a + "kv_a_layernorm.weight"] = ((cfg.kv_lora_rank,), "BF16")
            t[a + "kv_b_proj.weight"] = ((nh * (dn + dv), cfg.kv_lora_rank), "BF16")
            if cfg.mla_use_output_gate:
                t[a + "g_proj.weight"] = ((nh * dv, H), "BF16")
            t[a + "o_proj.weight"] = ((H, nh * dv), "BF16")
        if cfg.is_moe(l):
            m = p + "block_sparse_moe."
            t[m + "gate.weight"] = ((cfg.num_experts, H), "BF16")
            t[m + "gate.e_score_correction_bias"] = ((cfg.num_experts,), "F32")
            t[m + "shared_experts.gate_proj.weight"] = ((Ish, H), "BF16")
            t[m + "shared_experts.up_proj.weight"] = ((Ish, H), "BF16")
            t[m + "shared_experts.down_proj.weight"] = ((H, Ish), "BF16")
            t[m + "routed_expert_down_proj.weight"] = ((Hl, H), "BF16")
            t[m + "routed_expert_norm.weight"] = ((Hl,), "BF16")
            t[m + "routed_expert_up_proj.weight"] = ((H, Hl), "BF16")
            for e in range(cfg.num_experts):
                x = f"{m}experts.{e}."
                for w, (rows, cols) in (("w1", (I, Hl)), ("w3", (I, Hl)), ("w2", (Hl, I))):
                    t[x + w + ".weight_packed"] = ((rows, cols // 2), "U8")
                    t[x + w + ".weight_scale"] = ((rows, cols // 32), "U8")
        else:
            for n, shape in (("gate_proj", (cfg.intermediate_size, H)), ("up_proj", (cfg.intermediate_size, H)),
                             ("down_proj", (H, cfg.intermediate_size))):
                t[f"{p}mlp.{n}.weight"] = (shape, "BF16")
    return t


def audit_checkpoint(ckpt, cfg):
    """Compares the checkpoint with §2.  Returns (errors, notes): a missing tensor or a
    wrong shape is an error; a dtype other than the spec's (the loader reads the dtype
    from the header either way) or an unexpected language_model tensor is a note."""
    errors, notes = [], []
    want = expected_tensors(cfg)
    for name, (shape, dtype) in want.items():
        if name not in ckpt.weight_map:
            errors.append(f"missing tensor {name}")
            continue
        if ckpt.shape(name) != shape:
            errors.append(f"{name}: shape {list(ckpt.shape(name))}, spec says {list(shape)}")
        if ckpt.dtype(name) != dtype:
            notes.append(f"{name}: dtype {ckpt.dtype(name)}, spec says {dtype}")
    for name in sorted(ckpt.weight_map):
        if name.startswith(PREFIX) and name not in want:
            notes.append(f"unexpected tensor {name}")
    return errors, notes


# --------------------------------------------------------------------------------------
# §4 MXFP4

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                 -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def e8m0_scales(codes):
    """E8M0 code e -> 2^(e-127).  ⚠ e = 255 (NaN in OCP) zeroes its group; e = 0 is
    2^-127, not 0 (§4 recommendation)."""
    codes = np.asarray(codes, dtype=np.int64)
    return np.where(codes == 255, 0.0, np.ldexp(1.0, codes - 127))


def mxfp4_dequant(packed, scale, dtype=np.float64):
    """Exact logical matrix [rows, 2*cols] from packed [rows, cols] U8 nibbles and scale
    [rows, 2*cols/32] U8: element (r, 2b) is the low nibble of packed[r, b], element
    (r, 2b+1) the high nibble; column c uses scale[r, c // 32].  Exact in float32 too (a
    value of at most 3 significant bits times a power of two from 2^-127 up; subnormals
    hold it), so float32 gives the bits float64 then rounded would, three times faster."""
    packed = np.asarray(packed, dtype=np.uint8)
    rows, half = packed.shape
    nib = np.empty((rows, 2 * half), dtype=np.uint8)
    nib[:, 0::2] = packed & 0x0F
    nib[:, 1::2] = packed >> 4
    if scale.shape != (rows, 2 * half // 32):
        raise ValueError(f"MXFP4 scale shape {scale.shape} does not fit packed {packed.shape}")
    with np.errstate(over="ignore"):   # 6 x 2^127 overflows float32 to inf, as a cast would
        out = E2M1.astype(dtype)[nib].reshape(rows, -1, 32)
        out *= e8m0_scales(scale).astype(dtype)[:, :, None]
    return out.reshape(rows, 2 * half)


# --------------------------------------------------------------------------------------
# §3 forward math.  Tensors are [T, ...] over the T positions of one forward call.


def rms_norm(x, gain, eps):
    """§3.0: gain * x / sqrt(mean(x^2) + eps) over the last axis."""
    return gain * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps))


def attn_res_mix(cands, norm_w, proj_w, eps):
    """§3.2 Mix: softmax over the candidates of <N(c_j), n*w>, then the weighted sum of the
    raw (un-normalized) candidates.  cands: list of [T, H]."""
    c = torch.stack(cands)                                   # [m, T, H]
    keys = rms_norm(c, torch.ones_like(norm_w), eps)         # N(c_j): no gain
    scores = (keys * (norm_w * proj_w.reshape(-1))).sum(-1)  # [m, T]
    alpha = torch.softmax(scores, dim=0)
    return (alpha.unsqueeze(-1) * c).sum(0)


def situ(g, u, beta1, beta2):
    """§3.6 SiTU: beta1*tanh(g/beta1)*sigmoid(g) * beta2*tanh(u/beta2); the sigmoid takes
    the uncapped g."""
    return beta1 * torch.tanh(g / beta1) * torch.sigmoid(g) * (beta2 * torch.tanh(u / beta2))


def situ_mlp(x, w, prefix, cfg):
    """§3.6 MLP(x) = W_down SiTU(W_gate x, W_up x), the weights w[prefix + "gate_proj.weight"]
    etc. looked up one at a time, so that a lazy w holds one of them at once (K3's dense
    layer 0: 969 MB each in f32)."""
    g = x @ w[prefix + "gate_proj.weight"].T
    u = x @ w[prefix + "up_proj.weight"].T
    return situ(g, u, cfg.situ_beta, cfg.situ_linear_beta) @ w[prefix + "down_proj.weight"].T


def kda_short_conv(x, ring, w):
    """§3.4.2 causal depthwise conv + SiLU.  x [T, P] raw projections, ring [W-1, P] the
    previous W-1 raw inputs (oldest first), w [P, 1, W] with tap W-1 on the current token.
    Returns (output [T, P], new ring = the last W-1 raw inputs)."""
    T, W = x.shape[0], w.shape[-1]
    xs = torch.cat([ring, x])                  # xs[t + j] = x_{t-(W-1)+j}
    y = sum(w[:, 0, j] * xs[j:j + T] for j in range(W))
    return F.silu(y), xs[xs.shape[0] - (W - 1):]


def l2_norm_heads(x, eps):
    """§3.4.3: x / sqrt(sum(x^2) + eps) per head (last axis)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def kda_attention(h, w, st, cfg, l2_eps):
    """§3.4 Kimi Delta Attention over T positions, advancing st (S and the conv rings)."""
    T, n, d = h.shape[0], cfg.kda_num_heads, cfg.kda_head_dim
    q, st.ring_q = kda_short_conv(h @ w["q_proj.weight"].T, st.ring_q, w["q_conv1d.weight"])
    k, st.ring_k = kda_short_conv(h @ w["k_proj.weight"].T, st.ring_k, w["k_conv1d.weight"])
    v, st.ring_v = kda_short_conv(h @ w["v_proj.weight"].T, st.ring_v, w["v_conv1d.weight"])
    q = l2_norm_heads(q.view(T, n, d), l2_eps) * d ** -0.5
    k = l2_norm_heads(k.view(T, n, d), l2_eps)
    v = v.view(T, n, d)
    # §3.4.4 bounded decay gate; A_log is per head (only the first n entries are live).
    u = (h @ w["f_a_proj.weight"].T) @ w["f_b_proj.weight"].T + w["dt_bias"]
    a = torch.exp(w["A_log"][:n]).view(1, n, 1)
    alpha = torch.exp(cfg.gate_lower_bound * torch.sigmoid(a * u.view(T, n, d)))
    beta = torch.sigmoid(h @ w["b_proj.weight"].T)            # §3.4.5, [T, n]
    # §3.4.6 delta rule; S[head, i (key), j (value)].
    S = st.S
    outs = []
    for t in range(T):
        S = alpha[t].unsqueeze(-1) * S                          # row i scaled by alpha[i]
        r = v[t] - torch.einsum("nij,ni->nj", S, k[t])          # read the decayed state
        S = S + beta[t].view(n, 1, 1) * k[t].unsqueeze(-1) * r.unsqueeze(1)
        outs.append(torch.einsum("nij,ni->nj", S, q[t]))        # read the updated state
    st.S = S
    o = torch.stack(outs)                                       # [T, n, d]
    # §3.4.7 normalize, then gate (FusedRMSNormGated order).
    z = (h @ w["g_proj.weight"].T).view(T, n, d)
    o = rms_norm(o, w["o_norm.weight"], cfg.rms_norm_eps) * torch.sigmoid(z)
    return o.reshape(T, n * d) @ w["o_proj.weight"].T


def mla_attention(h, w, st, cfg, mla_eps):
    """§3.5 MLA with NoPE in the expanded form: every cached latent is expanded to per-head
    keys and values (the engine may absorb U^K/U^V instead; agreement checks both)."""
    T = h.shape[0]
    nh, dn, dr, dv, r = (cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim,
                         cfg.v_head_dim, cfg.kv_lora_rank)
    cq = rms_norm(h @ w["q_a_proj.weight"].T, w["q_a_layernorm.weight"], mla_eps)
    q = (cq @ w["q_b_proj.weight"].T).view(T, nh, dn + dr)
    kv = h @ w["kv_a_proj_with_mqa.weight"].T
    st.c = torch.cat([st.c, rms_norm(kv[:, :r], w["kv_a_layernorm.weight"], mla_eps)])
    st.k_pe = torch.cat([st.k_pe, kv[:, r:]])                   # raw, no rotation, shared
    first = st.c.shape[0] - T                                   # position of h[0]
    kv_b = w["kv_b_proj.weight"].view(nh, dn + dv, r)           # head h: [U^K_h ; U^V_h]
    keys = torch.einsum("hnr,sr->hsn", kv_b[:, :dn], st.c)
    values = torch.einsum("hvr,sr->hsv", kv_b[:, dn:], st.c)
    scores = (torch.einsum("thn,hsn->hts", q[..., :dn], keys)
              + torch.einsum("thp,sp->hts", q[..., dn:], st.k_pe)) / math.sqrt(dn + dr)
    pos_q = torch.arange(first, first + T).view(T, 1)
    pos_k = torch.arange(st.c.shape[0]).view(1, -1)
    scores = scores.masked_fill(pos_k > pos_q, float("-inf"))   # causal
    o = torch.einsum("hts,hsv->thv", torch.softmax(scores, -1), values).reshape(T, nh * dv)
    if cfg.mla_use_output_gate:
        o = o * torch.sigmoid(h @ w["g_proj.weight"].T)         # gate from the layer input
    return o @ w["o_proj.weight"].T


def topk_lowest_index(keys, k):
    """Indices of the k largest keys per row, in descending key order; among equal keys
    the lower index comes first (§3.7.4, as the C engines' strict '>' scan)."""
    rows = keys.detach().cpu().numpy().astype(np.float64)
    idx = np.arange(rows.shape[-1])
    return torch.tensor(np.stack([np.lexsort((idx, -row))[:k] for row in rows]), dtype=torch.long)


def select_experts(keys, cfg):
    """§3.7.3-4: top-k on the selection keys, group-limited as Moonshot's gate when
    n_group > 1 and n_group > topk_group (group score = sum of its top-2 keys; keep
    topk_group groups; the other groups' experts are masked with -inf, never chosen)."""
    if not (cfg.n_group > 1 and cfg.n_group > cfg.topk_group):
        return topk_lowest_index(keys, cfg.experts_per_token)
    T, E = keys.shape
    grouped = keys.view(T, cfg.n_group, E // cfg.n_group)
    group_scores = grouped.topk(2, dim=-1).values.sum(-1)      # values only: ties irrelevant
    keep = torch.zeros(T, cfg.n_group, dtype=torch.bool)
    keep.scatter_(1, topk_lowest_index(group_scores, cfg.topk_group), True)
    masked = grouped.masked_fill(~keep.unsqueeze(-1), float("-inf")).view(T, E)
    return topk_lowest_index(masked, cfg.experts_per_token)


def route(x, gate_w, bias, cfg):
    """§3.7 router.  Returns (expert ids [T, k] in selection order, weights [T, k],
    bias_changed [T] bool: whether the biased selection differs as a set from the
    unbiased one)."""
    s = torch.sigmoid(x @ gate_w.T)
    idx = select_experts(s + bias, cfg)                         # the bias only selects
    weights = s.gather(1, idx)
    if cfg.moe_renormalize and cfg.experts_per_token > 1:     # §3.7.6: not at top-1
        weights = weights / (weights.sum(-1, keepdim=True) + ROUTER_RENORM_EPS)
    weights = weights * cfg.routed_scaling_factor
    plain = select_experts(s, cfg)
    changed = torch.tensor([set(a.tolist()) != set(b.tolist()) for a, b in zip(idx, plain)])
    return idx, weights, changed


def latent_moe(x, w, expert, cfg):
    """§3.8 latent MoE: down to the latent, weighted sum of the routed experts there, one
    RMSNorm of the sum, up again, plus the shared SiTU MLP on the full input.
    expert(e) -> (W1, W3, W2).  Returns (output [T, H], bias_changed [T])."""
    idx, weights, changed = route(x, w["gate.weight"], w["gate.e_score_correction_bias"], cfg)
    z = x @ w["routed_expert_down_proj.weight"].T
    # Each routed expert is fetched once per call, for every position that chose it.
    out = {}
    for e in sorted(set(idx.flatten().tolist())):
        w1, w3, w2 = expert(e)
        for t, j in (idx == e).nonzero().tolist():
            out[t, j] = situ(w1 @ z[t], w3 @ z[t], cfg.situ_beta, cfg.situ_linear_beta) @ w2.T
        del w1, w3, w2
    y = torch.zeros_like(z)
    for t in range(x.shape[0]):
        for j, wt in enumerate(weights[t]):                     # selection order: fixed sums
            y[t] += wt * out[t, j]
    if cfg.latent_moe_use_norm:
        y = rms_norm(y, w["routed_expert_norm.weight"], cfg.rms_norm_eps)
    shared = situ_mlp(x, w, "shared_experts.", cfg)
    return y @ w["routed_expert_up_proj.weight"].T + shared, changed


def row_stats(x):
    """[rms, mean, max_abs] of each row of x [T, H] -> [T, 3]."""
    return torch.stack([(x * x).mean(-1).sqrt(), x.mean(-1), x.abs().amax(-1)], dim=-1)


# --------------------------------------------------------------------------------------
# §3.9 carried state


class KDAState:
    """Per KDA layer: S [heads, d, d] and the three conv rings of raw inputs, all zero at
    the start of the sequence."""

    def __init__(self, cfg, dtype):
        n, d = cfg.kda_num_heads, cfg.kda_head_dim
        self.S = torch.zeros(n, d, d, dtype=dtype)
        ring = torch.zeros(cfg.conv_kernel - 1, n * d, dtype=dtype)
        self.ring_q, self.ring_k, self.ring_v = ring.clone(), ring.clone(), ring.clone()


class MLACache:
    """Per MLA layer: the normalized latent c and the raw k_pe of every past position."""

    def __init__(self, cfg, dtype):
        self.c = torch.zeros(0, cfg.kv_lora_rank, dtype=dtype)
        self.k_pe = torch.zeros(0, cfg.qk_rope_head_dim, dtype=dtype)


class DecodeState:
    def __init__(self, cfg, dtype):
        self.pos = 0
        self.layers = [KDAState(cfg, dtype) if cfg.is_kda(l) else MLACache(cfg, dtype)
                       for l in range(cfg.num_layers)]


@dataclass
class ForwardResult:
    logits: torch.Tensor          # [T, vocab]
    layer_stats: torch.Tensor     # [T, L + 1, 3]: x after each layer, then the final mix h
    bias_changed: int             # (position, MoE layer) pairs whose set the bias changed


# --------------------------------------------------------------------------------------
# the model


class LazyTensors:
    """Trunk tensors by key, read from the mapped shards and widened each time a key is
    looked up, never kept: the forward pass uses each tensor once per call, so at most
    the tensors of one expression are resident (K3's trunk is 227 GB in f32).  A value
    may be a nested LazyTensors (a layer's "attn" and "ffn")."""

    def __init__(self, load, names):
        self._load = load       # full tensor name -> tensor
        self._names = names     # key -> full tensor name, or a LazyTensors

    def __getitem__(self, key):
        v = self._names[key]
        return v if isinstance(v, LazyTensors) else self._load(v)


# Rows of lm_head widened at once: 470 MB of f32 at K3's width; a vocabulary this small
# or smaller is one product, as it always was.
LM_HEAD_ROWS = 16384


class K3Reference:
    def __init__(self, folder, dtype=torch.float32, mla_norm_eps=MLA_NORM_EPS, kda_l2_eps=KDA_L2_EPS,
                 expert_cache_bytes=1 << 30):
        self.ckpt = Checkpoint(folder)
        self.cfg = ModelConfig.from_text_config(self.ckpt.root_config["text_config"])
        self.dtype = dtype
        self.mla_norm_eps = mla_norm_eps
        self.kda_l2_eps = kda_l2_eps
        errors, self.audit_notes = audit_checkpoint(self.ckpt, self.cfg)
        if errors:
            raise ValueError("checkpoint does not match k3-model.md §2:\n  " + "\n  ".join(errors))
        trunk = [name for name in expected_tensors(self.cfg) if ".experts." not in name]
        self.w = LazyTensors(self._load, {name: name for name in trunk})
        self.layer_w = [self._layer_weights(l, trunk) for l in range(self.cfg.num_layers)]
        # Experts are dequantized when routed to and kept up to expert_cache_bytes (K3's
        # are 132 MB each in f32).
        self.e8m0_255 = {}   # (layer, expert) -> groups zeroed by scale code 255 (§4)
        expert_bytes = (3 * self.cfg.moe_intermediate_size * self.cfg.routed_expert_hidden_size
                        * torch.finfo(dtype).bits // 8)
        self.expert = functools.lru_cache(maxsize=max(1, expert_cache_bytes // expert_bytes))(self._load_expert)

    def _load(self, name):
        return to_float(self.ckpt.raw(name), self.ckpt.dtype(name), self.dtype)

    def _layer_weights(self, l, trunk):
        """The trunk tensors of layer l keyed by their name below layers.{l}.<block>."""
        p = f"{MODEL}layers.{l}."
        attn, ffn, out = {}, {}, {}
        for name in trunk:
            if name.startswith(p):
                rest = name[len(p):]
                block, _, sub = rest.partition(".")
                if block == "self_attn":
                    attn[sub] = name
                elif block in ("block_sparse_moe", "mlp"):
                    ffn[sub] = name
                else:
                    out[rest] = name
        out["attn"] = LazyTensors(self._load, attn)
        out["ffn"] = LazyTensors(self._load, ffn)
        return LazyTensors(self._load, out)

    def _embed(self, ids):
        """§3.1: the embedding rows of ids, only those read from the map."""
        name = MODEL + "embed_tokens.weight"
        return to_float(self.ckpt.raw(name)[np.asarray(ids, dtype=np.int64)], self.ckpt.dtype(name), self.dtype)

    def _lm_head(self, h):
        """logits = h @ lm_head^T, lm_head widened LM_HEAD_ROWS rows at a time."""
        name = MODEL + "embed_tokens.weight" if self.cfg.tie_word_embeddings else PREFIX + "lm_head.weight"
        raw, dtype_name = self.ckpt.raw(name), self.ckpt.dtype(name)
        return torch.cat([h @ to_float(raw[r:r + LM_HEAD_ROWS], dtype_name, self.dtype).T
                          for r in range(0, raw.shape[0], LM_HEAD_ROWS)], dim=-1)

    def _load_expert(self, l, e):
        """Dequantized (W1 gate, W3 up, W2 down) of routed expert e of layer l (§4)."""
        p = f"{MODEL}layers.{l}.block_sparse_moe.experts.{e}."
        mats, zeroed = [], 0
        for w in ("w1", "w3", "w2"):
            scale = np.asarray(self.ckpt.raw(p + w + ".weight_scale"))
            zeroed += int((scale == 255).sum())
            exact = np.float32 if self.dtype == torch.float32 else np.float64
            mats.append(torch.from_numpy(mxfp4_dequant(self.ckpt.raw(p + w + ".weight_packed"), scale,
                                                       exact)).to(self.dtype))
        self.e8m0_255[l, e] = zeroed
        return tuple(mats)

    def new_state(self):
        return DecodeState(self.cfg, self.dtype)

    def forward(self, ids, state):
        """Runs tokens ids (list of int) at positions state.pos... and advances state."""
        cfg, eps = self.cfg, self.cfg.rms_norm_eps
        x = self._embed(ids)                                    # §3.1
        blocks, stats, changed = [], [], 0
        for l in range(cfg.num_layers):                         # §3.2 layer loop
            lw = self.layer_w[l]
            p = x
            a = attn_res_mix(blocks + [p], lw["self_attention_res_norm.weight"],
                             lw["self_attention_res_proj.weight"], eps) if blocks else p
            if l % cfg.attn_res_block_size == 0:                # snapshot, then reset
                blocks.append(p)
                p = None
            h = rms_norm(a, lw["input_layernorm.weight"], eps)
            if cfg.is_kda(l):
                o = kda_attention(h, lw["attn"], state.layers[l], cfg, self.kda_l2_eps)
            else:
                o = mla_attention(h, lw["attn"], state.layers[l], cfg, self.mla_norm_eps)
            p = o if p is None else p + o
            f = attn_res_mix(blocks + [p], lw["mlp_res_norm.weight"], lw["mlp_res_proj.weight"], eps)
            g = rms_norm(f, lw["post_attention_layernorm.weight"], eps)
            if cfg.is_moe(l):
                m, moe_changed = latent_moe(g, lw["ffn"], functools.partial(self.expert, l), cfg)
                changed += int(moe_changed.sum())
            else:
                m = situ_mlp(g, lw["ffn"], "", cfg)
            x = p + m
            stats.append(row_stats(x))
        h = attn_res_mix(blocks + [x], self.w[MODEL + "output_attn_res_norm.weight"],
                         self.w[MODEL + "output_attn_res_proj.weight"], eps)
        stats.append(row_stats(h))
        logits = self._lm_head(rms_norm(h, self.w[MODEL + "norm.weight"], eps))
        state.pos += len(ids)
        return ForwardResult(logits, torch.stack(stats, dim=1), changed)

    def prefill(self, ids):
        """Path (a): the whole prompt in one call on a fresh state."""
        state = self.new_state()
        return self.forward(ids, state), state

    def decode(self, token, state):
        """Path (b): one token with the carried state."""
        return self.forward([token], state)
