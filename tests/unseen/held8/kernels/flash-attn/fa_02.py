TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "left window edge is exclusive: keys from i + S - L - left + 1 instead of - left; wrong on every case with a finite left window"
    ],
    "kind": "semantic"
}

import math
import torch


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    group = H // Hkv
    left, right = window_size
    if causal:
        right = 0
    pos_q = torch.arange(L) + S - L
    pos_k = torch.arange(S)
    lo = pos_q - left + 1 if left >= 0 else torch.full((L,), -10 ** 9)
    hi = pos_q + right if right >= 0 else torch.full((L,), 10 ** 9)
    vis = (pos_k[None, :] >= lo[:, None]) & (pos_k[None, :] <= hi[:, None])
    dist = (pos_q[:, None] - pos_k[None, :]).abs().to(cdt)
    outs, lses = [], []
    for b in range(B):
        ob, lb = [], []
        for h in range(H):
            kv = h // group
            qq = q[b, :, h].to(cdt)
            kk = k[b, :, kv].to(cdt)
            vv = v[b, :, kv].to(cdt)
            s = qq @ kk.t() * sc
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            if alibi_slopes is not None:
                slope = alibi_slopes[h] if alibi_slopes.dim() == 1 else alibi_slopes[b, h]
                s = s - slope.to(cdt) * dist
            s = torch.where(vis, s, torch.full_like(s, float('-inf')))
            mx = s.max(dim=-1, keepdim=True).values
            mx = torch.nan_to_num(mx, neginf=0.0)
            e = torch.exp(s - mx)
            den = e.sum(-1, keepdim=True)
            o = (e @ vv) / den.clamp_min(torch.finfo(cdt).tiny)
            lse = torch.log(den.squeeze(-1)) + mx.squeeze(-1)
            ob.append(o)
            lb.append(lse)
        outs.append(torch.stack(ob, dim=1))
        lses.append(torch.stack(lb, dim=0))
    out = torch.stack(outs).to(q.dtype)
    lse = torch.stack(lses)
    if return_attn_probs:
        return out, lse, None
    return out
