TRUTH = {'api': 'flash-attn-varlen', 'bugs': [], 'kind': 'correct'}
import math

import torch

BLOCK_M = 128


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    total_q, H, D = q.shape
    total_k, Hkv = k.shape[0], k.shape[1]
    g = H // Hkv
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    cu_q = cu_seqlens_q.long()
    cu_k = cu_seqlens_k.long()
    left, right = window_size
    if causal:
        right = 0

    rows_all = torch.arange(total_q)
    cols = torch.arange(total_k)
    seq_q = torch.searchsorted(cu_q[1:], rows_all, right=True)
    seq_k = torch.searchsorted(cu_k[1:], cols, right=True)
    kpos = (cols - cu_k[seq_k]).view(1, -1)
    shift = (cu_k[1:] - cu_k[:-1]) - (cu_q[1:] - cu_q[:-1])

    kh = k.to(ct).permute(1, 0, 2).unsqueeze(1)
    vh = v.to(ct).permute(1, 0, 2).unsqueeze(1)
    qh = q.to(ct).view(total_q, Hkv, g, D).permute(1, 2, 0, 3)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(ct)
        sl = sl.view(1, H).expand(cu_q.numel() - 1, H) if sl.dim() == 1 else sl

    outs, lses = [], []
    for m0 in range(0, total_q, BLOCK_M):
        m1 = min(m0 + BLOCK_M, total_q)
        sq = seq_q[m0:m1]
        qpos = (rows_all[m0:m1] - cu_q[sq] + shift[sq]).view(-1, 1)
        keep = sq.view(-1, 1) == seq_k.view(1, -1)
        if left >= 0:
            keep &= kpos >= qpos - left
        if right >= 0:
            keep &= kpos <= qpos + right
        s = torch.matmul(qh[:, :, m0:m1], kh.transpose(-1, -2)) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        if alibi_slopes is not None:
            row_sl = sl[sq].transpose(0, 1).reshape(Hkv, g, m1 - m0, 1)
            s = s - row_sl * (qpos - kpos).abs().to(ct)
        s = s.masked_fill(~keep, float('-inf'))
        mx = s.amax(-1, keepdim=True)
        mx = torch.where(torch.isneginf(mx), torch.zeros_like(mx), mx)
        e = torch.exp(s - mx)
        den = e.sum(-1, keepdim=True)
        outs.append(torch.matmul(e / torch.where(den > 0, den, torch.ones_like(den)), vh))
        lses.append((mx + torch.log(den)).squeeze(-1))
    out = torch.cat(outs, 2).permute(2, 0, 1, 3).reshape(total_q, H, D).to(q.dtype)
    lse = torch.cat(lses, 2).reshape(H, total_q)
    if return_attn_probs:
        return out, lse, None
    return out
