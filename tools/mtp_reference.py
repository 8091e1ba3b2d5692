#!/usr/bin/env python3
"""Reference logits of the MTP head (shared/model-spec.md §2.8), in float32 PyTorch.

    python3 tools/mtp_reference.py MODEL_DIR OUT.safetensors [--reference REF.safetensors]

MODEL_DIR is a checkpoint with a head (`mtp.*`) in the official bf16 layout or the transformers one
(fused or per-expert experts); MLX 4-bit checkpoints are not read. The main model's inputs come from
REF (default: MODEL_DIR/../reference.safetensors, the fixtures' file): its `tokens` and `hidden`
(the last entry is the last layer's output before the final norm). Head row t takes the main
model's final-normed hidden state at t and the token at t + 1, at position t; its attention is causal
over the head's rows. OUT gets `tokens` (int32 [T]) and `logits` (float32 [T - 1, vocab]), row t
being the head's logits for the token at t + 2.

Written from the spec, not from transformers (which ignores `mtp.*`); needs torch and safetensors.
"""
import argparse
import json
import math
import os

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file


def load_tensors(model_dir, wanted):
    """The tensors whose names pass `wanted`, as float32 (from every *.safetensors in the directory)."""
    out = {}
    for name in sorted(os.listdir(model_dir)):
        if name.endswith(".safetensors"):
            with safe_open(os.path.join(model_dir, name), framework="pt") as f:
                for key in f.keys():
                    if wanted(key):
                        out[key] = f.get_tensor(key).float()
    return out


def rms_norm_1p(x, w, eps):
    """Zero-centred RMSNorm: x / rms(x) * (1 + w)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


def rope(x, positions, rotary_dim, theta):
    """NeoX rotate-half RoPE on the first rotary_dim dims of each head; x [T, heads, head_dim]."""
    half = rotary_dim // 2
    inv_freq = theta ** (-torch.arange(0, half, dtype=torch.float64) * 2.0 / rotary_dim)
    angle = positions.double()[:, None] * inv_freq[None, :]
    cos = torch.cat([angle.cos(), angle.cos()], -1).float()[:, None, :]
    sin = torch.cat([angle.sin(), angle.sin()], -1).float()[:, None, :]
    r, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    rotated = torch.cat([-r[..., half:], r[..., :half]], -1)
    return torch.cat([r * cos + rotated * sin, rest], -1)


def gated_attention(x, W, p, c):
    """§2.3 over rows x [T, H] at positions 0..T-1, causal."""
    T = x.shape[0]
    nq, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    eps = c["rms_norm_eps"]
    qg = (x @ W[p + "self_attn.q_proj.weight"].T).view(T, nq, 2 * hd)
    q, gate = qg[..., :hd], qg[..., hd:]
    k = (x @ W[p + "self_attn.k_proj.weight"].T).view(T, nkv, hd)
    v = (x @ W[p + "self_attn.v_proj.weight"].T).view(T, nkv, hd)
    q = rms_norm_1p(q, W[p + "self_attn.q_norm.weight"], eps)
    k = rms_norm_1p(k, W[p + "self_attn.k_norm.weight"], eps)
    rotary_dim = int(hd * c["partial_rotary_factor"])
    pos = torch.arange(T)
    q, k = rope(q, pos, rotary_dim, c["rope_theta"]), rope(k, pos, rotary_dim, c["rope_theta"])
    group = nq // nkv
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # q head h reads kv head h // group
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    o = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)
    o = o * torch.sigmoid(gate)
    return o.reshape(T, nq * hd) @ W[p + "self_attn.o_proj.weight"].T


def moe(x, W, p, c):
    """§2.6: softmax over all experts, top-k renormalised, SwiGLU experts, sigmoid-gated shared expert."""
    E, k = c["num_experts"], c["num_experts_per_tok"]
    probs = (x @ W[p + "mlp.gate.weight"].T).softmax(-1)
    top_w, top_i = probs.topk(k, dim=-1)
    top_w = top_w / top_w.sum(-1, keepdim=True)
    if p + "mlp.experts.gate_up_proj" in W:
        gate_up, down = W[p + "mlp.experts.gate_up_proj"], W[p + "mlp.experts.down_proj"]
        I = gate_up.shape[1] // 2
        experts = [(gate_up[e, :I], gate_up[e, I:], down[e]) for e in range(E)]
    else:
        q = p + "mlp.experts.{}."
        experts = [(W[q.format(e) + "gate_proj.weight"], W[q.format(e) + "up_proj.weight"],
                    W[q.format(e) + "down_proj.weight"]) for e in range(E)]

    def swiglu(row, g, u, d):
        return (F.silu(row @ g.T) * (row @ u.T)) @ d.T

    y = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(k):
            y[t] += top_w[t, j] * swiglu(x[t], *experts[int(top_i[t, j])])
    s = p + "mlp.shared_expert."
    shared = swiglu(x, W[s + "gate_proj.weight"], W[s + "up_proj.weight"], W[s + "down_proj.weight"])
    return y + torch.sigmoid(x @ W[p + "mlp.shared_expert_gate.weight"].T) * shared


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--reference", help="tokens and hidden states (default: MODEL_DIR/../reference.safetensors)")
    args = ap.parse_args()
    ref_path = args.reference or os.path.join(os.path.dirname(os.path.abspath(args.model_dir)), "reference.safetensors")

    with open(os.path.join(args.model_dir, "config.json")) as f:
        config = json.load(f)
    c = dict(config.get("text_config", config))
    rope_params = c.get("rope_parameters") or {}
    c.setdefault("rope_theta", rope_params.get("rope_theta", 1e7))
    c.setdefault("partial_rotary_factor", rope_params.get("partial_rotary_factor", 0.25))
    eps = c["rms_norm_eps"]

    W = load_tensors(args.model_dir, lambda n: n.startswith("mtp.") or n.endswith("embed_tokens.weight")
                     or n in ("lm_head.weight", "model.language_model.norm.weight", "model.norm.weight"))
    embed = W.get("model.language_model.embed_tokens.weight", W.get("model.embed_tokens.weight"))
    final_norm = W.get("model.language_model.norm.weight", W.get("model.norm.weight"))
    lm_head = W["lm_head.weight"] if "lm_head.weight" in W else embed  # tied when absent
    if embed is None or final_norm is None or "mtp.fc.weight" not in W:
        raise SystemExit(f"{args.model_dir}: needs the official or transformers layout with an mtp.* head")

    with safe_open(ref_path, framework="pt") as f:
        tokens = f.get_tensor("tokens").long()
        hidden = f.get_tensor("hidden").float()[-1]  # the last layer's output, before the final norm

    with torch.no_grad():
        h = rms_norm_1p(hidden, final_norm, eps)[:-1]  # main model's final-normed state at t = 0..T-2
        e = embed[tokens[1:]]                          # the token at t + 1
        joined = torch.cat([rms_norm_1p(e, W["mtp.pre_fc_norm_embedding.weight"], eps),
                            rms_norm_1p(h, W["mtp.pre_fc_norm_hidden.weight"], eps)], -1)
        x = joined @ W["mtp.fc.weight"].T
        p = "mtp.layers.0."
        x = x + gated_attention(rms_norm_1p(x, W[p + "input_layernorm.weight"], eps), W, p, c)
        x = x + moe(rms_norm_1p(x, W[p + "post_attention_layernorm.weight"], eps), W, p, c)
        logits = rms_norm_1p(x, W["mtp.norm.weight"], eps) @ lm_head.T

    save_file({"tokens": tokens.to(torch.int32).contiguous(), "logits": logits.contiguous()}, args.out)
    print(f"wrote {args.out}: head logits {tuple(logits.shape)} from {ref_path}")


if __name__ == "__main__":
    main()
