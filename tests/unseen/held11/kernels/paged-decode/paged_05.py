TRUTH = {'api': 'paged-decode', 'bugs': ['scores are laid out (B, Lq, H, S) and the final lse of shape (B, Lq, H) is converted to the required (B, H, Lq) with reshape instead of a transpose, scrambling lse entries across heads and queries whenever Lq > 1 (spec4_causal_append_gqa, window24_causal_Lq3, mqa_bs64, append_cross_page, Lq>S_causal_append, noncausal_Lq4_append_window); output and Lq = 1 decoding are right'], 'kind': 'semantic'}
import math

import torch


def _write_new_tokens(cache, new, cache_seqlens, block_table):
    bs = cache.shape[1]
    B, n = new.shape[:2]
    pos = cache_seqlens.long().view(B, 1) + torch.arange(n).view(1, n)
    blk = block_table.long().gather(1, pos // bs)
    cache[blk.reshape(-1), (pos % bs).reshape(-1)] = new.reshape(B * n, *new.shape[2:])


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    lens = cache_seqlens.long()
    if k is not None:
        _write_new_tokens(k_cache, k, cache_seqlens, block_table)
        _write_new_tokens(v_cache, v, cache_seqlens, block_table)
        lens = lens + k.shape[1]

    S_max = int(lens.max())
    pos = torch.arange(S_max)
    blk = block_table.long()[:, pos // bs]
    kk = k_cache[blk, pos % bs].to(dt).repeat_interleave(H // Hkv, dim=2)
    vv = v_cache[blk, pos % bs].to(dt).repeat_interleave(H // Hkv, dim=2)

    s = torch.einsum('bqhd,bshd->bqhs', q.to(dt), kk) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    qpos = (torch.arange(Lq).view(1, Lq) + (lens.view(B, 1) - Lq)).view(B, Lq, 1, 1)
    kpos = pos.view(1, 1, 1, S_max)
    valid = kpos < lens.view(B, 1, 1, 1)
    left, right = window_size
    if causal:
        right = 0
    if left >= 0:
        valid = valid & (kpos >= qpos - left)
    if right >= 0:
        valid = valid & (kpos <= qpos + right)
    s = s.masked_fill(~valid, float('-inf'))

    lse = torch.logsumexp(s, dim=-1)
    w = torch.exp(s - lse.masked_fill(torch.isneginf(lse), 0.0).unsqueeze(-1))
    out = torch.einsum('bqhs,bshd->bqhd', w, vv).to(q.dtype)
    lse = lse.reshape(B, H, Lq)
    if return_softmax_lse:
        return out, lse
    return out
