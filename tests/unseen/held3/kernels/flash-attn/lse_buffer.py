"""FlashAttention-2 style kernel: tiled online-softmax forward that stores softmax_lse, recomputing backward."""
import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "for float32/bfloat16 inputs the softmax_lse buffer is float16: lse = m + log(l) is rounded to float16 before "
        "being returned and before being saved for the backward, so the returned lse is off by up to ~2e-3 and the "
        "backward's recomputed P = exp(S - lse) carries a per-row relative error of ~1e-3 in dq/dk/dv; lse must stay "
        "float32",
    ],
    "kind": "precision",
}

_BLOCK_N = 64
_LSE_DTYPE = torch.float16


def _acc_dtype(dt):
    return torch.float64 if dt == torch.float64 else torch.float32


def _visible(L, S, causal, window, device):
    """(L, S) bool: query i (bottom-right aligned at key i + S - L) may see key j."""
    left, right = window
    if causal:
        right = 0
    qpos = torch.arange(L, device=device).unsqueeze(1) + (S - L)
    kpos = torch.arange(S, device=device).unsqueeze(0)
    ok = torch.ones(L, S, dtype=torch.bool, device=device)
    if left >= 0:
        ok = ok & (kpos >= qpos - left)
    if right >= 0:
        ok = ok & (kpos <= qpos + right)
    return ok


def _alibi_bias(slopes, B, H, L, S, device, dtype):
    if slopes is None:
        return None
    sl = slopes.to(device=device, dtype=dtype)
    sl = sl.reshape(1, H, 1, 1) if sl.dim() == 1 else sl.reshape(B, H, 1, 1)
    dist = (torch.arange(L, device=device).unsqueeze(1) + (S - L) - torch.arange(S, device=device).unsqueeze(0)).abs()
    return -sl * dist.to(dtype)


def _modified_scores(q, k, scale, softcap, bias, ok):
    """Returns (masked scores, tanh(raw/softcap) or None)."""
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    t = None
    if softcap > 0:
        t = torch.tanh(s / softcap)
        s = softcap * t
    if bias is not None:
        s = s + bias
    return s.masked_fill(~ok, float("-inf")), t


class _FlashFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal, window, softcap, slopes):
        B, L, H, D = q.shape
        S, Hkv = k.shape[1], k.shape[2]
        g = H // Hkv
        acc_t = _acc_dtype(q.dtype)
        qh = q.transpose(1, 2).to(acc_t)
        kh = k.transpose(1, 2).to(acc_t).repeat_interleave(g, dim=1)
        vh = v.transpose(1, 2).to(acc_t).repeat_interleave(g, dim=1)
        ok = _visible(L, S, causal, window, q.device)
        bias = _alibi_bias(slopes, B, H, L, S, q.device, acc_t)

        m = torch.full((B, H, L), float("-inf"), dtype=acc_t, device=q.device)
        l = torch.zeros((B, H, L), dtype=acc_t, device=q.device)
        o = torch.zeros((B, H, L, vh.size(-1)), dtype=acc_t, device=q.device)
        for j0 in range(0, S, _BLOCK_N):
            j1 = min(S, j0 + _BLOCK_N)
            s, _ = _modified_scores(qh, kh[:, :, j0:j1], scale, softcap,
                                    None if bias is None else bias[..., j0:j1], ok[:, j0:j1])
            m_new = torch.maximum(m, s.amax(dim=-1))
            m_use = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
            alpha = torch.exp(m - m_use)
            p = torch.exp(s - m_use.unsqueeze(-1))
            l = alpha * l + p.sum(dim=-1)
            o = alpha.unsqueeze(-1) * o + torch.matmul(p, vh[:, :, j0:j1])
            m = m_new
        live = l > 0
        l_safe = torch.where(live, l, torch.ones_like(l))
        o = o / l_safe.unsqueeze(-1)
        lse = torch.where(live, m + torch.log(l_safe), torch.full_like(l, float("-inf")))
        if q.dtype != torch.float64:
            lse = lse.to(_LSE_DTYPE)

        ctx.save_for_backward(q, k, v, o, lse, slopes if slopes is not None else torch.empty(0))
        ctx.cfg = (scale, causal, window, softcap, slopes is not None)
        out = o.transpose(1, 2).to(q.dtype)
        lse32 = lse.to(torch.float32)
        ctx.mark_non_differentiable(lse32)
        return out, lse32

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, o, lse, slopes = ctx.saved_tensors
        scale, causal, window, softcap, has_alibi = ctx.cfg
        B, L, H, D = q.shape
        S, Hkv = k.shape[1], k.shape[2]
        g = H // Hkv
        acc_t = o.dtype
        qh = q.transpose(1, 2).to(acc_t)
        kh = k.transpose(1, 2).to(acc_t).repeat_interleave(g, dim=1)
        vh = v.transpose(1, 2).to(acc_t).repeat_interleave(g, dim=1)
        do = dout.transpose(1, 2).to(acc_t)
        ok = _visible(L, S, causal, window, q.device)
        bias = _alibi_bias(slopes if has_alibi else None, B, H, L, S, q.device, acc_t)

        s, t = _modified_scores(qh, kh, scale, softcap, bias, ok)
        lse = lse.to(acc_t)
        lse_use = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
        p = torch.exp(s - lse_use.unsqueeze(-1))
        dv = torch.matmul(p.transpose(-1, -2), do)
        dp = torch.matmul(do, vh.transpose(-1, -2))
        delta = (do * o).sum(dim=-1, keepdim=True)
        ds = p * (dp - delta)
        if t is not None:
            ds = ds * (1.0 - t * t)
        dq = torch.matmul(ds, kh) * scale
        dk = torch.matmul(ds.transpose(-1, -2), qh) * scale
        dk = dk.view(B, Hkv, g, S, D).sum(dim=2)
        dv = dv.view(B, Hkv, g, S, dv.size(-1)).sum(dim=2)
        return (dq.transpose(1, 2).to(q.dtype), dk.transpose(1, 2).to(k.dtype), dv.transpose(1, 2).to(v.dtype),
                None, None, None, None, None)


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    window = (int(window_size[0]), int(window_size[1]))
    out, lse = _FlashFn.apply(q, k, v, float(scale), bool(causal), window, float(softcap), alibi_slopes)
    if return_attn_probs:
        return out, lse, None
    return out
