"""Varlen attention, one sequence at a time; GQA by expanding the kv heads with a broadcast view (no copy per head).

Soft-capping follows Gemma-2 (tanh squashing of the logits), then ALiBi, masks and a guarded float32 softmax.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "the soft-cap is computed as softcap * tanh(s) without dividing s by softcap inside the tanh, so every "
        "softcap > 0 result is wrong",
        "the kv heads are broadcast as k[:, None].expand(S, H // Hkv, Hkv, D).reshape(S, H, D), which tiles them, "
        "so query head h reads kv head h % Hkv instead of h // (H // Hkv)",
    ],
    "kind": "two",
}


def _expand_heads(x, n_heads):
    S, Hkv, D = x.shape
    return x[:, None].expand(S, n_heads // Hkv, Hkv, D).reshape(S, n_heads, D)


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    total_q, H, D = q.shape
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    out = torch.zeros(total_q, H, v.shape[-1], dtype=ct, device=q.device)
    lse = torch.full((H, total_q), float("-inf"), dtype=ct, device=q.device)
    lo, hi = window_size
    if causal:
        hi = 0
    for b in range(cu_seqlens_q.numel() - 1):
        a0, a1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        c0, c1 = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        L, S = a1 - a0, c1 - c0
        if L == 0 or S == 0:
            continue
        kb = _expand_heads(k[c0:c1].to(ct), H)
        vb = _expand_heads(v[c0:c1].to(ct), H)
        s = torch.einsum("lhd,shd->hls", q[a0:a1].to(ct), kb) * scale
        if softcap > 0.0:
            s = softcap * torch.tanh(s)
        i = torch.arange(L, device=q.device)[:, None] + S - L
        j = torch.arange(S, device=q.device)[None, :]
        if alibi_slopes is not None:
            sl = (alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes).to(ct)
            s = s - sl[:, None, None] * (i - j).abs()
        vis = torch.ones(L, S, dtype=torch.bool, device=q.device)
        if lo >= 0:
            vis &= j >= i - lo
        if hi >= 0:
            vis &= j <= i + hi
        s = s.masked_fill(~vis, float("-inf"))
        row_lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - torch.nan_to_num(row_lse, neginf=0.0)[..., None])
        out[a0:a1] = torch.einsum("hls,shd->lhd", p, vb)
        lse[:, a0:a1] = row_lse
    out = out.to(q.dtype)
    return (out, lse, None) if return_attn_probs else out
