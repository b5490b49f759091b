TRUTH = {'api': 'paged-decode', 'bugs': ['The new keys are written to the cache but the attended length is cache_seqlens[b] only, leaving them out; shows on every append case.'], 'kind': 'semantic'}
import math
import torch


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    num_blocks, bs, Hkv, _ = k_cache.shape
    Dv = v_cache.shape[-1]
    cdt = torch.float32 if q.dtype == torch.bfloat16 else q.dtype
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    g = H // Hkv
    if block_table is None:
        block_table = torch.arange(num_blocks, dtype=torch.int32).view(B, -1)
    if cache_seqlens is None:
        cache_seqlens = torch.full((B,), block_table.shape[1] * bs, dtype=torch.int32)
    n_new = 0 if k is None else k.shape[1]
    for b in range(B):
        n0 = int(cache_seqlens[b])
        for t in range(n_new):
            p = n0 + t
            blk = int(block_table[b, p // bs])
            k_cache[blk, p % bs] = k[b, t].to(k_cache.dtype)
            v_cache[blk, p % bs] = v[b, t].to(v_cache.dtype)
    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros(B, Lq, H, Dv, dtype=cdt)
    lse = torch.full((B, H, Lq), -math.inf, dtype=cdt)
    for b in range(B):
        Sb = int(cache_seqlens[b])
        if Sb == 0:
            continue
        pos = torch.arange(Sb)
        blocks = block_table[b].long()[pos // bs]
        kk = k_cache[blocks, pos % bs].to(cdt)
        vv = v_cache[blocks, pos % bs].to(cdt)
        qh = q[b].to(cdt).transpose(0, 1)
        kh = kk.transpose(0, 1).repeat_interleave(g, 0)
        vh = vv.transpose(0, 1).repeat_interleave(g, 0)
        s = torch.matmul(qh, kh.transpose(-1, -2)) * sc
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        qpos = torch.arange(Lq)[:, None] + (Sb - Lq)
        kpos = pos[None, :]
        keep = torch.ones(Lq, Sb, dtype=torch.bool)
        if left >= 0:
            keep = keep & (kpos >= qpos - left)
        if right >= 0:
            keep = keep & (kpos <= qpos + right)
        s = s.masked_fill(~keep, -math.inf)
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = torch.exp(s - m)
        den = e.sum(-1, keepdim=True)
        out[b] = (torch.matmul(e, vh) / torch.where(den > 0, den, torch.ones_like(den))).transpose(0, 1)
        lse[b] = (m + torch.log(den)).squeeze(-1)
    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
