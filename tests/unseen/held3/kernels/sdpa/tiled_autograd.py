"""Tiled online-softmax SDPA as a torch.autograd.Function with a hand-written recomputing backward."""
import math

import torch

TRUTH = {"api": "sdpa", "bugs": [], "kind": "correct"}

_KV_TILE = 64


def _work_dtype(dt):
    return torch.float64 if dt == torch.float64 else torch.float32


def _expand_heads(x, rep):
    return x if rep == 1 else x.repeat_interleave(rep, dim=-3)


class _TiledSDPA(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, add_mask, keep, scale, rep):
        wd = _work_dtype(q.dtype)
        qf = q.to(wd)
        kf = _expand_heads(k.to(wd), rep)
        vf = _expand_heads(v.to(wd), rep)
        batch = torch.broadcast_shapes(qf.shape[:-2], kf.shape[:-2], vf.shape[:-2])
        L, S = qf.size(-2), kf.size(-2)
        qf = qf.expand(*batch, L, qf.size(-1))
        kf = kf.expand(*batch, S, kf.size(-1))
        vf = vf.expand(*batch, S, vf.size(-1))

        m = torch.full((*batch, L), float("-inf"), dtype=wd, device=q.device)
        l = torch.zeros((*batch, L), dtype=wd, device=q.device)
        acc = torch.zeros((*batch, L, vf.size(-1)), dtype=wd, device=q.device)
        for j0 in range(0, S, _KV_TILE):
            j1 = min(S, j0 + _KV_TILE)
            s = torch.matmul(qf, kf[..., j0:j1, :].transpose(-2, -1)) * scale
            if add_mask is not None:
                s = s + add_mask[..., j0:j1].to(wd)
            if keep is not None:
                s = s.masked_fill(~keep[..., j0:j1], float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            m_use = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
            alpha = torch.exp(m - m_use)
            p = torch.exp(s - m_use.unsqueeze(-1))
            l = l * alpha + p.sum(dim=-1)
            acc = acc * alpha.unsqueeze(-1) + torch.matmul(p, vf[..., j0:j1, :])
            m = m_new
        nonempty = l > 0
        out = acc / torch.where(nonempty, l, torch.ones_like(l)).unsqueeze(-1)
        lse = torch.where(nonempty, m + torch.log(torch.where(nonempty, l, torch.ones_like(l))),
                          torch.full_like(l, float("-inf")))
        ctx.save_for_backward(q, k, v, add_mask, keep, out, lse)
        ctx.scale = scale
        ctx.rep = rep
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, dout):
        q, k, v, add_mask, keep, out, lse = ctx.saved_tensors
        scale, rep = ctx.scale, ctx.rep
        wd = out.dtype
        batch = out.shape[:-2]
        qf = q.to(wd).expand(*batch, q.size(-2), q.size(-1))
        kf = _expand_heads(k.to(wd), rep)
        vf = _expand_heads(v.to(wd), rep)
        kf = kf.expand(*batch, kf.size(-2), kf.size(-1))
        vf = vf.expand(*batch, vf.size(-2), vf.size(-1))
        do = dout.to(wd)

        s = torch.matmul(qf, kf.transpose(-2, -1)) * scale
        if add_mask is not None:
            s = s + add_mask.to(wd)
        if keep is not None:
            s = s.masked_fill(~keep, float("-inf"))
        lse_use = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
        p = torch.exp(s - lse_use.unsqueeze(-1))

        dv = torch.matmul(p.transpose(-2, -1), do)
        dp = torch.matmul(do, vf.transpose(-2, -1))
        delta = (do * out).sum(dim=-1, keepdim=True)
        ds = p * (dp - delta)
        dq = torch.matmul(ds, kf) * scale
        dk = torch.matmul(ds.transpose(-2, -1), qf) * scale

        def fold(g, like):
            if rep > 1:
                g = g.reshape(*g.shape[:-3], g.size(-3) // rep, rep, g.size(-2), g.size(-1)).sum(dim=-3)
            return g.sum_to_size(like.shape).to(like.dtype)

        dq = dq.sum_to_size(q.shape).to(q.dtype)
        dk = fold(dk, k)
        dv = fold(dv, v)
        dmask = None
        if add_mask is not None and ctx.needs_input_grad[3]:
            dmask = ds.sum_to_size(add_mask.shape).to(add_mask.dtype)
        return dq, dk, dv, dmask, None, None, None


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    L, S = query.size(-2), key.size(-2)
    sm_scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    rep = 1
    if enable_gqa and query.dim() >= 3 and key.size(-3) != query.size(-3):
        rep = query.size(-3) // key.size(-3)
    keep = None
    add_mask = None
    if is_causal:
        keep = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = attn_mask if keep is None else keep & attn_mask
        else:
            add_mask = attn_mask
    return _TiledSDPA.apply(query, key, value, add_mask, keep, sm_scale, rep)
