TRUTH = {'api': 'flash-attn-varlen', 'bugs': ["The backward writes each sequence's dK/dV at the query offset cu_seqlens_q[b] instead of cu_seqlens_k[b]; shows on gradients whenever query and key packings differ."], 'kind': 'semantic'}
import math
import torch

BLOCK_N = 32


def _tile_scores(qh, kt, sc, j0, L, S, left, right, softcap, slopes):
    t = torch.matmul(qh, kt.transpose(-1, -2)) * sc
    s = softcap * torch.tanh(t / softcap) if softcap > 0 else t
    qpos = torch.arange(L)[:, None] + (S - L)
    kpos = torch.arange(j0, j0 + kt.shape[1])[None, :]
    if slopes is not None:
        s = s - slopes[:, None, None] * (qpos - kpos).abs().to(s.dtype)
    keep = torch.ones(L, kt.shape[1], dtype=torch.bool)
    if left >= 0:
        keep = keep & (kpos >= qpos - left)
    if right >= 0:
        keep = keep & (kpos <= qpos + right)
    return t, s.masked_fill(~keep, -math.inf)


class _VarlenAttn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_q, cu_k, sc, left, right, softcap, slopes):
        tq, H, D = q.shape
        Hkv = k.shape[1]
        g = H // Hkv
        out = torch.zeros(tq, H, v.shape[-1], dtype=q.dtype)
        lse = torch.full((H, tq), -math.inf, dtype=q.dtype)
        for b in range(cu_q.numel() - 1):
            qs, qe, ks, ke = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
            L, S = qe - qs, ke - ks
            if L == 0 or S == 0:
                continue
            sl = None if slopes is None else (slopes if slopes.dim() == 1 else slopes[b])
            qh = q[qs:qe].transpose(0, 1)
            kh = k[ks:ke].transpose(0, 1).repeat_interleave(g, 0)
            vh = v[ks:ke].transpose(0, 1).repeat_interleave(g, 0)
            m = torch.full((H, L, 1), -math.inf, dtype=q.dtype)
            l = torch.zeros((H, L, 1), dtype=q.dtype)
            acc = torch.zeros((H, L, v.shape[-1]), dtype=q.dtype)
            for j0 in range(0, S, BLOCK_N):
                j1 = min(j0 + BLOCK_N, S)
                _, s = _tile_scores(qh, kh[:, j0:j1], sc, j0, L, S, left, right, softcap, sl)
                m_new = torch.maximum(m, s.amax(-1, keepdim=True))
                m_use = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
                alpha = torch.exp(m - m_use)
                p = torch.exp(s - m_use)
                l = alpha * l + p.sum(-1, keepdim=True)
                acc = alpha * acc + torch.matmul(p, vh[:, j0:j1])
                m = m_new
            o = acc / torch.where(l > 0, l, torch.ones_like(l))
            out[qs:qe] = o.transpose(0, 1)
            lse[:, qs:qe] = torch.where(l > 0, m + torch.log(l), torch.full_like(l, -math.inf)).squeeze(-1)
        ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k)
        ctx.cfg = (sc, left, right, softcap, slopes)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
        sc, left, right, softcap, slopes = ctx.cfg
        H, Hkv = q.shape[1], k.shape[1]
        g = H // Hkv
        dq = torch.zeros_like(q)
        dk = torch.zeros_like(k)
        dv = torch.zeros_like(v)
        for b in range(cu_q.numel() - 1):
            qs, qe, ks, ke = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
            L, S = qe - qs, ke - ks
            if L == 0 or S == 0:
                continue
            sl = None if slopes is None else (slopes if slopes.dim() == 1 else slopes[b])
            qh = q[qs:qe].transpose(0, 1)
            kh = k[ks:ke].transpose(0, 1).repeat_interleave(g, 0)
            vh = v[ks:ke].transpose(0, 1).repeat_interleave(g, 0)
            doh = dout[qs:qe].transpose(0, 1)
            oh = out[qs:qe].transpose(0, 1)
            t, s = _tile_scores(qh, kh, sc, 0, L, S, left, right, softcap, sl)
            lb = lse[:, qs:qe, None]
            lb = torch.where(torch.isinf(lb), torch.full_like(lb, math.inf), lb)
            p = torch.exp(s - lb)
            dvh = torch.matmul(p.transpose(-1, -2), doh)
            dp = torch.matmul(doh, vh.transpose(-1, -2))
            delta = (doh * oh).sum(-1, keepdim=True)
            ds = p * (dp - delta)
            if softcap > 0:
                ds = ds * (1.0 - torch.tanh(t / softcap).pow(2))
            dq[qs:qe] = (torch.matmul(ds, kh) * sc).transpose(0, 1)
            dkh = torch.matmul(ds.transpose(-1, -2), qh) * sc
            dk[qs:qs + S] = dkh.view(Hkv, g, S, -1).sum(1).transpose(0, 1)
            dv[qs:qs + S] = dvh.view(Hkv, g, S, -1).sum(1).transpose(0, 1)
        return dq, dk, dv, None, None, None, None, None, None, None


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    D = q.shape[-1]
    cdt = torch.float32 if q.dtype == torch.bfloat16 else q.dtype
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    slopes = None if alibi_slopes is None else alibi_slopes.to(cdt)
    out, lse = _VarlenAttn.apply(q.to(cdt), k.to(cdt), v.to(cdt), cu_seqlens_q, cu_seqlens_k, sc, left, right,
                                 float(softcap), slopes)
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
