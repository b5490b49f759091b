"""The answers the corpus is checked against: each API's meaning as a dense float64 computation, PyTorch's
F.scaled_dot_product_attention wherever the API's mask and bias can be said as its attn_mask, plain operations where a
soft-cap or score_mod bends the scores first. Written from the APIs' documentation, apart from the kernels.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def flash_dense_mask(L: int, S: int, causal: bool, window_size, device=None) -> torch.Tensor:
    """(L, S) bool: query i (at key i + S - L) sees key j within [i + S - L - left, i + S - L + right]."""
    left, right = window_size
    if causal:
        right = 0
    pos = torch.arange(L, device=device)[:, None] + S - L
    j = torch.arange(S, device=device)[None, :]
    seen = torch.ones(L, S, dtype=torch.bool, device=device)
    if left >= 0:
        seen = seen & (j >= pos - left)
    if right >= 0:
        seen = seen & (j <= pos + right)
    return seen


def _softmax_rows(s):
    """PyTorch's softmax on rows with -inf; rows with no finite score -> 0, lse -inf."""
    dead = torch.isneginf(s).all(-1, keepdim=True)
    p = torch.softmax(s.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0)
    return p, torch.logsumexp(s, -1)


def flash_ref(q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None):
    """(B, L, H, D) -> out (B, L, H, D), lse (B, H, L), in float64."""
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    scale = D ** -0.5 if softmax_scale is None else softmax_scale
    qh, kh, vh = (t.double().transpose(1, 2) for t in (q, k, v))
    kh, vh = kh.repeat_interleave(H // Hkv, 1), vh.repeat_interleave(H // Hkv, 1)
    seen = flash_dense_mask(L, S, causal, window_size, q.device)
    bias = torch.zeros(1, 1, L, S, dtype=torch.float64, device=q.device)
    if alibi_slopes is not None:
        dist = (torch.arange(L, device=q.device)[:, None] + S - L - torch.arange(S, device=q.device)[None, :]).abs()
        bias = -alibi_slopes.double().reshape(-1, H, 1, 1) * dist
    s = qh @ kh.transpose(-2, -1) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    s = (s + bias).masked_fill(~seen, -math.inf)
    if softcap > 0:
        p, lse = _softmax_rows(s)
        out = p @ vh
    else:
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=bias.masked_fill(~seen, -math.inf), scale=scale)
        lse = torch.logsumexp(s, -1)
    return out.transpose(1, 2), lse


def varlen_ref(q, k, v, cu_seqlens_q, cu_seqlens_k, **kw):
    """(total_q, H, D) -> out (total_q, H, D), lse (H, total_q): each sequence its own flash_ref."""
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    outs, lses = [], []
    slopes = kw.pop("alibi_slopes", None)
    for b in range(len(cq) - 1):
        sl = None if slopes is None else slopes[b] if slopes.dim() == 2 else slopes
        out, lse = flash_ref(q[None, cq[b]:cq[b + 1]], k[None, ck[b]:ck[b + 1]], v[None, ck[b]:ck[b + 1]],
                             alibi_slopes=sl, **kw)
        outs.append(out[0])
        lses.append(lse[0])
    return torch.cat(outs), torch.cat(lses, -1)


def paged_ref(q, k_cache, v_cache, cache_seqlens, block_table, k=None, v=None, softmax_scale=None, softcap=0.0,
              causal=False, window_size=(-1, -1)):
    """Each sequence's keys read from its pages in table order, the new keys appended; out (B, Lq, H, D), lse."""
    bs = k_cache.shape[1]
    outs, lses = [], []
    for b in range(q.shape[0]):
        n = int(cache_seqlens[b])
        rows = torch.cat([k_cache[int(p)] for p in block_table[b]])[:n], torch.cat([v_cache[int(p)] for p in
                                                                                   block_table[b]])[:n]
        kb, vb = rows
        if k is not None:
            kb, vb = torch.cat([kb, k[b]]), torch.cat([vb, v[b]])
        assert kb.shape[0] <= bs * block_table.shape[1]
        out, lse = flash_ref(q[b:b + 1], kb[None], vb[None], softmax_scale=softmax_scale, causal=causal,
                             window_size=window_size, softcap=softcap)
        outs.append(out)
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses)


def grid_eval(fn, B, H, L, S, device=None):
    """fn(b, h, q_idx, kv_idx) at every index, as FlexAttention evaluates a mask_mod: one index at a time (vmap)."""
    f = fn
    for dim in (3, 2, 1, 0):
        f = torch.vmap(f, in_dims=tuple(0 if d == dim else None for d in range(4)))
    return f(*(torch.arange(n, device=device) for n in (B, H, L, S)))


def flex_ref(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False):
    """(B, H, L, E) -> out (B, H, L, Ev), lse (B, H, L), float64: score_mod on the scaled score, then the mask."""
    B, H, L, E = query.shape
    S, Hkv = key.shape[-2], key.shape[-3]
    sc = E ** -0.5 if scale is None else scale
    q, k, v = (t.double() for t in (query, key, value))
    k, v = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
    s = q @ k.transpose(-2, -1) * sc
    if score_mod is not None:
        b, h = torch.arange(B).view(B, 1, 1, 1), torch.arange(H).view(1, H, 1, 1)
        s = score_mod(s, b, h, torch.arange(L).view(1, 1, L, 1), torch.arange(S).view(1, 1, 1, S))
    if block_mask is not None:
        s = s.masked_fill(~grid_eval(block_mask.mask_mod, B, H, L, S), -math.inf)
    p, lse = _softmax_rows(s)
    if score_mod is None:
        bias = torch.zeros_like(s).masked_fill(torch.isneginf(s), -math.inf)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=sc), lse
    return p @ v, lse
