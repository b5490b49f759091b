"""Varlen forward over a padded (B, max_seqlen) view: unpack, run dense masked attention, repack."""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "the ALiBi distance is computed from the tokens' row indices in the packed tensors ((cu_seqlens_q[b] + i + "
        "S_b - L_b) - (cu_seqlens_k[b] + j)) instead of their positions within the sequence, so the bias is shifted "
        "by cu_seqlens_q[b] - cu_seqlens_k[b] in every sequence where those offsets differ"
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
    B = cu_seqlens_q.numel() - 1
    ft = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    Lm, Sm = int(max_seqlen_q), int(max_seqlen_k)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    qp = torch.zeros(B, Lm, H, D, dtype=ft, device=q.device)
    kp = torch.zeros(B, Sm, Hkv, D, dtype=ft, device=q.device)
    vp = torch.zeros(B, Sm, Hkv, D, dtype=ft, device=q.device)
    Ls = torch.tensor([cq[b + 1] - cq[b] for b in range(B)], device=q.device)
    Ss = torch.tensor([ck[b + 1] - ck[b] for b in range(B)], device=q.device)
    for b in range(B):
        qp[b, : Ls[b]] = q[cq[b]:cq[b + 1]].to(ft)
        kp[b, : Ss[b]] = k[ck[b]:ck[b + 1]].to(ft)
        vp[b, : Ss[b]] = v[ck[b]:ck[b + 1]].to(ft)
    rep = H // Hkv
    kp = kp.repeat_interleave(rep, 2)
    vp = vp.repeat_interleave(rep, 2)
    s = torch.einsum("blhd,bshd->bhls", qp, kp) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    li = torch.arange(Lm, device=q.device)
    si = torch.arange(Sm, device=q.device)
    qpos = li[None, :] + (Ss - Ls)[:, None]                 # (B, Lm) on the key axis
    rel = qpos[:, :, None] - si[None, None, :]              # (B, Lm, Sm)
    valid = (li[None, :, None] < Ls[:, None, None]) & (si[None, None, :] < Ss[:, None, None])
    left, right = window_size
    if causal:
        right = 0
    if left >= 0:
        valid &= rel <= left
    if right >= 0:
        valid &= rel >= -right
    if alibi_slopes is not None:
        a = alibi_slopes.to(ft)
        a = a.expand(B, H) if a.dim() == 1 else a
        gq = li[None, :] + torch.tensor(cq[:-1], device=q.device)[:, None]
        gk = si[None, :] + torch.tensor(ck[:-1], device=q.device)[:, None]
        grel = (gq[:, :, None] + (Ss - Ls)[:, None, None]) - gk[:, None, :]
        s = s - a[:, :, None, None] * grel.abs()[:, None].to(ft)
    s = s.masked_fill(~valid[:, None], float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None])
    o = torch.einsum("bhls,bshd->blhd", p, vp)
    out = torch.empty_like(q)
    lse_out = torch.full((H, total_q), float("-inf"), dtype=ft, device=q.device)
    for b in range(B):
        out[cq[b]:cq[b + 1]] = o[b, : Ls[b]].to(q.dtype)
        lse_out[:, cq[b]:cq[b + 1]] = lse[b, :, : Ls[b]]
    if return_attn_probs:
        return out, lse_out, None
    return out
