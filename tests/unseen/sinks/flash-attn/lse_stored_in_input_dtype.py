"""flash_attn_func with a learnable sink as a custom autograd.Function: dense float32 forward, softmax_lse (sink
included) saved in the activations' dtype like the output, and a backward that recomputes P = exp(s - lse).
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": ["softmax_lse is rounded to the input dtype before it is returned and saved for the backward, so with "
             "bfloat16 inputs the lse is off by up to half a bf16 ulp (0.016 for lse in [4, 8), 0.25 near 100) and the "
             "P the backward recomputes from it is off by as much (relative), spoiling dq, dk, dv and dsink"],
    "kind": "precision",
}


def _scores(q, k, scale, softcap, slopes, left, right):
    L, S = q.shape[-2], k.shape[-2]
    raw = q @ k.transpose(-1, -2) * scale
    t = torch.tanh(raw / softcap) if softcap > 0 else None
    s = softcap * t if t is not None else raw
    i = torch.arange(L, device=q.device).view(-1, 1) + S - L
    j = torch.arange(S, device=q.device).view(1, -1)
    if slopes is not None:
        s = s - slopes * (i - j).abs()
    vis = torch.ones(L, S, dtype=torch.bool, device=q.device)
    if left >= 0:
        vis &= j >= i - left
    if right >= 0:
        vis &= j <= i + right
    return s.masked_fill(~vis, float("-inf")), t


class _Fn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sink, scale, softcap, slopes, left, right, io_dtype):
        s, _ = _scores(q, k, scale, softcap, slopes, left, right)
        B, H, L, _ = q.shape
        col = sink.view(1, H, 1, 1).expand(B, H, L, 1)
        full = torch.cat([s, col], dim=-1)
        mx = full.amax(-1, keepdim=True)
        mx = torch.where(torch.isneginf(mx), torch.zeros_like(mx), mx)
        e = torch.exp(full - mx)
        z = e.sum(-1, keepdim=True)
        out = (e[..., :-1] / torch.where(z == 0, torch.ones_like(z), z)) @ v
        lse = (mx + torch.log(z)).squeeze(-1).to(io_dtype).to(q.dtype)
        ctx.save_for_backward(q, k, v, sink, slopes, out, lse)
        ctx.cfg = (scale, softcap, left, right)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, sink, slopes, out, lse = ctx.saved_tensors
        scale, softcap, left, right = ctx.cfg
        s, t = _scores(q, k, scale, softcap, slopes, left, right)
        if dlse is None:
            dlse = torch.zeros_like(lse)
        ok = torch.isfinite(lse)
        dlse = torch.where(ok, dlse, torch.zeros_like(dlse))
        lse_b = torch.where(ok, lse, torch.full_like(lse, float("inf")))
        p = torch.exp(s - lse_b.unsqueeze(-1))
        delta = (dout * out).sum(-1)
        dv = p.transpose(-1, -2) @ dout
        ds = p * (dout @ v.transpose(-1, -2) - delta.unsqueeze(-1) + dlse.unsqueeze(-1))
        if t is not None:
            ds = ds * (1 - t * t)
        dq = ds @ k * scale
        dk = ds.transpose(-1, -2) @ q * scale
        p_sink = torch.exp(sink.view(1, -1, 1) - lse_b)
        dsink = (p_sink * (dlse - delta)).sum(dim=(0, 2))
        return dq, dk, dv, dsink, None, None, None, None, None, None


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, L, H, D = q.shape
    Hkv = k.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    qt = q.to(cdt).transpose(1, 2)
    kt = k.to(cdt).transpose(1, 2).repeat_interleave(H // Hkv, 1)
    vt = v.to(cdt).transpose(1, 2).repeat_interleave(H // Hkv, 1)
    slopes = None if alibi_slopes is None else alibi_slopes.to(cdt).reshape(-1, H, 1, 1)
    if learnable_sink is None:
        sink = torch.full((H,), float("-inf"), dtype=cdt, device=q.device)
    else:
        sink = learnable_sink.to(cdt)
    out, lse = _Fn.apply(qt, kt, vt, sink, scale, softcap, slopes, left, right, q.dtype)
    out = out.transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
