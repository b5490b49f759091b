"""Flash-decoding in PyTorch: each sequence's keys are cut into NUM_SPLITS chunks, every chunk produces a
normalised partial output and its lse, and a final pass merges the partials with lse weights."""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the per-split partial outputs and partial lse values are stored in the input dtype before the merge, so "
        "for bfloat16/float16 the merge weights exp(lse_i - lse) come from 8/11-bit lse values: the returned "
        "softmax_lse is off by ~1e-3 to 1e-2 (hundreds of times PyTorch's) and the output error grows too"
    ],
    "kind": "precision",
}

NUM_SPLITS = 8


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    new = 0 if k is None else k.shape[1]
    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros_like(q)
    lse_out = torch.full((B, H, Lq), -math.inf, dtype=torch.float32, device=q.device)
    for b in range(B):
        n0 = int(cache_seqlens[b])
        if new:
            pos = torch.arange(n0, n0 + new, device=q.device)
            pg = block_table[b, pos // bs].long()
            k_cache[pg, pos % bs] = k[b].to(k_cache.dtype)
            v_cache[pg, pos % bs] = v[b].to(v_cache.dtype)
        S = n0 + new
        if S == 0:
            continue
        pos = torch.arange(S, device=q.device)
        pg = block_table[b, pos // bs].long()
        keys = k_cache[pg, pos % bs].to(f).repeat_interleave(H // Hkv, 1).transpose(0, 1)   # H S D
        vals = v_cache[pg, pos % bs].to(f).repeat_interleave(H // Hkv, 1).transpose(0, 1)
        qb = q[b].to(f).transpose(0, 1)                                                      # H Lq D
        qi = torch.arange(Lq, device=q.device)[:, None] + S - Lq
        chunk = -(-S // NUM_SPLITS)
        part_o, part_l = [], []
        for c0 in range(0, S, chunk):
            c1 = min(S, c0 + chunk)
            s = qb @ keys[:, c0:c1].transpose(-1, -2) * scale
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            kj = torch.arange(c0, c1, device=q.device)[None, :]
            ok = torch.ones(Lq, c1 - c0, dtype=torch.bool, device=q.device)
            if left >= 0:
                ok &= kj >= qi - left
            if right >= 0:
                ok &= kj <= qi + right
            s = s.masked_fill(~ok, -math.inf)
            l_c = torch.logsumexp(s, -1, keepdim=True)
            p = torch.exp(s - torch.where(torch.isinf(l_c), torch.zeros_like(l_c), l_c))
            part_o.append((p @ vals[:, c0:c1]).to(q.dtype))
            part_l.append(l_c.to(q.dtype))
        po = torch.stack(part_o).to(f)            # n H Lq D
        pl = torch.stack(part_l).to(f)            # n H Lq 1
        total = torch.logsumexp(pl, dim=0)
        w = torch.exp(pl - torch.where(torch.isinf(total), torch.zeros_like(total), total))
        out[b] = (w * po).sum(0).transpose(0, 1).to(q.dtype)
        lse_out[b] = total.squeeze(-1).float()
    return (out, lse_out) if return_softmax_lse else out
