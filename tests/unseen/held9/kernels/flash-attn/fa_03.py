TRUTH = {'api': 'flash-attn',
 'bugs': ['(B, H) alibi_slopes are read as the flattened row 0 (alibi_slopes.flatten()[h]) so every batch uses '
          "batch 0's slopes; wrong for alibi_BH_causal",
          'query head h reads kv head h % Hkv instead of h // (H // Hkv); wrong when 1 < Hkv < H (causal_L<S_gqa, '
          'noncausal_L<S_gqa, window32_16_gqa, softcap_alibi_window)'],
 'kind': 'two'}

import math
import torch


def _band(L, S, causal, window_size):
    left, right = window_size
    if causal:
        right = 0
    pos = torch.arange(L) + (S - L)
    lo = pos - left if left >= 0 else torch.full((L,), -1 << 30)
    hi = pos + right if right >= 0 else torch.full((L,), 1 << 30)
    return lo, hi


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    dt = q.dtype
    cd = torch.float64 if dt == torch.float64 else torch.float32
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    g = H // Hkv
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    lo, hi = _band(L, S, causal, window_size)
    j = torch.arange(S).view(1, S)
    ok = (j >= lo.view(L, 1)) & (j <= hi.view(L, 1))
    any_key = ok.any(dim=1, keepdim=True)
    dist = (torch.arange(L).view(L, 1) + (S - L) - j).abs().to(cd)
    outs, lses = [], []
    for b in range(B):
        ob, lb = [], []
        for h in range(H):
            qbh = q[b, :, h, :].to(cd)
            kbh = k[b, :, h % Hkv, :].to(cd)
            vbh = v[b, :, h % Hkv, :].to(cd)
            s = torch.matmul(qbh, kbh.t()) * sc
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            if alibi_slopes is not None:
                slope = alibi_slopes.flatten()[h]
                s = s - slope.to(cd) * dist
            s = s.masked_fill(~ok, -math.inf)
            s = torch.where(any_key, s, torch.zeros_like(s))
            lse = torch.logsumexp(s, dim=-1, keepdim=True)
            p = torch.exp(s - lse) * any_key
            ob.append(torch.matmul(p, vbh))
            lb.append(torch.where(any_key, lse, torch.full_like(lse, -math.inf)).squeeze(-1))
        outs.append(torch.stack(ob, dim=1))
        lses.append(torch.stack(lb, dim=0))
    out = torch.stack(outs, dim=0).to(dt)
    if return_attn_probs:
        return out, torch.stack(lses, dim=0).detach(), None
    return out
