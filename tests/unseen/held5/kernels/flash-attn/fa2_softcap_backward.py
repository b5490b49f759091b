import math

import torch

TRUTH = {'api': 'flash-attn', 'bugs': ['The backward multiplies dS by (1 - t) instead of the tanh derivative (1 - t*t) for softcap, so gradients of q and k are wrong whenever softcap > 0 (forward and lse are right).'], 'kind': 'semantic'}

BLOCK_M = 64
BLOCK_N = 64


def _acc_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _expand_kv(x, group):
    # (B, S, Hkv, D) -> (B, H, S, D)
    x = x.transpose(1, 2)
    if group > 1:
        x = x.repeat_interleave(group, dim=1)
    return x


def _reduce_kv(dx, group):
    # (B, H, S, D) -> (B, S, Hkv, D)
    B, H, S, D = dx.shape
    if group > 1:
        dx = dx.view(B, H // group, group, S, D).sum(2)
    return dx.transpose(1, 2)


def _slopes(alibi_slopes, B, H, dtype):
    if alibi_slopes is None:
        return None
    s = alibi_slopes.to(dtype)
    if s.dim() == 1:
        s = s.view(1, H).expand(B, H)
    return s.reshape(B, H, 1, 1)


def _window(causal, window_size):
    left, right = window_size
    if causal:
        right = 0
    return left, right


def _positions(m0, m1, L, S):
    return torch.arange(m0, m1) + (S - L)


def _kv_range(m0, m1, L, S, left, right):
    off = S - L
    lo, hi = 0, S
    if left >= 0:
        lo = max(0, m0 + off - left)
    if right >= 0:
        hi = min(S, m1 - 1 + off + right + 1)
    lo = (lo // BLOCK_N) * BLOCK_N
    return lo, hi


def _q_range(n0, n1, L, S, left, right):
    off = S - L
    lo, hi = 0, L
    if right >= 0:
        lo = max(0, n0 - off - right)
    if left >= 0:
        hi = min(L, n1 - 1 - off + left + 1)
    lo = (lo // BLOCK_M) * BLOCK_M
    return lo, hi


def _scores(qb, kb, scale, softcap, slopes, rows, cols, left, right):
    s = torch.matmul(qb, kb.transpose(-1, -2)) * scale
    t = None
    if softcap > 0:
        t = torch.tanh(s / softcap)
        s = softcap * t
    if slopes is not None:
        s = s - slopes * (rows[:, None] - cols[None, :]).abs().to(s.dtype)
    mask = torch.ones(rows.numel(), cols.numel(), dtype=torch.bool)
    if left >= 0:
        mask &= cols[None, :] >= rows[:, None] - left
    if right >= 0:
        mask &= cols[None, :] <= rows[:, None] + right
    return s, t, mask


def _fwd(q, k, v, scale, left, right, softcap, slopes):
    B, H, L, D = q.shape
    S = k.shape[2]
    out = torch.zeros(B, H, L, v.shape[-1], dtype=q.dtype)
    lse = torch.full((B, H, L), -math.inf, dtype=q.dtype)
    for m0 in range(0, L, BLOCK_M):
        m1 = min(L, m0 + BLOCK_M)
        qb = q[:, :, m0:m1]
        rows = _positions(m0, m1, L, S)
        m_i = torch.full((B, H, m1 - m0), -math.inf, dtype=q.dtype)
        l_i = torch.zeros(B, H, m1 - m0, dtype=q.dtype)
        acc = torch.zeros(B, H, m1 - m0, v.shape[-1], dtype=q.dtype)
        lo, hi = _kv_range(m0, m1, L, S, left, right)
        for n0 in range(lo, hi, BLOCK_N):
            n1 = min(S, n0 + BLOCK_N)
            cols = torch.arange(n0, n1)
            s, _, mask = _scores(qb, k[:, :, n0:n1], scale, softcap, slopes, rows, cols, left, right)
            s = s.masked_fill(~mask, -math.inf)
            m_new = torch.maximum(m_i, s.amax(-1))
            m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            p = torch.exp(s - m_safe[..., None])
            alpha = torch.exp(m_i - m_safe)
            l_i = l_i * alpha + p.sum(-1)
            acc = acc * alpha[..., None] + torch.matmul(p, v[:, :, n0:n1])
            m_i = m_new
        ok = l_i > 0
        l_safe = torch.where(ok, l_i, torch.ones_like(l_i))
        out[:, :, m0:m1] = torch.where(ok[..., None], acc / l_safe[..., None], torch.zeros_like(acc))
        lse[:, :, m0:m1] = torch.where(ok, m_i + torch.log(l_safe), torch.full_like(m_i, -math.inf))
    return out, lse


def _bwd(do, q, k, v, out, lse, scale, left, right, softcap, slopes):
    B, H, L, D = q.shape
    S = k.shape[2]
    delta = (do * out).sum(-1)
    lse = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    dq = torch.zeros_like(q)
    dk = torch.zeros_like(k)
    dv = torch.zeros_like(v)
    for n0 in range(0, S, BLOCK_N):
        n1 = min(S, n0 + BLOCK_N)
        cols = torch.arange(n0, n1)
        kb, vb = k[:, :, n0:n1], v[:, :, n0:n1]
        dk_b = torch.zeros_like(kb)
        dv_b = torch.zeros_like(vb)
        lo, hi = _q_range(n0, n1, L, S, left, right)
        for m0 in range(lo, hi, BLOCK_M):
            m1 = min(L, m0 + BLOCK_M)
            rows = _positions(m0, m1, L, S)
            qb, dob = q[:, :, m0:m1], do[:, :, m0:m1]
            s, t, mask = _scores(qb, kb, scale, softcap, slopes, rows, cols, left, right)
            p = torch.exp(s - lse[:, :, m0:m1, None])
            p = torch.where(mask, p, torch.zeros_like(p))
            dv_b += torch.matmul(p.transpose(-1, -2), dob)
            dp = torch.matmul(dob, vb.transpose(-1, -2))
            ds = p * (dp - delta[:, :, m0:m1, None])
            if softcap > 0:
                ds = ds * (1 - t)
            dq[:, :, m0:m1] += torch.matmul(ds, kb) * scale
            dk_b += torch.matmul(ds.transpose(-1, -2), qb) * scale
        dk[:, :, n0:n1] = dk_b
        dv[:, :, n0:n1] = dv_b
    return dq, dk, dv


class _FlashAttnFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal, window_size, softcap, alibi_slopes):
        dtype = q.dtype
        acc = _acc_dtype(dtype)
        B, L, H, D = q.shape
        group = H // k.shape[2]
        left, right = _window(causal, window_size)
        slopes = _slopes(alibi_slopes, B, H, acc)
        qa = q.transpose(1, 2).to(acc)
        ka = _expand_kv(k, group).to(acc)
        va = _expand_kv(v, group).to(acc)
        out, lse = _fwd(qa, ka, va, scale, left, right, softcap, slopes)
        ctx.save_for_backward(qa, ka, va, out, lse)
        ctx.cfg = (scale, left, right, softcap, slopes, group, dtype)
        ctx.mark_non_differentiable(lse)
        return out.transpose(1, 2).to(dtype), lse

    @staticmethod
    def backward(ctx, dout, dlse):
        qa, ka, va, out, lse = ctx.saved_tensors
        scale, left, right, softcap, slopes, group, dtype = ctx.cfg
        do = dout.transpose(1, 2).to(qa.dtype)
        dq, dk, dv = _bwd(do, qa, ka, va, out, lse, scale, left, right, softcap, slopes)
        dq = dq.transpose(1, 2).to(dtype)
        dk = _reduce_kv(dk, group).to(dtype)
        dv = _reduce_kv(dv, group).to(dtype)
        return dq, dk, dv, None, None, None, None, None


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    out, lse = _FlashAttnFunc.apply(q, k, v, softmax_scale, causal, tuple(window_size), float(softcap),
                                    alibi_slopes)
    if return_attn_probs:
        return out, lse, None
    return out
