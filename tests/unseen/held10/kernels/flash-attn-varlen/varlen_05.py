TRUTH = {'api': 'flash-attn-varlen', 'bugs': ['The lse buffer is initialised to 0 instead of -inf, so queries of a sequence with no keys report lse 0; shows on the cases with empty key sequences.'], 'kind': 'semantic'}
import math
import torch


def _attend(q, k, v, sc, causal, left, right, softcap, slopes, cdt):
    L, H, D = q.shape
    S, Hkv = k.shape[0], k.shape[1]
    g = H // Hkv
    qh = q.to(cdt).transpose(0, 1)
    kh = k.to(cdt).transpose(0, 1).repeat_interleave(g, 0)
    vh = v.to(cdt).transpose(0, 1).repeat_interleave(g, 0)
    s = torch.matmul(qh, kh.transpose(-1, -2)) * sc
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    qpos = torch.arange(L)[:, None] + (S - L)
    kpos = torch.arange(S)[None, :]
    if slopes is not None:
        s = s - slopes.to(cdt)[:, None, None] * (qpos - kpos).abs().to(cdt)
    if causal:
        right = 0
    keep = torch.ones(L, S, dtype=torch.bool)
    if left >= 0:
        keep = keep & (kpos >= qpos - left)
    if right >= 0:
        keep = keep & (kpos <= qpos + right)
    s = s.masked_fill(~keep, -math.inf)
    m = s.detach().amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    den = e.sum(-1, keepdim=True)
    den_safe = torch.where(den > 0, den, torch.ones_like(den))
    out = torch.matmul(e / den_safe, vh)
    lse = torch.where(den > 0, m + torch.log(den_safe), torch.full_like(den, -math.inf)).squeeze(-1)
    return out.transpose(0, 1), lse.detach()


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, H, D = q.shape
    cdt = torch.float32 if q.dtype == torch.bfloat16 else q.dtype
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    B = cu_seqlens_q.numel() - 1
    left, right = window_size
    lse = torch.zeros((H, total_q), dtype=cdt)
    pieces = []
    for b in range(B):
        qs, qe = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        ks, ke = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        if qe == qs:
            continue
        if ke == ks:
            pieces.append(torch.zeros(qe - qs, H, v.shape[-1], dtype=cdt))
            continue
        sl = None
        if alibi_slopes is not None:
            sl = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]
        o, l = _attend(q[qs:qe], k[ks:ke], v[ks:ke], sc, causal, left, right, softcap, sl, cdt)
        pieces.append(o)
        lse[:, qs:qe] = l
    out = torch.cat(pieces, 0) if pieces else torch.zeros(0, H, v.shape[-1], dtype=cdt)
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
