"""flash_attn_func as an autograd.Function whose forward and backward each rebuild the bias/mask for their own pass."""
import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "window sides are applied only when the bound is > 0 (`if left > 0`, `if right > 0`), so a window side of 0 (e.g. "
        "window_size=(0, 0) or (k, 0)) is treated as unbounded instead of 'no keys on that side'",
        "the backward recomputes the ALiBi bias with the distance |i - j| (no bottom-right shift) while the forward uses "
        "|i + S - L - j|, so dq/dk/dv are wrong with alibi_slopes whenever seqlen_q != seqlen_k",
    ],
    "kind": "two",
}


def _acc(dt):
    return torch.float64 if dt == torch.float64 else torch.float32


def _heads(x, rep, ct):
    return x.to(ct).transpose(1, 2).repeat_interleave(rep, dim=1)


def _keep(L, S, causal, window, device):
    qp = torch.arange(L, device=device).view(L, 1) + (S - L)
    kp = torch.arange(S, device=device).view(1, S)
    keep = torch.ones(L, S, dtype=torch.bool, device=device)
    if causal:
        keep &= kp <= qp
    left, right = window
    if left > 0:
        keep &= kp >= qp - left
    if right > 0:
        keep &= kp <= qp + right
    return keep


class _Flash(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal, window, softcap, slopes):
        B, L, H, D = q.shape
        S, Hkv = k.shape[1], k.shape[2]
        ct = _acc(q.dtype)
        qh, kh, vh = _heads(q, 1, ct), _heads(k, H // Hkv, ct), _heads(v, H // Hkv, ct)
        s = torch.matmul(qh, kh.transpose(-1, -2)) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        if slopes is not None:
            dist = (torch.arange(L, device=q.device).view(L, 1) + (S - L) - torch.arange(S, device=q.device)).abs()
            s = s - slopes.to(ct).reshape(-1, H, 1, 1) * dist.to(ct)
        s = s.masked_fill(~_keep(L, S, causal, window, q.device), float("-inf"))
        mx = s.amax(-1, keepdim=True)
        mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
        e = torch.exp(s - mx)
        z = e.sum(-1, keepdim=True)
        o = torch.matmul(e, vh) / torch.where(z > 0, z, torch.ones_like(z))
        lse = (mx + torch.log(z)).squeeze(-1)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.meta = (scale, causal, window, softcap, slopes)
        lse_out = lse.float()
        ctx.mark_non_differentiable(lse_out)
        return o.transpose(1, 2).to(q.dtype), lse_out

    @staticmethod
    def backward(ctx, g_out, g_lse):
        q, k, v, o, lse = ctx.saved_tensors
        scale, causal, window, softcap, slopes = ctx.meta
        B, L, H, D = q.shape
        S, Hkv = k.shape[1], k.shape[2]
        rep = H // Hkv
        ct = o.dtype
        qh, kh, vh = _heads(q, 1, ct), _heads(k, rep, ct), _heads(v, rep, ct)
        do = g_out.to(ct).transpose(1, 2)
        s = torch.matmul(qh, kh.transpose(-1, -2)) * scale
        th = None
        if softcap > 0:
            th = torch.tanh(s / softcap)
            s = softcap * th
        if slopes is not None:
            dist = (torch.arange(L, device=q.device).view(L, 1) - torch.arange(S, device=q.device)).abs()
            s = s - slopes.to(ct).reshape(-1, H, 1, 1) * dist.to(ct)
        s = s.masked_fill(~_keep(L, S, causal, window, q.device), float("-inf"))
        p = torch.exp(s - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse)).unsqueeze(-1))
        dv = torch.matmul(p.transpose(-1, -2), do)
        ds = p * (torch.matmul(do, vh.transpose(-1, -2)) - (do * o).sum(-1, keepdim=True))
        if th is not None:
            ds = ds * (1 - th * th)
        dq = torch.matmul(ds, kh) * scale
        dk = torch.matmul(ds.transpose(-1, -2), qh) * scale
        dk = dk.unflatten(1, (Hkv, rep)).sum(2)
        dv = dv.unflatten(1, (Hkv, rep)).sum(2)
        return (dq.transpose(1, 2).to(q.dtype), dk.transpose(1, 2).to(k.dtype), dv.transpose(1, 2).to(v.dtype),
                None, None, None, None, None)


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    out, lse = _Flash.apply(q, k, v, scale, bool(causal), tuple(int(w) for w in window_size), float(softcap),
                            alibi_slopes)
    if return_attn_probs:
        return out, lse, None
    return out
