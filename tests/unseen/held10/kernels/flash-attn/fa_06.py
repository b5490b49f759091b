TRUTH = {'api': 'flash-attn', 'bugs': [], 'kind': 'correct'}
import math
import torch

BLOCK_N = 64


def _scores(q, kb, sc, softcap, slopes, j0, L, S, left, right):
    t = torch.matmul(q, kb.transpose(-1, -2)) * sc
    s = softcap * torch.tanh(t / softcap) if softcap > 0 else t
    qpos = torch.arange(L)[:, None] + (S - L)
    kpos = torch.arange(j0, j0 + kb.shape[2])[None, :]
    if slopes is not None:
        s = s - slopes[:, :, None, None] * (qpos - kpos).abs().to(s.dtype)
    keep = torch.ones(L, kb.shape[2], dtype=torch.bool)
    if left >= 0:
        keep = keep & (kpos >= qpos - left)
    if right >= 0:
        keep = keep & (kpos <= qpos + right)
    return t, s.masked_fill(~keep, -math.inf)


class _FlashAttn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sc, left, right, softcap, slopes):
        B, H, L, D = q.shape
        Hkv, S = k.shape[1], k.shape[2]
        g = H // Hkv
        ke = k.repeat_interleave(g, 1)
        ve = v.repeat_interleave(g, 1)
        m = torch.full((B, H, L, 1), -math.inf, dtype=q.dtype)
        l = torch.zeros((B, H, L, 1), dtype=q.dtype)
        acc = torch.zeros((B, H, L, v.shape[-1]), dtype=q.dtype)
        for j0 in range(0, S, BLOCK_N):
            j1 = min(j0 + BLOCK_N, S)
            _, s = _scores(q, ke[:, :, j0:j1], sc, softcap, slopes, j0, L, S, left, right)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            m_use = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m - m_use)
            p = torch.exp(s - m_use)
            l = l * alpha + p.sum(-1, keepdim=True)
            acc = acc * alpha + torch.matmul(p, ve[:, :, j0:j1])
            m = m_new
        out = acc / torch.where(l > 0, l, torch.ones_like(l))
        lse = torch.where(l > 0, m + torch.log(l), torch.full_like(l, -math.inf)).squeeze(-1)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.cfg = (sc, left, right, softcap, slopes)
        return out, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        sc, left, right, softcap, slopes = ctx.cfg
        B, H, L, D = q.shape
        Hkv, S = k.shape[1], k.shape[2]
        g = H // Hkv
        ke = k.repeat_interleave(g, 1)
        ve = v.repeat_interleave(g, 1)
        t, s = _scores(q, ke, sc, softcap, slopes, 0, L, S, left, right)
        lse_b = torch.where(torch.isinf(lse), torch.full_like(lse, math.inf), lse)
        p = torch.exp(s - lse_b[..., None])
        dve = torch.matmul(p.transpose(-1, -2), do)
        dp = torch.matmul(do, ve.transpose(-1, -2))
        delta = (do * out).sum(-1, keepdim=True)
        ds = p * (dp - delta)
        if softcap > 0:
            ds = ds * (1.0 - torch.tanh(t / softcap) ** 2)
        dq = torch.matmul(ds, ke) * sc
        dke = torch.matmul(ds.transpose(-1, -2), q) * sc
        dk = dke.view(B, Hkv, g, S, D).sum(2)
        dv = dve.view(B, Hkv, g, S, v.shape[-1]).sum(2)
        return dq, dk, dv, None, None, None, None, None


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    cdt = torch.float32 if q.dtype == torch.bfloat16 else q.dtype
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(cdt)
        if slopes.dim() == 1:
            slopes = slopes.unsqueeze(0).expand(B, H)
    qh = q.to(cdt).transpose(1, 2)
    kh = k.to(cdt).transpose(1, 2)
    vh = v.to(cdt).transpose(1, 2)
    out, lse = _FlashAttn.apply(qh, kh, vh, sc, left, right, float(softcap), slopes)
    out = out.transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
