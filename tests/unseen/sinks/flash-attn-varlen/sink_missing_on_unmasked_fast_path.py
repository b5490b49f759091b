"""flash_attn_varlen_func with sinks, vectorised: pad the packed sequences to (B, max_seqlen) and run one batched
softmax; an unmasked fast path (no causal, no window, no soft-cap, no ALiBi) skips the visibility mask work.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": ["the fast path taken when there is no causal mask, window, soft-cap or ALiBi never adds the sink, so "
             "plain (non-causal) calls return out and lse as if learnable_sink were None"],
    "kind": "semantic",
}


def _pad(x, cu, max_len):
    """(total, H, D) -> (B, max_len, H, D) plus a (B, max_len) validity mask."""
    B = cu.numel() - 1
    lens = (cu[1:] - cu[:-1]).long()
    pos = torch.arange(max_len, device=x.device)
    valid = pos[None, :] < lens[:, None]
    idx = (cu[:-1].long()[:, None] + pos[None, :]).clamp(max=max(x.shape[0] - 1, 0))
    if x.shape[0] == 0:
        return x.new_zeros(B, max_len, *x.shape[1:]), valid
    return x[idx] * valid[..., None, None], valid


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    total_q, H, D = q.shape
    Hkv = k.shape[1]
    B = cu_seqlens_q.numel() - 1
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    Lm, Sm = int(max_seqlen_q), int(max_seqlen_k)
    qp, qvalid = _pad(q.to(cdt), cu_seqlens_q, Lm)
    kp, kvalid = _pad(k.to(cdt), cu_seqlens_k, Sm)
    vp, _ = _pad(v.to(cdt), cu_seqlens_k, Sm)
    kp = kp.repeat_interleave(H // Hkv, dim=2)
    vp = vp.repeat_interleave(H // Hkv, dim=2)
    s = torch.einsum("blhd,bshd->bhls", qp, kp) * scale
    keymask = kvalid[:, None, None, :].expand(B, 1, Lm, Sm)

    fast = not causal and window_size == (-1, -1) and softcap == 0.0 and alibi_slopes is None
    if fast:
        s = s.masked_fill(~keymask, float("-inf"))
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
        e = torch.exp(s - m)
        z = e.sum(-1, keepdim=True)
    else:
        if softcap > 0.0:
            s = softcap * torch.tanh(s / softcap)
        lens_q = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]).long().view(B, 1, 1, 1)
        lens_k = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).long().view(B, 1, 1, 1)
        i = torch.arange(Lm, device=q.device).view(1, 1, Lm, 1) + lens_k - lens_q
        j = torch.arange(Sm, device=q.device).view(1, 1, 1, Sm)
        if alibi_slopes is not None:
            sl = alibi_slopes.to(cdt).expand(B, H) if alibi_slopes.dim() == 1 else alibi_slopes.to(cdt)
            s = s - sl.view(B, H, 1, 1) * (i - j).abs()
        vis = keymask.clone()
        left, right = window_size
        if causal:
            right = 0
        if left >= 0:
            vis = vis & (j >= i - left)
        if right >= 0:
            vis = vis & (j <= i + right)
        s = s.masked_fill(~vis, float("-inf"))
        m = s.amax(-1, keepdim=True)
        if learnable_sink is not None:
            m = torch.maximum(m, learnable_sink.to(cdt).view(1, H, 1, 1))
        m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
        e = torch.exp(s - m)
        z = e.sum(-1, keepdim=True)
        if learnable_sink is not None:
            z = z + torch.exp(learnable_sink.to(cdt).view(1, H, 1, 1) - m)
    o = torch.einsum("bhls,bshd->blhd", e / torch.where(z == 0, torch.ones_like(z), z), vp)
    lse_p = (m + torch.log(z)).squeeze(-1)  # B H Lm

    out = torch.empty(total_q, H, v.shape[-1], dtype=cdt, device=q.device)
    out[:] = o[qvalid]
    lse = lse_p.permute(1, 0, 2)[:, qvalid]
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
