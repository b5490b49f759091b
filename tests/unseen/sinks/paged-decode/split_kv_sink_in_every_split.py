"""Flash-decoding with a learnable sink: each sequence's paged cache is cut into KV splits of two pages, every split
runs an online softmax seeded with the sink and returns (out, lse), and the splits are merged by their lse.
"""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": ["every KV split seeds its softmax with the sink (m = sink, l = 1), so after the lse merge the sink is "
             "counted once per split (e.g. 3 times for 3 splits) instead of once whenever a sequence spans more than "
             "two pages"],
    "kind": "semantic",
}

PAGES_PER_SPLIT = 2


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None, causal=False,
           window_size=(-1, -1), softcap=0.0, return_softmax_lse=False, learnable_sink=None):
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, Lq, H, D = q.shape
    page, Hkv = k_cache.shape[1], k_cache.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    new = 0 if k is None else k.shape[1]
    lens = cache_seqlens.tolist()
    for b in range(B):
        for t in range(new):
            pos = lens[b] + t
            blk = int(block_table[b, pos // page])
            k_cache[blk, pos % page] = k[b, t].to(k_cache.dtype)
            v_cache[blk, pos % page] = v[b, t].to(v_cache.dtype)

    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=cdt, device=q.device)
    lse = torch.full((B, H, Lq), float("-inf"), dtype=cdt, device=q.device)
    for b in range(B):
        S = lens[b] + new
        qh = q[b].to(cdt).transpose(0, 1)  # H Lq D
        rows = torch.arange(Lq, device=q.device).view(-1, 1) + S - Lq
        parts_o, parts_l = [], []
        for s0 in range(0, max(S, 1), PAGES_PER_SPLIT * page):
            pos = torch.arange(s0, min(S, s0 + PAGES_PER_SPLIT * page), device=q.device)
            blocks = block_table[b].long()[pos // page]
            kb = k_cache[blocks, pos % page].to(cdt).transpose(0, 1).repeat_interleave(H // Hkv, 0)
            vb = v_cache[blocks, pos % page].to(cdt).transpose(0, 1).repeat_interleave(H // Hkv, 0)
            s = qh @ kb.transpose(1, 2) * scale
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            ok = torch.ones(Lq, pos.numel(), dtype=torch.bool, device=q.device)
            if left >= 0:
                ok &= pos.view(1, -1) >= rows - left
            if right >= 0:
                ok &= pos.view(1, -1) <= rows + right
            s = s.masked_fill(~ok, float("-inf"))
            m = s.amax(-1) if pos.numel() else s.new_full((H, Lq), float("-inf"))
            if learnable_sink is not None:
                sink = learnable_sink.to(cdt).view(H, 1)
                m = torch.maximum(m, sink)  # the split's softmax starts from the sink: m = sink, l = 1
                e = torch.exp(s - m.unsqueeze(-1))
                l_sum = e.sum(-1) + torch.exp(sink - m)
            else:
                m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
                e = torch.exp(s - m.unsqueeze(-1))
                l_sum = e.sum(-1)
            parts_o.append((e @ vb) / torch.where(l_sum == 0, torch.ones_like(l_sum), l_sum).unsqueeze(-1))
            parts_l.append(m + torch.log(l_sum))
        lses = torch.stack(parts_l)
        tot = torch.logsumexp(lses, dim=0)
        w = torch.exp(lses - torch.where(torch.isneginf(tot), torch.zeros_like(tot), tot))
        out[b] = (w.unsqueeze(-1) * torch.stack(parts_o)).sum(0).transpose(0, 1)
        lse[b] = tot
    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
