import math

import torch

TRUTH = {"api": "flash-attn", "bugs": ["The backward recomputes the Q K^T tile in the input dtype (Q and K tiles are not upcast before the matmul), so with bfloat16 inputs the recomputed scores are rounded to bfloat16 and P = exp(s - lse) no longer matches the float32 forward; dq, dk and dv lose precision (the forward is fine)."], "kind": "precision"}

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
BLOCK_M = 64
BLOCK_N = 32


def _kv_range(m0, m1, S, offset, left, right):
    """Keys [lo, hi) that any query row in [m0, m1) may attend to."""
    lo = 0 if left < 0 else max(0, m0 + offset - left)
    hi = S if right < 0 else min(S, m1 - 1 + offset + right + 1)
    return lo, max(lo, hi)


def _tile_scores(qb, kb, rows, cols, scale, softcap, slopes, offset, left, right):
    """Natural-log-domain scores of one tile, capped, biased and masked. Also returns tanh for the backward."""
    s = torch.matmul(qb, kb.transpose(-1, -2)) * scale
    t = None
    if softcap > 0:
        t = torch.tanh(s / softcap)
        s = softcap * t
    rel = rows[:, None] + offset - cols[None, :]
    if slopes is not None:
        s = s - slopes[:, :, None, None] * rel.abs().to(s.dtype)
    mask = torch.zeros_like(rel, dtype=torch.bool)
    if left >= 0:
        mask |= rel > left
    if right >= 0:
        mask |= rel < -right
    s = s.masked_fill(mask, -math.inf)
    return s, t


class _FlashAttn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, softcap, slopes, left, right):
        # q (B, H, L, D); k, v (B, Hkv, S, D)
        B, H, L, D = q.shape
        Hkv, S = k.shape[1], k.shape[2]
        group = H // Hkv
        acc_t = torch.float64 if q.dtype == torch.float64 else torch.float32
        offset = S - L
        kv_head = torch.arange(H, device=q.device) // group
        out = torch.zeros(B, H, L, D, dtype=acc_t, device=q.device)
        lse = torch.full((B, H, L), -math.inf, dtype=acc_t, device=q.device)
        for m0 in range(0, L, BLOCK_M):
            m1 = min(m0 + BLOCK_M, L)
            rows = torch.arange(m0, m1, device=q.device)
            qb = q[:, :, m0:m1].to(acc_t)
            m_i = torch.full((B, H, m1 - m0), -math.inf, dtype=acc_t, device=q.device)
            l_i = torch.zeros_like(m_i)
            acc = torch.zeros(B, H, m1 - m0, D, dtype=acc_t, device=q.device)
            lo, hi = _kv_range(m0, m1, S, offset, left, right)
            for n0 in range(lo - lo % BLOCK_N, hi, BLOCK_N):
                n1 = min(n0 + BLOCK_N, S)
                cols = torch.arange(n0, n1, device=q.device)
                kb = k[:, kv_head, n0:n1].to(acc_t)
                vb = v[:, kv_head, n0:n1].to(acc_t)
                s, _ = _tile_scores(qb, kb, rows, cols, scale, softcap, slopes, offset, left, right)
                s2 = s * LOG2E
                m_new = torch.maximum(m_i, s2.amax(-1))
                m_use = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)
                alpha = torch.exp2(m_i - m_use)
                p = torch.exp2(s2 - m_use[..., None])
                l_i = l_i * alpha + p.sum(-1)
                acc = acc * alpha[..., None] + torch.matmul(p, vb)
                m_i = m_new
            live = l_i > 0
            out[:, :, m0:m1] = acc / torch.where(live, l_i, torch.ones_like(l_i))[..., None]
            lse[:, :, m0:m1] = torch.where(live, (m_i + torch.log2(torch.where(live, l_i, torch.ones_like(l_i)))) * LN2,
                                           torch.full_like(l_i, -math.inf))
        ctx.save_for_backward(q, k, v, out, lse, slopes)
        ctx.cfg = (scale, softcap, left, right)
        o = out.to(q.dtype)
        lse32 = lse.to(torch.float32)
        ctx.mark_non_differentiable(lse32)
        return o, lse32

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, slopes = ctx.saved_tensors
        scale, softcap, left, right = ctx.cfg
        B, H, L, D = q.shape
        Hkv, S = k.shape[1], k.shape[2]
        group = H // Hkv
        acc_t = out.dtype
        offset = S - L
        kv_head = torch.arange(H, device=q.device) // group
        do = dout.to(acc_t)
        delta = (do * out).sum(-1)
        lse_use = torch.where(lse == -math.inf, torch.zeros_like(lse), lse)
        dq = torch.zeros(B, H, L, D, dtype=acc_t, device=q.device)
        dk = torch.zeros(B, H, S, D, dtype=acc_t, device=q.device)
        dv = torch.zeros(B, H, S, D, dtype=acc_t, device=q.device)
        for m0 in range(0, L, BLOCK_M):
            m1 = min(m0 + BLOCK_M, L)
            rows = torch.arange(m0, m1, device=q.device)
            qb = q[:, :, m0:m1]
            dob = do[:, :, m0:m1]
            lo, hi = _kv_range(m0, m1, S, offset, left, right)
            for n0 in range(lo - lo % BLOCK_N, hi, BLOCK_N):
                n1 = min(n0 + BLOCK_N, S)
                cols = torch.arange(n0, n1, device=q.device)
                kb = k[:, kv_head, n0:n1]
                vb = v[:, kv_head, n0:n1].to(acc_t)
                s, t = _tile_scores(qb, kb, rows, cols, scale, softcap, slopes, offset, left, right)
                s = s.to(acc_t)
                p = torch.exp(s - lse_use[:, :, m0:m1, None])
                dv[:, :, n0:n1] += torch.matmul(p.transpose(-1, -2), dob)
                dp = torch.matmul(dob, vb.transpose(-1, -2))
                ds = p * (dp - delta[:, :, m0:m1, None])
                if softcap > 0:
                    ds = ds * (1.0 - t * t)
                dq[:, :, m0:m1] += torch.matmul(ds, kb.to(acc_t)) * scale
                dk[:, :, n0:n1] += torch.matmul(ds.transpose(-1, -2), qb.to(acc_t)) * scale
        dk = dk.view(B, Hkv, group, S, D).sum(2)
        dv = dv.view(B, Hkv, group, S, D).sum(2)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None, None


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    assert H % Hkv == 0
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else float(softmax_scale)
    left, right = int(window_size[0]), int(window_size[1])
    if causal:
        right = 0
    slopes = None
    if alibi_slopes is not None:
        acc_t = torch.float64 if q.dtype == torch.float64 else torch.float32
        slopes = alibi_slopes.to(acc_t).reshape(-1, H).expand(B, H).contiguous()
    out, lse = _FlashAttn.apply(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                scale, float(softcap), slopes, left, right)
    out = out.transpose(1, 2).contiguous()
    if return_attn_probs:
        return out, lse, None
    return out
