TRUTH = {'api': 'flash-attn-varlen',
 'bugs': ['GQA expansion uses .repeat (tiling kv heads) instead of repeat_interleave, so query head h reads kv '
          'head h % Hkv; wrong when 1 < Hkv < H (causal_L<S_gqa, noncausal_mixed, window16_8_gqa)'],
 'kind': 'semantic'}

import math
import torch


def _one(q, k, v, sc, causal, window_size, softcap, slopes, cd):
    # q (L, H, D), k/v (S, Hkv, D)
    L, H, D = q.shape
    S, Hkv = k.shape[0], k.shape[1]
    qh = q.to(cd).transpose(0, 1)
    kh = k.to(cd).transpose(0, 1).repeat(H // Hkv, 1, 1)
    vh = v.to(cd).transpose(0, 1).repeat(H // Hkv, 1, 1)
    s = torch.matmul(qh, kh.transpose(-1, -2)) * sc
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    qpos = torch.arange(L).view(L, 1) + (S - L)
    kpos = torch.arange(S).view(1, S)
    if slopes is not None:
        s = s - slopes.to(cd).view(H, 1, 1) * (qpos - kpos).abs().to(cd)
    left, right = window_size
    if causal:
        right = 0
    ok = torch.ones(L, S, dtype=torch.bool)
    if left >= 0:
        ok = ok & (kpos >= qpos - left)
    if right >= 0:
        ok = ok & (kpos <= qpos + right)
    s = s.masked_fill(~ok, -math.inf)
    seen = ok.any(dim=-1)
    m = s.detach().amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    den = e.sum(dim=-1, keepdim=True)
    o = torch.matmul(e / torch.where(den > 0, den, torch.ones_like(den)), vh)
    lse = torch.where(seen, (m + torch.log(den)).squeeze(-1), torch.full((H, L), -math.inf, dtype=cd))
    return o.transpose(0, 1), lse


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    dt = q.dtype
    cd = torch.float64 if dt == torch.float64 else torch.float32
    total_q, H, D = q.shape
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    B = cu_seqlens_q.numel() - 1
    cq = cu_seqlens_q.tolist()
    ck = cu_seqlens_k.tolist()
    outs, lses = [], []
    for b in range(B):
        qs, qe, ks, ke = cq[b], cq[b + 1], ck[b], ck[b + 1]
        if qe == qs:
            continue
        if ke == ks:
            outs.append(torch.zeros(qe - qs, H, v.shape[-1], dtype=cd) + 0 * q[qs:qe, :, :1].to(cd))
            lses.append(torch.full((H, qe - qs), -math.inf, dtype=cd))
            continue
        sl = None
        if alibi_slopes is not None:
            sl = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]
        o, l = _one(q[qs:qe], k[ks:ke], v[ks:ke], sc, causal, window_size, softcap, sl, cd)
        outs.append(o)
        lses.append(l)
    out = torch.cat(outs, dim=0).to(dt)
    if return_attn_probs:
        return out, torch.cat(lses, dim=1).detach(), None
    return out
