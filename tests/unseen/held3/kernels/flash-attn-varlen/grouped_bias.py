"""Varlen flash attention that walks the sequences and kv-head groups, attending all query heads of a group together."""
import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "ALiBi slopes are looked up by the kv-head index (slopes[h // (H // Hkv)]) instead of by the query head h, so "
        "with grouped-query attention (Hkv < H) query heads get another head's slope (right only when Hkv == H)",
        "when a window_size is given together with causal=True the causal limit is dropped: the window's right bound "
        "(-1 = unbounded) is used as is instead of being clamped to 0, so causal sliding-window attention sees future keys",
    ],
    "kind": "two",
}


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, H, D = q.shape
    Hkv = k.shape[1]
    G = H // Hkv
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    if tuple(window_size) != (-1, -1):
        left, right = window_size
    elif causal:
        left, right = -1, 0
    else:
        left, right = -1, -1
    out = torch.zeros(total_q, H, v.shape[-1], dtype=ct, device=q.device)
    lse = torch.full((H, total_q), float("-inf"), dtype=torch.float32, device=q.device)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        qs, qe, ks, ke = cq[b], cq[b + 1], ck[b], ck[b + 1]
        Lq, Lk = qe - qs, ke - ks
        if Lq == 0:
            continue
        qpos = torch.arange(Lq, device=q.device).view(-1, 1) + (Lk - Lq)
        kpos = torch.arange(Lk, device=q.device).view(1, -1)
        ok = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device)
        if left >= 0:
            ok &= kpos >= qpos - left
        if right >= 0:
            ok &= kpos <= qpos + right
        dist = (qpos - kpos).abs().to(ct)
        for hk in range(Hkv):
            heads = slice(hk * G, (hk + 1) * G)
            qg = q[qs:qe, heads].to(ct).transpose(0, 1)          # (G, Lq, D)
            kg = k[ks:ke, hk].to(ct)                               # (Lk, D)
            vg = v[ks:ke, hk].to(ct)
            s = torch.matmul(qg, kg.t()) * scale
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            if alibi_slopes is not None:
                sl = alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes
                s = s - sl[hk].to(ct) * dist
            s = s.masked_fill(~ok, float("-inf"))
            l = torch.logsumexp(s, dim=-1)
            p = torch.exp(s - torch.where(torch.isfinite(l), l, torch.zeros_like(l)).unsqueeze(-1))
            out[qs:qe, heads] = torch.matmul(p, vg).transpose(0, 1)
            lse[heads, qs:qe] = l.float()
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
