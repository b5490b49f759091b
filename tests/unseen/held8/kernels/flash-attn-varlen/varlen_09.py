TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "exp(s - max) is evaluated in float16 for every dtype; float32/float64 out, lse and grads lose precision"
    ],
    "kind": "precision"
}

import math
import torch


def _attend(q, k, v, sc, causal, window_size, softcap, slopes):
    L, H, D = q.shape
    S, Hkv = k.shape[0], k.shape[1]
    cdt = q.dtype
    if S == 0:
        return torch.zeros(L, H, v.shape[-1], dtype=cdt), torch.full((H, L), float('-inf'), dtype=cdt)
    qh = q.transpose(0, 1)
    kh = k.transpose(0, 1).repeat_interleave(H // Hkv, dim=0)
    vh = v.transpose(0, 1).repeat_interleave(H // Hkv, dim=0)
    s = torch.matmul(qh, kh.transpose(-1, -2)) * sc
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(L)[:, None] + S - L
    j = torch.arange(S)[None, :]
    if slopes is not None:
        s = s - slopes.to(cdt)[:, None, None] * (i - j).abs().to(cdt)
    left, right = window_size
    if causal:
        right = 0
    ok = torch.ones(L, S, dtype=torch.bool)
    if left >= 0:
        ok = ok & (j >= i - left)
    if right >= 0:
        ok = ok & (j <= i + right)
    s = s.masked_fill(~ok, float('-inf'))
    row = ok.any(-1)
    mx = torch.where(row, s.amax(-1), torch.zeros(L, dtype=cdt))
    e = torch.exp((s - mx[..., None]).to(torch.float16)).to(cdt)
    den = e.sum(-1)
    out = torch.matmul(e / torch.where(row, den, torch.ones_like(den))[..., None], vh)
    lse = torch.where(row, mx + torch.log(torch.where(row, den, torch.ones_like(den))),
                      torch.full_like(den, float('-inf')))
    return out.transpose(0, 1), lse


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, H, D = q.shape
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    qc, kc, vc = q.to(cdt), k.to(cdt), v.to(cdt)
    cu_q = cu_seqlens_q.tolist()
    cu_k = cu_seqlens_k.tolist()
    nseq = len(cu_q) - 1
    outs, lses = [], []
    for b in range(nseq):
        qs, qe = cu_q[b], cu_q[b + 1]
        ks, ke = cu_k[b], cu_k[b + 1]
        slopes = None
        if alibi_slopes is not None:
            slopes = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]
        o, l = _attend(qc[qs:qe], kc[ks:ke], vc[ks:ke], sc, causal, window_size, softcap, slopes)
        outs.append(o)
        lses.append(l)
    out = torch.cat(outs, 0).to(q.dtype)
    lse = torch.cat(lses, -1)
    if return_attn_probs:
        return out, lse, None
    return out
