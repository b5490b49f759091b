"""flash_attn_varlen_func: sequences of different lengths packed along one dim, each its own attention.

Sequence b owns query rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) and keys [cu_seqlens_k[b], cu_seqlens_k[b + 1]):
L_b and S_b of them, either possibly 0. Inside it everything is flash_attn_func's: query i of the sequence sits at key
i + S_b - L_b (causal and the window bottom-right, per sequence), and max_seqlen_q / max_seqlen_k only bound the
lengths (the CUDA kernel sizes its grid with them). The lse is (H, total_q). Two kernels: the CUDA kernel's grid
(a query block of one sequence walks that sequence's key tiles, all in packed indices) and xformers' block-diagonal
form (every query against every key, masked to its own sequence).
"""

from __future__ import annotations

import math

import torch

from tests.api_corpus.common import dense_softmax, no_dropout, online_finish, online_init, online_step
from tests.api_corpus.flash import BLOCK_M, BLOCK_N, key_range, scorer, tile_keep, to_heads, window_of


def packed_heads(q, k, v):
    """(total, H, D) -> (H, total, D) in the compute dtype, key heads gathered to the query heads."""
    qh, kh, vh = to_heads(q[None], k[None], v[None])
    return qh[0], kh[0], vh[0]


def seq_slopes(alibi_slopes, b: int, dtype):
    """Sequence b's ALiBi slopes as (H, 1, 1), from (H,) or (nseq, H)."""
    if alibi_slopes is None:
        return None
    row = alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes
    return row.to(dtype).view(-1, 1, 1)


def packed_finish(q, outs, lses, H, dv, dtype, return_attn_probs):
    """Per-block (H, Lt, Dv) outputs and (H, Lt) lses in packed order -> (total_q, H, Dv) and (H, total_q)."""
    out = torch.cat([torch.zeros(H, 0, dv, dtype=dtype, device=q.device), *outs], 1).transpose(0, 1).to(q.dtype)
    lse = torch.cat([torch.zeros(H, 0, dtype=dtype, device=q.device), *lses], 1)
    lse = lse if lse.dtype == torch.float64 else lse.float()
    return (out, lse, None) if return_attn_probs else out


def seq_walk(qh, kh, vh, cq, ck, left, right, score_of, key_end=None, offset=None):
    """The CUDA grid: for each sequence b and query block, the key tiles of its window, in packed indices.
    score_of(b) scores a tile (see flash.scorer); key_end(b) ends the sequence's keys (default cu_seqlens_k[b + 1]);
    offset(b, S_b, L_b) places query i at key i + offset (default S_b - L_b). Returns the blocks' outs and lses."""
    outs, lses = [], []
    for b in range(len(cq) - 1):
        qs, qe, ks = cq[b], cq[b + 1], ck[b]
        ke = ck[b + 1] if key_end is None else key_end(b)
        Sb, Lb = ke - ks, qe - qs
        off = Sb - Lb if offset is None else offset(b, Sb, Lb)
        score = score_of(b)
        for i0 in range(qs, qe, BLOCK_M):
            i1 = min(i0 + BLOCK_M, qe)
            rows = torch.arange(i0 - qs, i1 - qs, device=qh.device) + off
            m, l, acc = online_init(qh[:, i0:i1, 0].shape, vh.shape[-1], qh.dtype, qh.device)
            lo, hi = key_range(i0 - qs, i1 - qs, off, Sb, left, right)
            for j0 in range(lo - lo % BLOCK_N, hi, BLOCK_N):  # tiles in the sequence's own key indices
                j1 = min(j0 + BLOCK_N, Sb)
                cols = torch.arange(j0, j1, device=qh.device)
                s = score(qh[:, i0:i1] @ kh[:, ks + j0:ks + j1].transpose(-2, -1), rows, cols)
                m, l, acc = online_step(m, l, acc, s, vh[:, ks + j0:ks + j1])
            out, lse = online_finish(m, l, acc)
            outs.append(out)
            lses.append(lse)
    return outs, lses


def varlen_tiled(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
                 causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                 return_attn_probs=False):
    """Right: the CUDA kernel's grid over sequences, query blocks and key tiles, float32 statistics."""
    no_dropout(dropout_p)
    H, D = q.shape[1], q.shape[2]
    scale = D ** -0.5 if softmax_scale is None else softmax_scale
    qh, kh, vh = packed_heads(q, k, v)
    left, right = window_of(causal, window_size)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    outs, lses = seq_walk(qh, kh, vh, cq, ck, left, right,
                          lambda b: scorer(scale, softcap, seq_slopes(alibi_slopes, b, qh.dtype), left, right))
    return packed_finish(q, outs, lses, H, vh.shape[-1], qh.dtype, return_attn_probs)


def block_diagonal_scores(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_size, softcap,
                          alibi_slopes, q_side="right", k_side="right"):
    """Every query against every key: (H, total_q, total_k) scores, -inf outside each query's own sequence and
    window. Each packed row finds its sequence with searchsorted(cu_seqlens, row, side) - 1 (side 'right' is right).
    Returns the scores and the heads-first values."""
    D = q.shape[2]
    scale = D ** -0.5 if softmax_scale is None else softmax_scale
    qh, kh, vh = packed_heads(q, k, v)
    left, right = window_of(causal, window_size)
    cq, ck = cu_seqlens_q.long(), cu_seqlens_k.long()
    rows, cols = torch.arange(q.shape[0], device=q.device), torch.arange(k.shape[0], device=q.device)
    sq = torch.searchsorted(cq, rows, side=q_side) - 1  # each query row's sequence
    sk = torch.searchsorted(ck, cols, side=k_side) - 1
    lens_q, lens_k = cq[1:] - cq[:-1], ck[1:] - ck[:-1]
    pos_q = rows - cq[sq] + lens_k[sq] - lens_q[sq]  # bottom-right within the sequence
    pos_k = cols - ck[sk]
    s = qh @ kh.transpose(-2, -1) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(s.dtype)
        sl = sl[sq].T[:, :, None] if sl.dim() == 2 else sl[:, None, None]  # (H, total_q, 1)
        s = s - sl * (pos_q[:, None] - pos_k[None, :]).abs().to(s.dtype)
    keep = (sq[:, None] == sk[None, :]) & tile_keep(pos_q, pos_k, left, right)
    return s.masked_fill(~keep, -math.inf), vh


def varlen_block_diagonal(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                          softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                          deterministic=False, return_attn_probs=False):
    """Right: xformers' block-diagonal form, one dense softmax over the packed keys with each row's sequence
    found by searchsorted."""
    no_dropout(dropout_p)
    s, vh = block_diagonal_scores(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_size, softcap,
                                  alibi_slopes)
    p, lse = dense_softmax(s)
    return packed_finish(q, [p @ vh], [lse], q.shape[1], vh.shape[-1], vh.dtype, return_attn_probs)
