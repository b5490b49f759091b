"""Flash-attention forward with query x key tiles and a base-2 online softmax; running max and output accumulator
per row, P @ V in the working precision."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the running softmax denominator l is allocated in the input dtype (bfloat16 for bfloat16 inputs) so "
        "each per-tile rescale-and-add rounds it; it should be accumulated in float32 like the running max "
        "and output (measured, bf16 B=1 H=4 L=S=1024 D=64 non-causal, max abs error vs float64: out 4.43e-3 "
        "vs 8.73e-4 for the correct kernels, 5.1x; lse 2.8e-2 vs 8.0e-7)",
    ],
    "kind": "precision",
}

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
BLOCK_M = 64
BLOCK_N = 32


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout_p > 0 is not supported")
    dtype = q.dtype
    acc_t = torch.float64 if dtype == torch.float64 else torch.float32
    B, Lq, H, D = q.shape
    Sk, Hk = k.shape[1], k.shape[2]
    Dv = v.shape[-1]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    group = H // Hk
    diag = Sk - Lq
    wl, wr = window_size
    if causal:
        wr = 0

    qh = q.to(acc_t).permute(0, 2, 1, 3)
    kh = k.to(acc_t).permute(0, 2, 1, 3).repeat_interleave(group, dim=1)
    vh = v.to(acc_t).permute(0, 2, 1, 3).repeat_interleave(group, dim=1)
    slopes2 = None
    if alibi_slopes is not None:
        sl = alibi_slopes.to(acc_t)
        sl = sl.view(1, H, 1, 1) if sl.dim() == 1 else sl.view(B, H, 1, 1)
        slopes2 = sl * LOG2E

    out_tiles = []
    lse_tiles = []
    for i0 in range(0, Lq, BLOCK_M):
        i1 = min(i0 + BLOCK_M, Lq)
        qt = qh[:, :, i0:i1]
        rows = torch.arange(i0, i1, device=q.device).view(-1, 1) + diag
        m_i = torch.full((B, H, i1 - i0, 1), float("-inf"), dtype=acc_t, device=q.device)
        l_i = torch.zeros((B, H, i1 - i0, 1), dtype=dtype, device=q.device)
        acc = torch.zeros((B, H, i1 - i0, Dv), dtype=acc_t, device=q.device)
        n_lo = 0 if wl < 0 else max(0, i0 + diag - wl)
        n_hi = Sk if wr < 0 else min(Sk, i1 - 1 + diag + wr + 1)
        for j0 in range((n_lo // BLOCK_N) * BLOCK_N, n_hi, BLOCK_N):
            j1 = min(j0 + BLOCK_N, Sk)
            cols = torch.arange(j0, j1, device=q.device).view(1, -1)
            s = torch.matmul(qt, kh[:, :, j0:j1].transpose(-1, -2))
            if softcap > 0.0:
                s2 = (softcap * LOG2E) * torch.tanh(s * (scale / softcap))
            else:
                s2 = s * (scale * LOG2E)
            if slopes2 is not None:
                s2 = s2 - slopes2 * (rows - cols).abs().to(acc_t)
            keep = torch.ones_like(rows - cols, dtype=torch.bool)
            if wl >= 0:
                keep = keep & (cols >= rows - wl)
            if wr >= 0:
                keep = keep & (cols <= rows + wr)
            s2 = s2.masked_fill(~keep, float("-inf"))
            m_new = torch.maximum(m_i, s2.amax(dim=-1, keepdim=True)).detach()
            m_use = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)
            alpha = torch.exp2(m_i - m_use)
            p = torch.exp2(s2 - m_use)
            l_i = (alpha * l_i + p.sum(dim=-1, keepdim=True)).to(dtype)
            acc = alpha * acc + torch.matmul(p, vh[:, :, j0:j1])
            m_i = m_new
        live = l_i > 0
        out_tiles.append(acc / torch.where(live, l_i, torch.ones_like(l_i)))
        lse2 = torch.where(live, m_i + torch.log2(torch.where(live, l_i, torch.ones_like(l_i))),
                           torch.full_like(l_i, float("-inf")))
        lse_tiles.append((lse2 * LN2).squeeze(-1))
    out = torch.cat(out_tiles, dim=2).permute(0, 2, 1, 3).to(dtype)
    if return_attn_probs:
        return out, torch.cat(lse_tiles, dim=2).detach(), None
    return out
