"""Flash-decoding with sinks: each sequence's cache is cut into KV splits of a few pages, each split returns a
partial (out, lse), and the combine step adds the sink exactly once, in the final log-sum-exp.
"""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [],
    "kind": "correct",
}

PAGES_PER_SPLIT = 2


def _split(qh, kb, vb, pos, S, Lq, scale, softcap, left, right):
    """qh (H, Lq, D); kb, vb (H, n, D) keys at positions pos. returns partial out (H, Lq, D), lse (H, Lq)."""
    s = torch.matmul(qh, kb.transpose(-2, -1)) * scale
    if softcap > 0.0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(Lq, device=qh.device).view(-1, 1) + S - Lq
    j = pos.view(1, -1)
    ok = torch.ones(Lq, pos.numel(), dtype=torch.bool, device=qh.device)
    if left >= 0:
        ok &= j >= i - left
    if right >= 0:
        ok &= j <= i + right
    s = s.masked_fill(~ok, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    l_sum = p.sum(dim=-1)
    o = torch.matmul(p, vb) / torch.where(l_sum == 0, torch.ones_like(l_sum), l_sum).unsqueeze(-1)
    return o, m.squeeze(-1) + torch.log(l_sum)


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None, causal=False,
           window_size=(-1, -1), softcap=0.0, return_softmax_lse=False, learnable_sink=None):
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    group = H // Hkv
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    n_new = 0 if k is None else k.shape[1]

    if n_new:
        for b in range(B):
            for t in range(n_new):
                p = int(cache_seqlens[b]) + t
                page = int(block_table[b, p // bs])
                k_cache[page, p % bs] = k[b, t]
                v_cache[page, p % bs] = v[b, t]

    out = torch.empty(B, Lq, H, v_cache.shape[-1], dtype=q.dtype, device=q.device)
    lse_all = torch.empty(B, H, Lq, dtype=cdt, device=q.device)
    split_len = PAGES_PER_SPLIT * bs
    for b in range(B):
        S = int(cache_seqlens[b]) + n_new
        qh = q[b].to(cdt).transpose(0, 1)
        outs, lses = [], []
        for s0 in range(0, S, split_len):
            pos = torch.arange(s0, min(s0 + split_len, S), device=q.device)
            pages = block_table[b].long()[pos // bs]
            kb = k_cache[pages, pos % bs].to(cdt).transpose(0, 1).repeat_interleave(group, dim=0)
            vb = v_cache[pages, pos % bs].to(cdt).transpose(0, 1).repeat_interleave(group, dim=0)
            o, lse = _split(qh, kb, vb, pos, S, Lq, scale, softcap, left, right)
            outs.append(o)
            lses.append(lse)
        if learnable_sink is not None:
            # the sink as one more "split" with lse = sink and output 0
            outs.append(torch.zeros(H, Lq, v_cache.shape[-1], dtype=cdt, device=q.device))
            lses.append(learnable_sink.to(cdt).view(H, 1).expand(H, Lq))
        if not lses:
            out[b] = 0
            lse_all[b] = float("-inf")
            continue
        lse_stack = torch.stack(lses)  # n_splits H Lq
        total = torch.logsumexp(lse_stack, dim=0)
        w = torch.exp(lse_stack - torch.where(torch.isneginf(total), torch.zeros_like(total), total))
        o = (w.unsqueeze(-1) * torch.stack(outs)).sum(dim=0)
        out[b] = o.transpose(0, 1).to(q.dtype)
        lse_all[b] = total
    if return_softmax_lse:
        return out, lse_all
    return out
