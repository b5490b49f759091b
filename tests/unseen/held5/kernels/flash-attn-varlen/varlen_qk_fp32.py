import math

import torch

TRUTH = {'api': 'flash-attn-varlen', 'bugs': ['The Q K^T product is always computed in float32 (q and k cast to float32), so float64 inputs get only float32-accurate scores (~1e-7 relative error in output, lse and gradients); float32/bfloat16 unaffected.'], 'kind': 'precision'}

BLOCK_M = 128
BLOCK_N = 64
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def _bounds(cq, ck, b, max_seqlen_q, max_seqlen_k):
    qs, qe = cq[b], cq[b + 1]
    ks, ke = ck[b], ck[b + 1]
    off = (ke - ks) - (qe - qs)
    return qs, qe, ks, ke, off


def _scores2(qb, kb, scale, softcap, slope, rows, cols, left, right):
    s = torch.matmul(qb.float(), kb.transpose(-1, -2).float()).to(qb.dtype) * scale
    t = None
    if softcap > 0:
        t = torch.tanh(s / softcap)
        s = t * softcap
    if slope is not None:
        s = s - slope[:, None, None] * (rows[:, None] - cols[None, :]).abs().to(s.dtype)
    valid = torch.ones(rows.numel(), cols.numel(), dtype=torch.bool)
    if left >= 0:
        valid &= cols[None, :] >= rows[:, None] - left
    if right >= 0:
        valid &= cols[None, :] <= rows[:, None] + right
    s = s.masked_fill(~valid, -math.inf)
    return s * LOG2E, t, valid


def _seq_fwd(q, k, v, off, scale, softcap, slope, left, right):
    H, L, D = q.shape
    S = k.shape[1]
    out = torch.zeros(H, L, v.shape[-1], dtype=q.dtype)
    lse2 = torch.full((H, L), -math.inf, dtype=q.dtype)
    for m0 in range(0, L, BLOCK_M):
        m1 = min(L, m0 + BLOCK_M)
        rows = torch.arange(m0, m1) + off
        qb = q[:, m0:m1]
        m_i = torch.full((H, m1 - m0), -math.inf, dtype=q.dtype)
        l_i = torch.zeros(H, m1 - m0, dtype=q.dtype)
        acc = torch.zeros(H, m1 - m0, v.shape[-1], dtype=q.dtype)
        for n0 in range(0, S, BLOCK_N):
            n1 = min(S, n0 + BLOCK_N)
            s2, _, valid = _scores2(qb, k[:, n0:n1], scale, softcap, slope, rows, torch.arange(n0, n1), left, right)
            if not bool(valid.any()):
                continue
            m_new = torch.maximum(m_i, s2.amax(-1))
            m_ref = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            p = torch.exp2(s2 - m_ref[..., None])
            alpha = torch.exp2(m_i - m_ref)
            l_i = l_i * alpha + p.sum(-1)
            acc = acc * alpha[..., None] + torch.matmul(p, v[:, n0:n1])
            m_i = m_new
        seen = l_i > 0
        l_one = torch.where(seen, l_i, torch.ones_like(l_i))
        out[:, m0:m1] = torch.where(seen[..., None], acc / l_one[..., None], torch.zeros_like(acc))
        lse2[:, m0:m1] = torch.where(seen, m_i + torch.log2(l_one), torch.full_like(m_i, -math.inf))
    return out, lse2


def _seq_bwd(do, q, k, v, out, lse2, off, scale, softcap, slope, left, right):
    H, L, D = q.shape
    S = k.shape[1]
    delta = (do * out).sum(-1)
    lse2 = torch.where(torch.isinf(lse2), torch.zeros_like(lse2), lse2)
    dq = torch.zeros_like(q)
    dk = torch.zeros_like(k)
    dv = torch.zeros_like(v)
    for m0 in range(0, L, BLOCK_M):
        m1 = min(L, m0 + BLOCK_M)
        rows = torch.arange(m0, m1) + off
        qb, dob = q[:, m0:m1], do[:, m0:m1]
        dq_acc = torch.zeros_like(qb)
        for n0 in range(0, S, BLOCK_N):
            n1 = min(S, n0 + BLOCK_N)
            kb, vb = k[:, n0:n1], v[:, n0:n1]
            s2, t, valid = _scores2(qb, kb, scale, softcap, slope, rows, torch.arange(n0, n1), left, right)
            if not bool(valid.any()):
                continue
            p = torch.exp2(s2 - lse2[:, m0:m1, None])
            dv[:, n0:n1] += torch.matmul(p.transpose(-1, -2), dob)
            dp = torch.matmul(dob, vb.transpose(-1, -2))
            ds = p * (dp - delta[:, m0:m1, None])
            if softcap > 0:
                ds = ds * (1 - t * t)
            dq_acc = dq_acc + torch.matmul(ds, kb)
            dk[:, n0:n1] += torch.matmul(ds.transpose(-1, -2), qb) * scale
        dq[:, m0:m1] = dq_acc * scale
    return dq, dk, dv


class _VarlenAttn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal, window_size,
                softcap, alibi_slopes):
        dtype = q.dtype
        acc = torch.float64 if dtype == torch.float64 else torch.float32
        total_q, H, D = q.shape
        group = H // k.shape[1]
        left, right = window_size
        if causal:
            right = 0
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        out = torch.zeros(total_q, H, v.shape[-1], dtype=acc)
        lse2 = torch.full((H, total_q), -math.inf, dtype=acc)
        for b in range(len(cq) - 1):
            qs, qe, ks, ke, off = _bounds(cq, ck, b, max_seqlen_q, max_seqlen_k)
            if qe == qs or ke == ks:
                continue
            qb = q[qs:qe].transpose(0, 1).to(acc)
            kb = k[ks:ke].transpose(0, 1).to(acc).repeat_interleave(group, 0)
            vb = v[ks:ke].transpose(0, 1).to(acc).repeat_interleave(group, 0)
            slope = None
            if alibi_slopes is not None:
                slope = (alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]).to(acc)
            o, l2 = _seq_fwd(qb, kb, vb, off, scale, softcap, slope, left, right)
            out[qs:qe] = o.transpose(0, 1)
            lse2[:, qs:qe] = l2
        ctx.save_for_backward(q, k, v, out, lse2)
        ctx.args = (cq, ck, max_seqlen_q, max_seqlen_k, scale, (left, right), softcap, alibi_slopes, group, acc)
        lse = lse2 * LN2
        ctx.mark_non_differentiable(lse)
        return out.to(dtype), lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse2 = ctx.saved_tensors
        cq, ck, max_seqlen_q, max_seqlen_k, scale, (left, right), softcap, alibi_slopes, group, acc = ctx.args
        H = q.shape[1]
        Hkv = k.shape[1]
        dq = torch.zeros(q.shape, dtype=acc)
        dk = torch.zeros(k.shape, dtype=acc)
        dv = torch.zeros(v.shape, dtype=acc)
        for b in range(len(cq) - 1):
            qs, qe, ks, ke, off = _bounds(cq, ck, b, max_seqlen_q, max_seqlen_k)
            if qe == qs or ke == ks:
                continue
            qb = q[qs:qe].transpose(0, 1).to(acc)
            kb = k[ks:ke].transpose(0, 1).to(acc).repeat_interleave(group, 0)
            vb = v[ks:ke].transpose(0, 1).to(acc).repeat_interleave(group, 0)
            dob = dout[qs:qe].transpose(0, 1).to(acc)
            ob = out[qs:qe].transpose(0, 1)
            slope = None
            if alibi_slopes is not None:
                slope = (alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]).to(acc)
            dqb, dkb, dvb = _seq_bwd(dob, qb, kb, vb, ob, lse2[:, qs:qe], off, scale, softcap, slope, left, right)
            S = ke - ks
            dq[qs:qe] = dqb.transpose(0, 1)
            dk[ks:ke] = dkb.view(Hkv, group, S, -1).sum(1).transpose(0, 1)
            dv[ks:ke] = dvb.view(Hkv, group, S, -1).sum(1).transpose(0, 1)
        return (dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None, None, None, None, None,
                None)


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(q.shape[-1])
    out, lse = _VarlenAttn.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                                 causal, tuple(window_size), float(softcap), alibi_slopes)
    if return_attn_probs:
        return out, lse, None
    return out
