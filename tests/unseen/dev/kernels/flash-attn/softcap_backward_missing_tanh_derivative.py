"""flash_attn_func with a hand-written backward (autograd.Function): the forward saves the lse, the backward
recomputes P tile-free and applies the usual dS = P * (dP - D) chain."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the hand-written backward drops the soft-cap's derivative (1 - tanh^2(s / softcap)) from dS, so with "
        "softcap > 0 grad_q and grad_k are wrong (forward, lse and grad_v are right)"
    ],
    "kind": "semantic",
}


def _scores(q, k, scale, softcap, slopes, dist):
    raw = torch.einsum("bhld,bhsd->bhls", q, k) * scale
    capped = softcap * torch.tanh(raw / softcap) if softcap > 0 else raw
    if slopes is not None:
        capped = capped - slopes * dist
    return capped


class _FlashFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, softcap, slopes, dist, visible):
        s = _scores(q, k, scale, softcap, slopes, dist).masked_fill(~visible, -math.inf)
        lse = torch.logsumexp(s, dim=-1, keepdim=True)
        lse_safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
        p = torch.exp(s - lse_safe)
        o = p @ v
        ctx.save_for_backward(q, k, v, o, lse_safe, slopes, dist, visible)
        ctx.scale, ctx.softcap = scale, softcap
        return o, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, o, lse, slopes, dist, visible = ctx.saved_tensors
        scale, softcap = ctx.scale, ctx.softcap
        s = _scores(q, k, scale, softcap, slopes, dist).masked_fill(~visible, -math.inf)
        p = torch.exp(s - lse)
        dv = p.transpose(-1, -2) @ do
        dp = do @ v.transpose(-1, -2)
        delta = (do * o).sum(-1, keepdim=True)
        ds = p * (dp - delta)
        if dlse is not None:
            ds = ds + p * dlse
        dq = ds @ k * scale
        dk = ds.transpose(-1, -2) @ q * scale
        return dq, dk, dv, None, None, None, None, None


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    g = H // Hkv
    qh = q.to(ct).transpose(1, 2)
    kh = k.to(ct).transpose(1, 2).repeat_interleave(g, 1)
    vh = v.to(ct).transpose(1, 2).repeat_interleave(g, 1)
    i = torch.arange(L, device=q.device)[:, None] + S - L
    j = torch.arange(S, device=q.device)[None, :]
    left, right = window_size
    if causal:
        right = 0
    visible = torch.ones(L, S, dtype=torch.bool, device=q.device)
    if left >= 0:
        visible = visible & (j >= i - left)
    if right >= 0:
        visible = visible & (j <= i + right)
    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(ct)
        slopes = (slopes if slopes.dim() == 2 else slopes.expand(B, H))[:, :, None, None].contiguous()
    dist = (i - j).abs().to(ct)
    o, lse = _FlashFn.apply(qh, kh, vh, scale, softcap, slopes, dist, visible)
    out = o.transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        return out, lse.squeeze(-1).detach(), None
    return out
