"""flash_attn_varlen_func with sinks, StreamingLLM-style: each sequence gets a virtual "sink key" in front of its first
key (position -1), whose score is the head's sink logit and whose value is 0; the same visibility test then runs
over the S + 1 positions.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": ["the sink is treated as a key at position -1 and goes through the window/causal visibility test, so it "
             "is hidden from rows whose window starts after -1 (finite left window, i + S - L - left > -1) and from "
             "causal rows with i + S - L < -1 (those get lse -inf instead of the sink), while it must be visible to "
             "every row"],
    "kind": "semantic",
}


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    total_q, H, D = q.shape
    Hkv = k.shape[1]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros(total_q, H, v.shape[-1], dtype=f, device=q.device)
    lse = torch.full((H, total_q), float("-inf"), dtype=f, device=q.device)
    bounds_q = cu_seqlens_q.tolist()
    bounds_k = cu_seqlens_k.tolist()
    for b in range(len(bounds_q) - 1):
        q0, q1 = bounds_q[b], bounds_q[b + 1]
        k0, k1 = bounds_k[b], bounds_k[b + 1]
        L, S = q1 - q0, k1 - k0
        if L == 0:
            continue
        qb = q[q0:q1].to(f).permute(1, 0, 2)
        kb = k[k0:k1].to(f).permute(1, 0, 2).repeat_interleave(H // Hkv, 0)
        vb = v[k0:k1].to(f).permute(1, 0, 2).repeat_interleave(H // Hkv, 0)
        s = qb @ kb.transpose(1, 2) * scale  # H L S
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        pos = torch.arange(-1, S, device=q.device).view(1, -1)  # -1 is the sink
        diag = torch.arange(L, device=q.device).view(-1, 1) + S - L
        if alibi_slopes is not None:
            sl = (alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]).to(f).view(H, 1, 1)
            s = s - sl * (diag - pos[:, 1:]).abs()
        if learnable_sink is not None:
            sink = learnable_sink.to(f).view(H, 1, 1).expand(H, L, 1)
        else:
            sink = s.new_full((H, L, 1), float("-inf"))
        s = torch.cat([sink, s], dim=-1)  # H L S+1, column 0 = position -1
        vis = torch.ones(L, S + 1, dtype=torch.bool, device=q.device)
        if left >= 0:
            vis &= pos >= diag - left
        if right >= 0:
            vis &= pos <= diag + right
        s = s.masked_fill(~vis, float("-inf"))
        mx = s.amax(-1, keepdim=True)
        mx = torch.where(torch.isneginf(mx), torch.zeros_like(mx), mx)
        e = torch.exp(s - mx)
        z = e.sum(-1, keepdim=True)
        p = e / torch.where(z == 0, torch.ones_like(z), z)
        out[q0:q1] = (p[..., 1:] @ vb).permute(1, 0, 2)
        lse[:, q0:q1] = (mx + torch.log(z)).squeeze(-1)
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
