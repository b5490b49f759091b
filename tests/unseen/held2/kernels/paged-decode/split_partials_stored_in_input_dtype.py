"""Paged KV-cache attention (flash_attn_with_kvcache) with split-KV partials (NUM_SPLITS chunks) merged by their lse.
bf16, 256/640/1024 cached + 1 new, page 16, H=8, Hkv=2, D=64: max|lse err| 1.5e-2 vs 4.9e-7 for a float32 kernel."""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        (
            "the per-split partial outputs and partial lse are stored in the input dtype (bfloat16 for bfloat16 "
            "inputs) before the merge, so the merge weights exp(lse_split - lse) and the returned lse carry "
            "bfloat16 rounding; split-KV partials should be kept in float32"
        ),
    ],
    "kind": "precision",
}

NUM_SPLITS = 4


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    batch, len_q, n_heads, head_dim = q.shape
    n_kv_heads = k_cache.shape[2]
    group = n_heads // n_kv_heads
    page_size = k_cache.shape[1]
    if block_table is None:
        block_table = torch.arange(batch, dtype=torch.int32).unsqueeze(1)
    if cache_seqlens is None:
        cache_seqlens = torch.full((batch,), block_table.shape[1] * page_size, dtype=torch.int32)
    elif isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((batch,), cache_seqlens, dtype=torch.int32)
    n_new = 0 if k is None else k.shape[1]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    left, right = window_size
    if causal:
        right = 0

    if n_new > 0:
        pos = cache_seqlens.long().unsqueeze(1) + torch.arange(n_new).unsqueeze(0)
        pages = torch.gather(block_table.long(), 1, pos // page_size)
        k_cache[pages, pos % page_size] = k.to(k_cache.dtype)
        v_cache[pages, pos % page_size] = v.to(v_cache.dtype)

    max_pages = block_table.shape[1]
    pages_per_split = (max_pages + NUM_SPLITS - 1) // NUM_SPLITS
    out = torch.zeros(batch, len_q, n_heads, v_cache.shape[-1], dtype=q.dtype)
    lse = torch.full((batch, n_heads, len_q), -math.inf, dtype=acc)
    for b in range(batch):
        n_keys = int(cache_seqlens[b]) + n_new
        qb = q[b].to(acc).transpose(0, 1)
        row = torch.arange(len_q).unsqueeze(1) + (n_keys - len_q)
        n_pages = (n_keys + page_size - 1) // page_size
        part_o = []
        part_lse = []
        for split in range(NUM_SPLITS):
            first = split * pages_per_split
            last = min(first + pages_per_split, n_pages)
            if first >= last:
                continue
            pages = block_table[b, first:last].long()
            kp = k_cache[pages].flatten(0, 1).to(acc).transpose(0, 1).repeat_interleave(group, dim=0)
            vp = v_cache[pages].flatten(0, 1).to(acc).transpose(0, 1).repeat_interleave(group, dim=0)
            s = torch.matmul(qb, kp.transpose(-1, -2)) * scale
            if softcap > 0.0:
                s = softcap * torch.tanh(s / softcap)
            col = torch.arange(first * page_size, last * page_size).unsqueeze(0)
            keep = (col < n_keys).expand(len_q, -1)
            if right >= 0:
                keep = keep & (col <= row + right)
            if left >= 0:
                keep = keep & (col >= row - left)
            s = s.masked_fill(~keep, -math.inf)
            m = s.amax(dim=-1, keepdim=True)
            m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
            p = torch.exp(s - m)
            denom = p.sum(dim=-1, keepdim=True)
            part_o.append((torch.matmul(p, vp) / denom.clamp_min(torch.finfo(acc).tiny)).to(q.dtype))
            part_lse.append((m + torch.log(denom)).to(q.dtype))

        if not part_o:
            continue
        part_o = torch.stack(part_o).to(acc)
        part_lse = torch.stack(part_lse).to(acc)
        total = torch.logsumexp(part_lse, dim=0)
        safe = torch.where(torch.isinf(total), torch.zeros_like(total), total)
        weight = torch.exp(part_lse - safe)
        merged = (weight * part_o).sum(dim=0)
        out[b] = merged.transpose(0, 1).to(q.dtype)
        lse[b] = total.squeeze(-1)

    if return_softmax_lse:
        return out, lse
    return out
