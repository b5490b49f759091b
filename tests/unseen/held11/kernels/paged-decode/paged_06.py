TRUTH = {'api': 'paged-decode', 'bugs': ['split-KV partitions each sequence into NUM_SPLITS chunks of S_b // NUM_SPLITS keys, so the last S_b % NUM_SPLITS keys are never attended (and sequences with S_b < NUM_SPLITS see no key); shows whenever some S_b is not a multiple of 4 (every paged case here)', 'the left window bound is taken from the last query (keys >= S_b - 1 - left) for all Lq query rows instead of each row\'s own diagonal S_b - Lq + i - left; earlier query rows lose keys at the start of their window when Lq > 1 (window24_causal_Lq3, noncausal_Lq4_append_window)'], 'kind': 'two'}
import math

import torch

NUM_SPLITS = 4


def _split_attend(q, kk, vv, lo, hi, scale, softcap, allow):
    s = torch.einsum('qhd,khd->hqk', q, kk[lo:hi]) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    s = s.masked_fill(~allow[:, lo:hi], float('-inf'))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse).unsqueeze(-1))
    return torch.einsum('hqk,khd->hqd', p, vv[lo:hi]), lse


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    page, Hkv = k_cache.shape[1], k_cache.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    n_new = k.shape[1] if k is not None else 0
    left, right = window_size
    if causal:
        right = 0

    out = torch.zeros(B, Lq, H, D, dtype=f)
    lse_out = torch.full((B, H, Lq), float('-inf'), dtype=f)
    for b in range(B):
        base = int(cache_seqlens[b])
        for t in range(n_new):
            blk, off = int(block_table[b, (base + t) // page]), (base + t) % page
            k_cache[blk, off] = k[b, t]
            v_cache[blk, off] = v[b, t]
        S = base + n_new
        if S == 0:
            continue
        idx = torch.arange(S)
        blocks = block_table[b].long()[idx // page]
        kk = k_cache[blocks, idx % page].to(f).repeat_interleave(H // Hkv, 1)
        vv = v_cache[blocks, idx % page].to(f).repeat_interleave(H // Hkv, 1)

        qi = torch.arange(Lq).view(-1, 1) + (S - Lq)
        allow = torch.ones(Lq, S, dtype=torch.bool)
        if left >= 0:
            allow &= idx.view(1, -1) >= S - 1 - left
        if right >= 0:
            allow &= idx.view(1, -1) <= qi + right

        chunk = S // NUM_SPLITS
        parts = [_split_attend(q[b].to(f), kk, vv, i * chunk, (i + 1) * chunk, scale, softcap, allow)
                 for i in range(NUM_SPLITS)]
        o_s = torch.stack([o for o, _ in parts])
        l_s = torch.stack([l for _, l in parts])
        lse = torch.logsumexp(l_s, 0)
        w = torch.exp(l_s - torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse))
        out[b] = (w.unsqueeze(-1) * o_s).sum(0).transpose(0, 1)
        lse_out[b] = lse
    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, lse_out
    return out
