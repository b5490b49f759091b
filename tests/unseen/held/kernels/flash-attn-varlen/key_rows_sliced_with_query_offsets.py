"""flash_attn_varlen_func for self-attention prefill: loop over sequences, dense float32 attention per sequence.

Each sequence's rows are located through the cumulative offsets.
"""


import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "the key/value rows of sequence b are sliced with cu_seqlens_q[b]:cu_seqlens_q[b] + S_b instead of "
        "cu_seqlens_k[b]:cu_seqlens_k[b+1], so whenever the query and key packings differ sequences read other "
        "sequences' (or missing) keys"
    ],
    "kind": "semantic",
}


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    total_q, H, D = q.shape
    Hkv = k.shape[1]
    wt = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else D ** -0.5
    out = q.new_zeros(total_q, H, v.shape[-1], dtype=wt)
    lse = q.new_full((H, total_q), float("-inf"), dtype=wt)
    for b in range(cu_seqlens_q.numel() - 1):
        start = int(cu_seqlens_q[b])
        Lb = int(cu_seqlens_q[b + 1]) - start
        Sb = int(cu_seqlens_k[b + 1]) - int(cu_seqlens_k[b])
        if Lb == 0 or Sb == 0:
            continue
        qb = q[start:start + Lb].to(wt).transpose(0, 1)                              # (H, L, D)
        kb = k[start:start + Sb].to(wt).transpose(0, 1).repeat_interleave(H // Hkv, 0)
        vb = v[start:start + Sb].to(wt).transpose(0, 1).repeat_interleave(H // Hkv, 0)
        s = qb @ kb.transpose(-1, -2) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(Lb, device=q.device)[:, None] + kb.shape[1] - Lb
        j = torch.arange(kb.shape[1], device=q.device)[None, :]
        if alibi_slopes is not None:
            sl = alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes
            s = s - sl.to(wt)[:, None, None] * (i - j).abs()
        lo, hi = window_size
        if causal:
            hi = 0
        vis = torch.ones_like(s[0], dtype=torch.bool)
        if lo >= 0:
            vis &= j >= i - lo
        if hi >= 0:
            vis &= j <= i + hi
        s = s.masked_fill(~vis, float("-inf"))
        m = s.amax(-1, keepdim=True).nan_to_num(neginf=0.0)
        e = torch.exp(s - m)
        z = e.sum(-1, keepdim=True)
        out[start:start + Lb] = ((e / z.clamp_min(1e-38)) @ vb).transpose(0, 1)
        lse[:, start:start + Lb] = (m + z.log()).squeeze(-1)
    out = out.to(q.dtype)
    return (out, lse, None) if return_attn_probs else out
