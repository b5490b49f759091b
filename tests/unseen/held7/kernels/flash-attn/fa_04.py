import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "Backward GQA reduction groups the expanded heads wrongly: dk/dv of the H expanded heads are reduced with view(B, g, Hkv, S, D).sum(1) (as if head h belonged to kv head h % Hkv) instead of view(B, Hkv, g, S, D).sum(2) (kv head h // g). Forward (out, lse) and dq are right; dk and dv are wrong when 1 < Hkv < H (MQA and MHA are fine)."
    ],
    "kind": "semantic"
}


BLOCK_N = 64
NEG_INF = float('-inf')


def _tile(q, kt, j0, qpos, scale, softcap, slopes, left, right):
    """Scores of q against the key tile starting at j0 (softcap, ALiBi, window applied).
    Returns (s, t) with t = tanh(raw / softcap) (None without softcap) for the backward."""
    s = torch.matmul(q, kt.transpose(-1, -2)) * scale
    t = None
    if softcap > 0:
        t = torch.tanh(s / softcap)
        s = softcap * t
    kpos = torch.arange(j0, j0 + kt.shape[-2]).view(1, -1)
    if slopes is not None:
        s = s - slopes[:, :, None, None] * (qpos - kpos).abs().to(s.dtype)
    keep = torch.ones(qpos.shape[0], kpos.shape[1], dtype=torch.bool)
    if left >= 0:
        keep &= kpos >= qpos - left
    if right >= 0:
        keep &= kpos <= qpos + right
    return s.masked_fill(~keep, NEG_INF), t


class _FlashAttn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, left, right, softcap, slopes):
        # q (B, H, L, D); k, v (B, Hkv, S, D), all in the compute dtype
        B, H, L, D = q.shape
        Hkv, S = k.shape[1], k.shape[2]
        g = H // Hkv
        kx = k.repeat_interleave(g, dim=1)
        vx = v.repeat_interleave(g, dim=1)
        qpos = torch.arange(L).view(L, 1) + (S - L)

        m = q.new_full((B, H, L, 1), NEG_INF)
        l = q.new_zeros((B, H, L, 1))
        acc = q.new_zeros((B, H, L, vx.shape[-1]))
        for j0 in range(0, S, BLOCK_N):
            j1 = min(j0 + BLOCK_N, S)
            s, _ = _tile(q, kx[:, :, j0:j1], j0, qpos, scale, softcap, slopes, left, right)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            m_ref = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            p = torch.exp(s - m_ref)
            alpha = torch.exp(m - m_ref)
            l = l * alpha + p.sum(-1, keepdim=True)
            acc = acc * alpha + torch.matmul(p, vx[:, :, j0:j1])
            m = m_new
        ok = l > 0
        out = torch.where(ok, acc / torch.where(ok, l, torch.ones_like(l)), torch.zeros_like(acc))
        lse = torch.where(ok, m + torch.log(torch.where(ok, l, torch.ones_like(l))), torch.full_like(l, NEG_INF))
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.cfg = (scale, left, right, softcap, slopes)
        ctx.mark_non_differentiable(lse)
        return out, lse.squeeze(-1)

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        scale, left, right, softcap, slopes = ctx.cfg
        B, H, L, D = q.shape
        Hkv, S = k.shape[1], k.shape[2]
        g = H // Hkv
        kx = k.repeat_interleave(g, dim=1)
        vx = v.repeat_interleave(g, dim=1)
        qpos = torch.arange(L).view(L, 1) + (S - L)
        dout = dout.to(q.dtype)
        delta = (dout * out).sum(-1, keepdim=True)
        lse_r = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)

        dq = torch.zeros_like(q)
        dkx = torch.zeros_like(kx)
        dvx = torch.zeros_like(vx)
        for j0 in range(0, S, BLOCK_N):
            j1 = min(j0 + BLOCK_N, S)
            kt, vt = kx[:, :, j0:j1], vx[:, :, j0:j1]
            s, t = _tile(q, kt, j0, qpos, scale, softcap, slopes, left, right)
            p = torch.exp(s - lse_r)
            dvx[:, :, j0:j1] = torch.matmul(p.transpose(-1, -2), dout)
            dp = torch.matmul(dout, vt.transpose(-1, -2))
            ds = p * (dp - delta)
            if t is not None:
                ds = ds * (1 - t * t)
            ds = ds * scale
            dq += torch.matmul(ds, kt)
            dkx[:, :, j0:j1] = torch.matmul(ds.transpose(-1, -2), q)
        dk = dkx.view(B, g, Hkv, S, D).sum(1)
        dv = dvx.view(B, g, Hkv, S, vx.shape[-1]).sum(1)
        return dq, dk, dv, None, None, None, None, None


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    scale = softmax_scale if softmax_scale is not None else D ** -0.5
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    left, right = window_size
    if causal:
        right = 0
    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(cdt).reshape(-1, H).expand(B, H)
    out, lse = _FlashAttn.apply(q.transpose(1, 2).to(cdt), k.transpose(1, 2).to(cdt), v.transpose(1, 2).to(cdt),
                                scale, left, right, float(softcap), slopes)
    out = out.transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
