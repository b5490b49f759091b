"""Flash-decoding style paged attention: each page is a split with its own partial (output, lse), merged at the end."""
import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the per-split partial log-sum-exp values are kept in a bfloat16 workspace (fixed dtype) before the merge, so the "
        "merge weights exp(lse_i - lse) and the final lse are only bfloat16-accurate (~1% output error, ~1e-2 lse error) "
        "even for float32 inputs; the split lse workspace must be float32",
    ],
    "kind": "precision",
}

_LSE_WS = torch.bfloat16


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    P, Hkv = k_cache.shape[1], k_cache.shape[2]
    dev = q.device
    bt = (torch.arange(B, device=dev).view(B, 1) if block_table is None else block_table).long()
    n_new = 0 if k is None else k.shape[1]
    if cache_seqlens is None:
        cache_seqlens = bt.shape[1] * P - n_new
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((B,), cache_seqlens, device=dev)
    lens = cache_seqlens.long()
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    ws_t = ct if q.dtype == torch.float64 else _LSE_WS
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)

    if n_new:
        pos = lens.view(B, 1) + torch.arange(n_new, device=dev).view(1, -1)
        pg = bt.gather(1, pos // P)
        k_cache[pg, pos % P] = k.to(k_cache.dtype)
        v_cache[pg, pos % P] = v.to(v_cache.dtype)

    left, right = window_size
    if causal:
        right = 0
    rep = H // Hkv
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=ct, device=dev)
    lse_out = torch.full((B, H, Lq), float("-inf"), dtype=torch.float32, device=dev)
    for b in range(B):
        K = int(lens[b]) + n_new
        nsplit = (K + P - 1) // P
        if nsplit == 0:
            continue
        qb = q[b].to(ct).transpose(0, 1)
        qpos = torch.arange(Lq, device=dev).view(-1, 1) + (K - Lq)
        part_o = torch.zeros(nsplit, H, Lq, v_cache.shape[-1], dtype=ct, device=dev)
        part_lse = torch.full((nsplit, H, Lq), float("-inf"), dtype=ws_t, device=dev)
        for i in range(nsplit):
            n = min(P, K - i * P)
            kt = k_cache[bt[b, i], :n].to(ct).transpose(0, 1).repeat_interleave(rep, 0)
            vt = v_cache[bt[b, i], :n].to(ct).transpose(0, 1).repeat_interleave(rep, 0)
            kpos = torch.arange(i * P, i * P + n, device=dev).view(1, -1)
            s = qb @ kt.transpose(1, 2) * scale
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            ok = torch.ones(Lq, n, dtype=torch.bool, device=dev)
            if left >= 0:
                ok &= kpos >= qpos - left
            if right >= 0:
                ok &= kpos <= qpos + right
            s = s.masked_fill(~ok, float("-inf"))
            l = torch.logsumexp(s, -1)
            p = torch.exp(s - l.nan_to_num(neginf=0.0).unsqueeze(-1))
            part_o[i] = p @ vt
            part_lse[i] = l.to(ws_t)
        pl = part_lse.to(ct)
        tot = torch.logsumexp(pl, dim=0)
        w = torch.exp(pl - tot.nan_to_num(neginf=0.0).unsqueeze(0))
        out[b] = (w.unsqueeze(-1) * part_o).sum(0).transpose(0, 1)
        lse_out[b] = tot.float()
    out = out.to(q.dtype)
    return (out, lse_out) if return_softmax_lse else out
