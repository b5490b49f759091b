"""Varlen flash attention on the whole packed token stream with a block-diagonal sequence mask (no per-sequence loop)."""
import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "the ALiBi distance is taken between packed global positions, |(cu_q[b] + i + len_k - len_q) - (cu_k[b] + j)|, "
        "instead of within-sequence positions |i + len_k - len_q - j|; it is right only when cu_seqlens_q[b] == "
        "cu_seqlens_k[b] for every sequence (the causal/window masks use the correct local positions)",
    ],
    "kind": "semantic",
}


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    dev = q.device
    wt = torch.float64 if q.dtype == torch.float64 else torch.float32
    Tq, H, D = q.shape
    Tk, Hkv, _ = k.shape
    B = cu_seqlens_q.numel() - 1
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    cq = cu_seqlens_q.long()
    ck = cu_seqlens_k.long()
    lq = cq[1:] - cq[:-1]
    lk = ck[1:] - ck[:-1]
    seq_q = torch.repeat_interleave(torch.arange(B, device=dev), lq, output_size=Tq)
    seq_k = torch.repeat_interleave(torch.arange(B, device=dev), lk, output_size=Tk)
    loc_q = torch.arange(Tq, device=dev) - cq[seq_q]
    loc_k = torch.arange(Tk, device=dev) - ck[seq_k]
    diag_q = loc_q + (lk - lq)[seq_q]
    glob_q = cq[seq_q] + diag_q
    glob_k = torch.arange(Tk, device=dev)

    qh = q.to(wt).transpose(0, 1)
    kh = k.to(wt).transpose(0, 1).repeat_interleave(H // Hkv, dim=0)
    vh = v.to(wt).transpose(0, 1).repeat_interleave(H // Hkv, dim=0)
    s = torch.matmul(qh, kh.transpose(-1, -2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        if alibi_slopes.dim() == 1:
            sl = alibi_slopes.to(wt).reshape(H, 1, 1).expand(H, Tq, 1)
        else:
            sl = alibi_slopes.to(wt)[seq_q].transpose(0, 1).unsqueeze(-1)
        s = s - sl * (glob_q[:, None] - glob_k[None, :]).abs().to(wt)
    ok = seq_q[:, None] == seq_k[None, :]
    left, right = window_size
    if causal:
        right = 0
    if left >= 0:
        ok &= loc_k[None, :] >= diag_q[:, None] - left
    if right >= 0:
        ok &= loc_k[None, :] <= diag_q[:, None] + right
    s = s.masked_fill(~ok, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse)).unsqueeze(-1))
    out = torch.matmul(p, vh).transpose(0, 1).to(q.dtype)
    if return_attn_probs:
        return out, lse.float(), None
    return out
