"""F.scaled_dot_product_attention's signature, for the precision kernels: its arguments read once into heads-first
tensors, an additive bias (-inf where a key is hidden) and a float scale, and a right tiled kernel that keeps float32
statistics for half inputs as FlashAttention does.

PyTorch's meaning: q (..., H, L, E), k (..., Hkv, S, E), v (..., Hkv, S, Ev); a bool attn_mask keeps the keys where it
is True, a float one is added to the scores; is_causal is aligned top-left (query i sees keys j <= i) and, given with
a mask, keeps the keys both allow; a CausalBias names its own alignment; enable_gqa serves query head h from key head
h // (H / Hkv). A row that sees no key is 0.
"""

from __future__ import annotations

import math

import torch
from torch.nn.attention.bias import CausalBias

from tests.api_corpus.common import compute_dtype, no_dropout, online_finish, online_init, online_step

BLOCK_N = 32


def sdpa_bias(attn_mask, is_causal: bool, L: int, S: int, dtype, device):
    """The mask and is_causal as one additive float bias broadcasting to (..., L, S), or None."""
    bias = None
    if isinstance(attn_mask, CausalBias):
        attn_mask = attn_mask._materialize(device)
    if attn_mask is not None:
        bias = (torch.zeros(attn_mask.shape, dtype=dtype, device=device).masked_fill(~attn_mask, -math.inf)
                if attn_mask.dtype == torch.bool else attn_mask.to(dtype))
    if is_causal:
        upper_left = torch.ones(L, S, dtype=torch.bool, device=device).tril()
        causal = torch.zeros(L, S, dtype=dtype, device=device).masked_fill(~upper_left, -math.inf)
        bias = causal if bias is None else bias + causal
    return bias


def sdpa_args(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, dtype=None):
    """Heads-first q, k, v in dtype (default: the compute dtype), key heads gathered to the query heads, the bias
    and the float scale."""
    no_dropout(dropout_p)
    dt = compute_dtype(q.dtype) if dtype is None else dtype
    if q.dim() >= 3 and enable_gqa and q.shape[-3] != k.shape[-3]:
        G = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(G, dim=-3), v.repeat_interleave(G, dim=-3)
    L, S = q.shape[-2], k.shape[-2]
    sc = q.shape[-1] ** -0.5 if scale is None else float(scale)
    return q.to(dt), k.to(dt), v.to(dt), sdpa_bias(attn_mask, is_causal, L, S, compute_dtype(q.dtype), q.device), sc


def round_p(p, dtype):
    """P rounded to the input dtype before P.V, as FlashAttention does, in the forward only (its backward works from
    the float32 statistics): a straight-through rounding."""
    if dtype in (torch.float32, torch.float64):
        return p
    return p + (p.to(dtype).to(p.dtype) - p).detach()


def sdpa_tiled(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Right: key tiles of 32 under an online softmax; half inputs upcast tile by tile (exact products, float32
    sums), float32 max, sum and accumulator, P rounded to the input dtype before P.V."""
    qc, kc, vc, bias, sc = sdpa_args(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    S = kc.shape[-2]
    shape = torch.broadcast_shapes(qc.shape[:-1], kc.shape[:-2] + (qc.shape[-2],))
    st = online_init(shape, vc.shape[-1], qc.dtype, q.device)
    for j0 in range(0, S, BLOCK_N):
        j1 = min(j0 + BLOCK_N, S)
        s = qc @ kc[..., j0:j1, :].transpose(-2, -1) * sc
        if bias is not None:
            s = s + bias[..., j0:j1] if bias.shape[-1] == S else s + bias
        m, l, acc = st
        m_new = torch.maximum(m, s.detach().amax(-1))
        shift = torch.where(torch.isneginf(m_new), 0.0, m_new)
        p = torch.exp(s - shift[..., None])
        alpha = torch.exp(m - shift)
        st = m_new, l * alpha + p.sum(-1), acc * alpha[..., None] + round_p(p, q.dtype) @ vc[..., j0:j1, :]
    return online_finish(*st)[0].to(q.dtype)


def sdpa_dense(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Right: the five lines, in float32 (float64 for float64) for every input dtype; one tile of online_step."""
    qc, kc, vc, bias, sc = sdpa_args(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    s = qc @ kc.transpose(-2, -1) * sc
    s = s if bias is None else s + bias
    st = online_init(s.shape[:-1], vc.shape[-1], qc.dtype, q.device)
    return online_finish(*online_step(*st, s, vc))[0].to(q.dtype)
