"""Varlen flash attention vectorised over the packed batch: one (H, total_q, total_k) score matrix with a
block-diagonal sequence mask and per-row diagonal offsets, softmax in float32."""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        (
            "masked scores are filled with finfo.min instead of -inf, so a row that sees no key (causal/window "
            "dead rows, sequences with no keys) gets a mix of the values of every packed key and a finite lse "
            "instead of output 0 and lse -inf"
        ),
    ],
    "kind": "semantic",
}


def _segments(cu, total):
    lens = (cu[1:] - cu[:-1]).long()
    seg = torch.repeat_interleave(torch.arange(lens.numel()), lens, output_size=total)
    local = torch.arange(total) - cu[:-1].long()[seg]
    return seg, local, lens


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout is not supported")
    total_q, n_heads, head_dim = q.shape
    total_k, n_kv_heads, _ = k.shape
    group = n_heads // n_kv_heads
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    left, right = window_size
    if causal:
        right = 0

    seg_q, loc_q, len_q = _segments(cu_seqlens_q, total_q)
    seg_k, loc_k, len_k = _segments(cu_seqlens_k, total_k)
    # query row position on its own sequence's key axis (bottom-right alignment)
    pos_q = loc_q + (len_k - len_q)[seg_q]

    qh = q.to(acc).transpose(0, 1)
    kh = k.to(acc).transpose(0, 1).repeat_interleave(group, dim=0)
    vh = v.to(acc).transpose(0, 1).repeat_interleave(group, dim=0)
    s = torch.matmul(qh, kh.transpose(-1, -2)) * scale
    if softcap > 0.0:
        s = softcap * torch.tanh(s / softcap)

    rel = pos_q.unsqueeze(1) - loc_k.unsqueeze(0)
    if alibi_slopes is not None:
        if alibi_slopes.dim() == 1:
            slopes = alibi_slopes.to(acc).view(-1, 1, 1)
        else:
            slopes = alibi_slopes.to(acc).transpose(0, 1)[:, seg_q].unsqueeze(-1)
        s = s - slopes * rel.abs().to(acc)

    keep = seg_q.unsqueeze(1) == seg_k.unsqueeze(0)
    if right >= 0:
        keep &= rel >= -right
    if left >= 0:
        keep &= rel <= left
    s = s.masked_fill(~keep, torch.finfo(acc).min)

    if total_k == 0:
        lse = torch.full((n_heads, total_q), -math.inf, dtype=acc)
        out = torch.zeros(total_q, n_heads, v.shape[-1], dtype=q.dtype)
    else:
        lse = torch.logsumexp(s, dim=-1)
        safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
        p = torch.exp(s - safe.unsqueeze(-1))
        out = torch.matmul(p, vh).transpose(0, 1).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
