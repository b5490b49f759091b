"""Attention kernels with gpt-oss's attention sinks, right and wrong, written to each API verify judges sinks on.

The sdpa face ``kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
*, sinks=None)``; FlashAttention's ``flash_attn_func``, ``flash_attn_varlen_func`` and ``flash_attn_with_kvcache``
(over a paged cache) with ``learnable_sink=None``, each returning its log-sum-exp (the sink in it). Without sinks each
is PyTorch's own answer (SDPA, or tests/api_functions.py's API references), so a wrong one is wrong only where sinks
are given. With sinks the forward is written here in plain PyTorch, independently of the judge's oracle: the sink a
column of each row's softmax (float32 statistics, float64 for float64 inputs), and the backward by hand
(:class:`_Attention`, as a fused kernel's is: dS = P (dP - D), d sink_h = -Σ P_sink D), so that a gradient bug is one
line. ``BUGS`` lists the wrong ones: one bug each.
"""

from __future__ import annotations

import math

import torch

import attnlab
from tests import api_functions as ref

TILE = 32  # the key tile of the kernel that adds its sink once per tile


def _row_sinks(sinks: torch.Tensor, B: int, H: int, L: int, G: int, bug: str | None) -> torch.Tensor:
    """Each row's sink logit (B, H, L), as the kernel reads it (``bug``: another head's, by position, ...)."""
    s = sinks.view(1, H, 1).expand(B, H, L)
    if bug == "head0":
        s = sinks[0].expand(B, H, L)
    elif bug == "kv-head":
        s = sinks[torch.arange(H) // G].view(1, H, 1).expand(B, H, L)
    elif bug == "query":
        s = sinks[torch.arange(L) % H].view(1, 1, L).expand(B, H, L)
    elif bug == "halved":  # a bug no reading of the judge's is: each sink read at half its logit
        s = (sinks / 2).view(1, H, 1).expand(B, H, L)
    elif bug == "ignored":
        s = torch.full((B, H, L), -math.inf, dtype=sinks.dtype)
    return s


def _forward(q, k, v, scale, seen, bias, sinks, G, bug):
    """(out, lse, the weights with the sink's last) in the work dtype: q (B, H, L, D), k, v repeated to H heads."""
    s = q @ k.transpose(-2, -1) * scale
    if bias is not None:
        s = s + bias
    if seen is not None:
        s = s.masked_fill(~seen, -math.inf)
    B, H, L, S = s.shape
    per = _row_sinks(sinks, B, H, L, G, bug)
    if bug == "per-tile":  # the sink's exp added once per key tile of the loop: sink + ln T
        per = per + math.log(-(-S // TILE))
    elif bug == "scaled":  # the sink column appended before the scale is applied
        per = per * scale
    elif bug == "unshifted":  # exp(sink) beside exp(s - m): the sink's weight exp(m) times too large
        per = per + s.amax(-1)
    elif bug == "masked" and seen is not None:  # the causal mask built over S + 1 columns hides the sink's column S
        per = per.masked_fill(~(torch.arange(L, device=s.device) >= S).view(1, 1, L), -math.inf)
    row = torch.cat([s, per[..., None]], dim=-1)
    lse = torch.logsumexp(row, dim=-1)
    W = torch.exp(row - torch.where(torch.isneginf(lse), 0.0, lse)[..., None])
    if bug == "column-shifted":  # the sink's column put first, the last column dropped
        return torch.cat([W[..., -1:], W[..., :-2]], dim=-1) @ v, lse, W
    return W[..., :-1] @ v, lse, W


class _Attention(torch.autograd.Function):
    """Attention with sinks, its backward written out: dV = Pᵀ dO, dP = dO Vᵀ, D = rowsum(dO O), dS = P (dP - D),
    dQ = dS K scale, dK = dSᵀ Q scale, d sink_h = -Σ_{b,i} P_sink (D) -- or, with ``grad_bug``, that last one wrong."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, scale, seen, bias, bug, grad_bug):
        G = q.shape[1] // k.shape[1]
        kx, vx = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
        out, lse, W = _forward(q, kx, vx, scale, seen, bias, sinks, G, bug)
        ctx.save_for_backward(q, kx, vx, W, out)
        ctx.scale, ctx.G, ctx.grad_bug = scale, G, grad_bug
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dO, _):
        q, kx, vx, W, out = ctx.saved_tensors
        P, Ps = W[..., :-1], W[..., -1]
        if ctx.grad_bug == "keys-lse":  # P recomputed from the keys' log-sum-exp alone: each row sums to 1
            P, Ps = P / (1 - Ps)[..., None], Ps / (1 - Ps)
        D = (dO * out).sum(-1)
        dS = P * (dO @ vx.transpose(-2, -1) - D[..., None])
        dq = dS @ kx * ctx.scale
        B, H, S, E = kx.shape
        dk = (dS.transpose(-2, -1) @ q * ctx.scale).view(B, H // ctx.G, ctx.G, S, E).sum(2)
        dv = (P.transpose(-2, -1) @ dO).view(B, H // ctx.G, ctx.G, S, vx.shape[-1]).sum(2)
        ds = _sink_grad(Ps, D, ctx.G, ctx.grad_bug)
        return dq, dk, dv, ds, None, None, None, None, None


def _sink_grad(Ps, D, G, bug):
    rows = -Ps * D  # (B, H, L)
    if bug == "zero":
        return None
    if bug == "sign":
        return -rows.sum((0, 2))
    if bug == "no-D":
        return -Ps.sum((0, 2))
    if bug == "group":
        return rows.sum((0, 2)).view(-1, G).sum(1).repeat_interleave(G)
    if bug == "batch0":
        return rows[:1].sum((0, 2))
    return rows.sum((0, 2))


def attend(q, k, v, scale, seen, sinks, bias=None, bug=None, grad_bug=None):
    """q (B, H, L, D), k, v (B, Hkv, S, D), ``seen`` bool broadcasting to (B, H, L, S) or None, ``bias`` float or None,
    ``sinks`` (H,) -> (out in q's dtype, lse float32 or float64)."""
    dt = q.dtype
    work = torch.float64 if dt == torch.float64 else torch.float32
    if bug == "dead-nan":
        return _dead_nan(q, k, v, scale, seen, bias, sinks, work)
    out, lse = _Attention.apply(q.to(work), k.to(work), v.to(work), sinks.to(work), scale, seen,
                                None if bias is None else bias.to(work), bug, grad_bug)
    if bug == "not-in-lse":  # the log-sum-exp of the keys alone
        G = q.shape[1] // k.shape[1]
        s = q.to(work) @ k.to(work).repeat_interleave(G, 1).transpose(-2, -1) * scale
        s = s if bias is None else s + bias.to(work)
        lse = torch.logsumexp(s if seen is None else s.masked_fill(~seen, -math.inf), -1)
    return out.to(dt), lse


def _dead_nan(q, k, v, scale, seen, bias, sinks, work):
    """The sink left out of the row max: a row that sees no key has max -inf, and its weights NaN."""
    G = q.shape[1] // k.shape[1]
    qq, kk, vv = q.to(work), k.to(work).repeat_interleave(G, 1), v.to(work).repeat_interleave(G, 1)
    s = qq @ kk.transpose(-2, -1) * scale
    s = s if bias is None else s + bias.to(work)
    s = s if seen is None else s.masked_fill(~seen, -math.inf)
    m = s.amax(-1, keepdim=True)
    e = torch.exp(s - m)
    total = e.sum(-1, keepdim=True) + torch.exp(sinks.to(work).view(1, -1, 1, 1) - m)
    return ((e / total) @ vv).to(q.dtype), (m + total.log())[..., 0]


# ---- the sdpa face -------------------------------------------------------------------------------------------------


def sdpa_right(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
               sinks=None):
    """Right: attnlab's matrix form, which takes sinks."""
    return attnlab.attention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, impl="matrix",
                             sinks=sinks)


def sdpa_kernel(bug=None, grad_bug=None):
    """The sdpa face with ``bug`` (or ``grad_bug``) where sinks are given; PyTorch's SDPA where they are not."""
    def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
               sinks=None):
        if sinks is None:
            return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p,
                                                                    is_causal, scale=scale, enable_gqa=enable_gqa)
        lead, (H, L, E), S = query.shape[:-3], query.shape[-3:], key.shape[-2]
        q, k, v = (t.reshape(-1, *t.shape[-3:]) for t in (query, key, value))
        seen = torch.ones(L, S, dtype=torch.bool).tril() if is_causal else None
        bias = None
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            seen = attn_mask if seen is None else attn_mask & seen
        elif attn_mask is not None:
            bias = attn_mask
        if seen is not None and seen.dim() > 2:
            seen = seen.expand(*lead, H, L, S).reshape(-1, H, L, S)
        if bias is not None and bias.dim() > 2:
            bias = bias.expand(*lead, H, L, S).reshape(-1, H, L, S)
        sc = E ** -0.5 if scale is None else float(scale)
        out, _ = attend(q, k, v, sc, seen, sinks, bias, bug, grad_bug)
        return out.reshape(*lead, H, L, -1)
    kernel.__name__ = kernel.__qualname__ = f"sdpa_sinks_{bug or grad_bug or 'plain'}"
    return kernel


# ---- FlashAttention's APIs -----------------------------------------------------------------------------------------


def flash_kernel(bug=None, grad_bug=None):
    """flash_attn_func with ``learnable_sink``: ``bug`` (or ``grad_bug``) where sinks are given."""
    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                        alibi_slopes=None, deterministic=False, return_attn_probs=False, learnable_sink=None):
        if learnable_sink is None:
            return ref.flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                                       deterministic, return_attn_probs)
        if softcap > 0 or alibi_slopes is not None:  # the modifiers with sinks: plain PyTorch's (flash_modified)
            return flash_modified()(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                                    deterministic, return_attn_probs, learnable_sink)
        B, L, H, D = q.shape
        S = k.shape[1]
        seen = ref.band(L, S, S - L, causal, window_size, q.device)
        scale = D ** -0.5 if softmax_scale is None else softmax_scale
        out, lse = attend(*(t.transpose(1, 2) for t in (q, k, v)), scale, seen, learnable_sink, None, bug, grad_bug)
        out = out.transpose(1, 2)
        return (out, lse, None) if return_attn_probs else out
    flash_attn_func.__qualname__ = f"flash_sinks_{bug or grad_bug or 'right'}"
    return flash_attn_func


def varlen_kernel(bug=None, grad_bug=None):
    """flash_attn_varlen_func with ``learnable_sink``: each sequence its own flash_attn_func problem."""
    flash = flash_kernel(bug, grad_bug)

    def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                               softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                               deterministic=False, return_attn_probs=False, learnable_sink=None):
        if learnable_sink is None:
            return ref.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                              dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                                              deterministic, return_attn_probs)
        outs, lses = [], []
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        for b in range(len(cq) - 1):
            out, lse, _ = flash(q[cq[b]:cq[b + 1]][None], k[ck[b]:ck[b + 1]][None], v[ck[b]:ck[b + 1]][None],
                                softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                                return_attn_probs=True, learnable_sink=learnable_sink)
            outs.append(out[0])
            lses.append(lse[0])
        out, lse = torch.cat(outs), torch.cat(lses, dim=-1)
        return (out, lse, None) if return_attn_probs else out
    flash_attn_varlen_func.__qualname__ = f"varlen_sinks_{bug or grad_bug or 'right'}"
    return flash_attn_varlen_func


def paged_kernel(bug=None):
    """flash_attn_with_kvcache over a paged cache with ``learnable_sink`` (forward only)."""
    def paged_decode(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
                     causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False, learnable_sink=None):
        if learnable_sink is None:
            return ref.paged_decode(q, k_cache, v_cache, k, v, cache_seqlens, block_table, softmax_scale, causal,
                                    window_size, softcap, return_softmax_lse)
        B, Lq, H, D = q.shape
        bs, table, lens = k_cache.shape[1], block_table.long(), cache_seqlens.long()
        if k is not None:
            for b in range(B):
                for t in range(k.shape[1]):
                    j = int(lens[b]) + t
                    k_cache[table[b, j // bs], j % bs], v_cache[table[b, j // bs], j % bs] = k[b, t], v[b, t]
            lens = lens + k.shape[1]
        kk, vv = (c[table].flatten(1, 2).transpose(1, 2) for c in (k_cache, v_cache))  # (B, Hkv, pages * bs, D)
        seen = torch.stack([torch.nn.functional.pad(ref.band(Lq, int(n), int(n) - Lq, causal, window_size, q.device),
                                                    (0, kk.shape[2] - int(n))) for n in lens])[:, None]
        scale = D ** -0.5 if softmax_scale is None else softmax_scale
        out, lse = attend(q.transpose(1, 2), kk, vv, scale, seen, learnable_sink, None, bug)
        out = out.transpose(1, 2)
        return (out, lse) if return_softmax_lse else out
    paged_decode.__qualname__ = f"paged_sinks_{bug or 'right'}"
    return paged_decode


def flash_modified(bug=None):
    """flash_attn_func with ``learnable_sink``, soft-cap and ALiBi, in plain PyTorch (autograd's backward); ``bug``
    "modified": the soft-cap and ALiBi applied after the sink's column is appended (the sink as key S)."""
    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                        alibi_slopes=None, deterministic=False, return_attn_probs=False, learnable_sink=None):
        if learnable_sink is None:
            return ref.flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                                       deterministic, return_attn_probs)
        B, L, H, D = q.shape
        S = k.shape[1]
        work = torch.float64 if q.dtype == torch.float64 else torch.float32
        qq, kk, vv = (t.transpose(1, 2).to(work) for t in (q, k, v))
        G = H // kk.shape[1]
        kk, vv = kk.repeat_interleave(G, 1), vv.repeat_interleave(G, 1)
        s = qq @ kk.transpose(-2, -1) * (D ** -0.5 if softmax_scale is None else softmax_scale)
        sink = learnable_sink.to(work).view(1, H, 1, 1).expand(B, H, L, 1)
        n = S + 1 if bug == "modified" else S  # the columns the modifiers are applied to
        if bug == "modified":
            s = torch.cat([s, sink], dim=-1)
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        if alibi_slopes is not None:
            i = torch.arange(L, device=q.device)[:, None] + S - L
            s = s - alibi_slopes.to(work).view(-1, H, 1, 1) * (i - torch.arange(n, device=q.device)).abs()
        if bug != "modified":
            s = torch.cat([s, sink], dim=-1)
        seen = torch.nn.functional.pad(ref.band(L, S, S - L, causal, window_size, q.device), (0, 1), value=True)
        s = s.masked_fill(~seen, -math.inf)
        lse = torch.logsumexp(s, dim=-1)
        out = (torch.softmax(s, dim=-1)[..., :-1] @ vv).to(q.dtype).transpose(1, 2)
        return (out, lse.detach(), None) if return_attn_probs else out
    flash_attn_func.__qualname__ = f"flash_sinks_mods_{bug or 'right'}"
    return flash_attn_func


BUGS = {  # the cause each wrong kernel's one bug is: the forward's (bug=) and the gradient's (grad_bug=)
    "ignored": "sink-ignored", "head0": "sink-head", "kv-head": "sink-kv-head", "query": "sink-query",
    "per-tile": "sink-per-tile", "not-in-lse": "sink-not-in-lse", "dead-nan": "dead-rows", "halved": "sinks",
    "scaled": "sink-scaled", "unshifted": "sink-unshifted", "masked": "sink-masked",
    "column-shifted": "sink-column-shifted",
}
GRAD_BUGS = {"zero": "dsink-zero", "sign": "dsink-sign", "no-D": "dsink-form", "group": "dsink-axis",
             "batch0": "dsink-axis", "keys-lse": "sink-backward"}
