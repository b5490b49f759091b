"""flash_attn_varlen_func with sinks added on top of a sink-less varlen kernel: per sequence the usual (out, lse) over
the keys, then the sink is merged in: lse = log(exp(lse_keys) + exp(sink)), out *= exp(lse_keys - lse).
"""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": ["the sink is merged with log(exp(lse_keys) + exp(sink)) instead of logaddexp, so in float32 the merge "
             "overflows to inf when lse_keys or the sink exceeds ~88 and those rows get lse inf and output 0 or NaN"],
    "kind": "precision",
}


def _attend(qb, kb, vb, scale, causal, window_size, softcap, slopes):
    """sink-less attention of one sequence; qb (L, H, D), kb/vb (S, H, D) -> out (L, H, D), lse (H, L)."""
    L, S = qb.shape[0], kb.shape[0]
    if S == 0:
        return qb.new_zeros(L, qb.shape[1], vb.shape[-1]), qb.new_full((qb.shape[1], L), float("-inf"))
    s = torch.einsum("lhd,shd->hls", qb, kb) * scale
    if softcap > 0.0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(L, device=qb.device).view(-1, 1) + S - L
    j = torch.arange(S, device=qb.device).view(1, -1)
    if slopes is not None:
        s = s - slopes.view(-1, 1, 1) * (i - j).abs()
    left, right = window_size
    if causal:
        right = 0
    vis = torch.ones(L, S, dtype=torch.bool, device=qb.device)
    if left >= 0:
        vis &= j >= i - left
    if right >= 0:
        vis &= j <= i + right
    s = s.masked_fill(~vis, float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    z = e.sum(-1, keepdim=True)
    out = torch.einsum("hls,shd->lhd", e / torch.where(z == 0, torch.ones_like(z), z), vb)
    return out, (m + torch.log(z)).squeeze(-1)


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    total_q, H, D = q.shape
    rep = H // k.shape[1]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    out = torch.zeros(total_q, H, v.shape[-1], dtype=cdt, device=q.device)
    lse = torch.full((H, total_q), float("-inf"), dtype=cdt, device=q.device)
    for b in range(cu_seqlens_q.numel() - 1):
        qa, qb_ = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        ka, kb_ = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        if qb_ == qa:
            continue
        slopes = None
        if alibi_slopes is not None:
            slopes = (alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]).to(cdt)
        o, l_keys = _attend(q[qa:qb_].to(cdt), k[ka:kb_].to(cdt).repeat_interleave(rep, 1),
                            v[ka:kb_].to(cdt).repeat_interleave(rep, 1), scale, causal, window_size, softcap, slopes)
        if learnable_sink is not None:
            sink = learnable_sink.to(cdt).view(H, 1)
            l_all = torch.log(torch.exp(l_keys) + torch.exp(sink))
            o = o * torch.exp(l_keys - l_all).transpose(0, 1).unsqueeze(-1)
        else:
            l_all = l_keys
        out[qa:qb_] = o
        lse[:, qa:qb_] = l_all
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
