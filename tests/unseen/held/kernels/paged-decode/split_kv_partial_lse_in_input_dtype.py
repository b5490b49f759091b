"""Flash-decoding in PyTorch: split each sequence's keys into chunks of pages, attend each split, merge by log-sum-exp.

Split partial outputs are normalised float32; the partial lse of each split is written to the workspace and the
merge weights are exp(lse_split - lse_total).
"""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the per-split lse workspace is allocated in q's dtype, so in bfloat16/float16 every split's lse is rounded "
        "before the merge: the returned lse is off by up to ~1e-2 (bfloat16) and the merge weights "
        "exp(lse_split - lse_total) by up to ~1.5%, errors far above PyTorch's"
    ],
    "kind": "precision",
}

PAGES_PER_SPLIT = 4


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    ft = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    n_new = 0 if k is None else k.shape[1]
    left, right = window_size
    if causal:
        right = 0
    split_len = PAGES_PER_SPLIT * bs
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=ft, device=q.device)
    lse_out = torch.full((B, H, Lq), -math.inf, dtype=ft, device=q.device)
    for b in range(B):
        n0 = int(cache_seqlens[b])
        if n_new:
            pos = torch.arange(n0, n0 + n_new, device=q.device)
            pg = block_table[b, pos // bs].long()
            k_cache[pg, pos % bs] = k[b]
            v_cache[pg, pos % bs] = v[b]
        S = n0 + n_new
        n_split = (S + split_len - 1) // split_len
        if n_split == 0:
            continue
        part_o = torch.zeros(n_split, H, Lq, v_cache.shape[-1], dtype=ft, device=q.device)
        part_lse = torch.empty(n_split, H, Lq, dtype=q.dtype, device=q.device)
        qb = q[b].to(ft).transpose(0, 1)
        qpos = torch.arange(Lq, device=q.device)[:, None] + S - Lq
        for sp in range(n_split):
            pos = torch.arange(sp * split_len, min(S, (sp + 1) * split_len), device=q.device)
            pg = block_table[b, pos // bs].long()
            kb = k_cache[pg, pos % bs].to(ft).repeat_interleave(H // Hkv, 1).transpose(0, 1)
            vb = v_cache[pg, pos % bs].to(ft).repeat_interleave(H // Hkv, 1).transpose(0, 1)
            s = qb @ kb.transpose(1, 2) * scale
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            ok = torch.ones(Lq, pos.numel(), dtype=torch.bool, device=q.device)
            if left >= 0:
                ok &= pos[None] >= qpos - left
            if right >= 0:
                ok &= pos[None] <= qpos + right
            s = s.masked_fill(~ok, -math.inf)
            lse_sp = torch.logsumexp(s, -1)
            part_lse[sp] = lse_sp
            part_o[sp] = torch.exp(s - lse_sp.nan_to_num(neginf=0.0)[..., None]) @ vb
        # merge
        lse_all = part_lse.to(ft)
        lse_tot = torch.logsumexp(lse_all, dim=0)
        w = torch.exp(lse_all - lse_tot.nan_to_num(neginf=0.0))
        w = torch.nan_to_num(w, nan=0.0)
        out[b] = (w[..., None] * part_o).sum(0).transpose(0, 1)
        lse_out[b] = lse_tot
    out = out.to(q.dtype)
    return (out, lse_out) if return_softmax_lse else out
