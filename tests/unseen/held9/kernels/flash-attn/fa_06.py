TRUTH = {'api': 'flash-attn',
 'bugs': ['causal=True only forces right = 0 when window_size[1] is -1; with causal and a positive right window '
          'the query also sees future keys (causal_window30_10)',
          'the output is cast to vh.dtype (the float32 compute dtype) instead of the input dtype, so bfloat16 '
          'inputs get a float32 output (every bf16 case, out)'],
 'kind': 'two'}

import math
import torch


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    dt = q.dtype
    cd = torch.float64 if dt == torch.float64 else torch.float32
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    qh = q.to(cd).permute(0, 2, 1, 3)
    kh = k.to(cd).permute(0, 2, 1, 3).repeat_interleave(H // Hkv, dim=1)
    vh = v.to(cd).permute(0, 2, 1, 3).repeat_interleave(H // Hkv, dim=1)
    s = torch.matmul(qh, kh.transpose(-1, -2)) * sc
    if softcap > 0:
        s = torch.tanh(s / softcap) * softcap
    qpos = torch.arange(L).view(L, 1) + (S - L)
    kpos = torch.arange(S).view(1, S)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(cd)
        sl = sl.view(1, H) if sl.dim() == 1 else sl
        s = s - sl.view(-1, H, 1, 1) * (qpos - kpos).abs().to(cd)
    left, right = window_size
    if causal and right < 0:
        right = 0
    ok = torch.ones(L, S, dtype=torch.bool)
    if left >= 0:
        ok = ok & (kpos >= qpos - left)
    if right >= 0:
        ok = ok & (kpos <= qpos + right)
    s = s.masked_fill(~ok, -math.inf)
    any_key = ok.any(dim=-1)
    m = s.detach().amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    den = e.sum(dim=-1, keepdim=True)
    p = e / torch.where(den > 0, den, torch.ones_like(den))
    out = torch.matmul(p, vh).permute(0, 2, 1, 3).to(vh.dtype)
    if not return_attn_probs:
        return out
    lse = (m + torch.log(den)).squeeze(-1)
    lse = torch.where(any_key, lse, torch.full_like(lse, -math.inf)).detach()
    return out, lse, None
