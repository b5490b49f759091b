"""Paged-KV decode with logit soft-capping; the LSE is computed alongside the output for split-KV merging."""
import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the returned softmax_lse is computed from the masked scores before soft-capping, while the output uses the "
        "capped scores; with softcap > 0 the lse must be logsumexp of softcap * tanh(s / softcap) (output is right)",
    ],
    "kind": "semantic",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    page, Hkv = k_cache.shape[1], k_cache.shape[2]
    dev = q.device
    table = (torch.arange(B, device=dev)[:, None] if block_table is None else block_table).long()
    n_new = 0 if k is None else int(k.shape[1])
    if cache_seqlens is None:
        cache_seqlens = table.shape[1] * page - n_new
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((B,), cache_seqlens, device=dev)
    past = cache_seqlens.long()
    ftype = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale

    for b in range(B):
        for t in range(n_new):
            p = int(past[b]) + t
            k_cache[table[b, p // page], p % page] = k[b, t].to(k_cache.dtype)
            v_cache[table[b, p // page], p % page] = v[b, t].to(v_cache.dtype)

    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros(B, H, Lq, v_cache.shape[-1], dtype=ftype, device=dev)
    lse = torch.full((B, H, Lq), float("-inf"), dtype=ftype, device=dev)
    for b in range(B):
        K = int(past[b]) + n_new
        if K == 0:
            continue
        pos = torch.arange(K, device=dev)
        kb = k_cache[table[b, pos // page], pos % page].to(ftype).transpose(0, 1).repeat_interleave(H // Hkv, 0)
        vb = v_cache[table[b, pos // page], pos % page].to(ftype).transpose(0, 1).repeat_interleave(H // Hkv, 0)
        s = torch.matmul(q[b].to(ftype).transpose(0, 1), kb.transpose(1, 2)) * scale
        qpos = torch.arange(Lq, device=dev)[:, None] + K - Lq
        ok = torch.ones(Lq, K, dtype=torch.bool, device=dev)
        if left >= 0:
            ok &= pos[None] >= qpos - left
        if right >= 0:
            ok &= pos[None] <= qpos + right
        lse[b] = torch.logsumexp(s.masked_fill(~ok, float("-inf")), dim=-1)
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        s = s.masked_fill(~ok, float("-inf"))
        mx = s.amax(-1, keepdim=True).nan_to_num(neginf=0.0)
        w = torch.exp(s - mx)
        den = w.sum(-1, keepdim=True)
        out[b] = torch.matmul(w, vb) / torch.where(den > 0, den, torch.ones_like(den))
    out = out.transpose(1, 2).to(q.dtype)
    if return_softmax_lse:
        return out, lse.float()
    return out
