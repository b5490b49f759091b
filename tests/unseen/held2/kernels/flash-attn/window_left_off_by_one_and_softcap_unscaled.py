"""Dense flash-attention forward: float32 score matrix per (batch, head), softcap and ALiBi applied elementwise,
local/causal window mask from the bottom-right diagonal, logsumexp-normalised softmax."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the left window bound keeps keys j > i + Sk - Lq - left (strict), dropping the key exactly `left` "
        "positions back; flash keeps j >= i + Sk - Lq - left",
        "softcap is applied to the unscaled q.k product and the scale multiplied afterwards "
        "(scale * softcap * tanh(qk / softcap)); it should be softcap * tanh(scale * qk / softcap)",
    ],
    "kind": "two",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    in_dt = q.dtype
    f = torch.float64 if in_dt == torch.float64 else torch.float32
    B, Lq, H, D = q.shape
    Sk, Hk = k.shape[1], k.shape[2]
    if softmax_scale is None:
        softmax_scale = D ** -0.5

    qf = q.to(f).permute(0, 2, 1, 3)
    kf = k.to(f).permute(0, 2, 1, 3)
    vf = v.to(f).permute(0, 2, 1, 3)
    if Hk != H:
        kf = kf[:, torch.arange(H, device=q.device) // (H // Hk)]
        vf = vf[:, torch.arange(H, device=q.device) // (H // Hk)]

    qk = qf @ kf.transpose(-1, -2)
    if softcap > 0.0:
        scores = softcap * torch.tanh(qk / softcap) * softmax_scale
    else:
        scores = qk * softmax_scale

    qi = torch.arange(Lq, device=q.device).view(Lq, 1) + (Sk - Lq)
    kj = torch.arange(Sk, device=q.device).view(1, Sk)
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(f)
        slopes = slopes[None, :, None, None] if slopes.dim() == 1 else slopes[:, :, None, None]
        scores = scores - slopes * (qi - kj).abs().to(f)
    wl, wr = window_size
    if causal:
        wr = 0
    mask = torch.zeros(Lq, Sk, dtype=torch.bool, device=q.device)
    if wl >= 0:
        mask |= kj <= qi - wl
    if wr >= 0:
        mask |= kj > qi + wr
    scores = scores.masked_fill(mask, -math.inf)

    m = scores.max(dim=-1, keepdim=True).values.detach()
    m = m.nan_to_num(neginf=0.0)
    e = (scores - m).exp()
    tot = e.sum(dim=-1, keepdim=True)
    has = tot > 0
    tot1 = torch.where(has, tot, torch.ones_like(tot))
    out = (e @ vf) / tot1
    lse = torch.where(has, m + tot1.log(), torch.full_like(m, -math.inf)).squeeze(-1)
    out = out.permute(0, 2, 1, 3).to(in_dt)
    if return_attn_probs:
        return out, lse.detach(), None
    return out
