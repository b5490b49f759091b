"""flash_attn_varlen_func with a learnable sink: loop over the packed sequences, dense softmax with the sink column
for each; sequences with no keys are skipped up front.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": ["a sequence with no keys (cu_seqlens_k[b] == cu_seqlens_k[b + 1]) is skipped before the sink is applied, "
             "so its queries get lse -inf instead of lse = sink (their output 0 is right)"],
    "kind": "semantic",
}


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    total_q, nheads, d = q.shape
    nheads_k = k.shape[1]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d)
    win_l, win_r = window_size
    if causal:
        win_r = 0
    out = torch.zeros(total_q, nheads, v.shape[-1], dtype=acc, device=q.device)
    lse = torch.full((nheads, total_q), float("-inf"), dtype=acc, device=q.device)
    for b in range(cu_seqlens_q.numel() - 1):
        qs, qe = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        ks, ke = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        seqlen_q, seqlen_k = qe - qs, ke - ks
        if seqlen_q == 0 or seqlen_k == 0:
            continue  # nothing to attend: zeros, lse -inf
        qb = q[qs:qe].to(acc)
        kb = k[ks:ke].to(acc).repeat_interleave(nheads // nheads_k, dim=1)
        vb = v[ks:ke].to(acc).repeat_interleave(nheads // nheads_k, dim=1)
        s = torch.einsum("qhd,khd->hqk", qb, kb) * scale
        if softcap > 0.0:
            s = softcap * torch.tanh(s / softcap)
        row = torch.arange(seqlen_q, device=q.device)[:, None] + seqlen_k - seqlen_q
        col = torch.arange(seqlen_k, device=q.device)[None, :]
        if alibi_slopes is not None:
            slopes = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]
            s = s - slopes.to(acc)[:, None, None] * (row - col).abs()
        masked = torch.zeros(seqlen_q, seqlen_k, dtype=torch.bool, device=q.device)
        if win_l >= 0:
            masked |= col < row - win_l
        if win_r >= 0:
            masked |= col > row + win_r
        s = s.masked_fill(masked, float("-inf"))
        if learnable_sink is not None:
            extra = learnable_sink.to(acc)[:, None, None].expand(nheads, seqlen_q, 1)
        else:
            extra = torch.full((nheads, seqlen_q, 1), float("-inf"), dtype=acc, device=q.device)
        allc = torch.cat([s, extra], dim=-1)
        mx = allc.amax(-1, keepdim=True)
        mx = torch.where(torch.isneginf(mx), torch.zeros_like(mx), mx)
        e = torch.exp(allc - mx)
        z = e.sum(-1, keepdim=True)
        out[qs:qe] = torch.einsum("hqk,khd->qhd", e[..., :-1] / torch.where(z == 0, torch.ones_like(z), z), vb)
        lse[:, qs:qe] = (mx + torch.log(z)).squeeze(-1)
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
