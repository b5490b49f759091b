TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "split-KV merge logsumexp computed in float32 even for float64 inputs; float64 out and lse lose precision"
    ],
    "kind": "precision"
}

import math
import torch


def _write_new(k_cache, v_cache, k, v, cache_seqlens, block_table):
    bs = k_cache.shape[1]
    for b in range(k.shape[0]):
        start = int(cache_seqlens[b])
        for t in range(k.shape[1]):
            p = start + t
            page = int(block_table[b, p // bs])
            k_cache[page, p % bs] = k[b, t]
            v_cache[page, p % bs] = v[b, t]


def _merge(parts_m, parts_l, parts_o):
    m = torch.stack(parts_m)
    l = torch.stack(parts_l)
    o = torch.stack(parts_o)
    lse_parts = torch.where(l > 0, m + torch.log(torch.where(l > 0, l, torch.ones_like(l))),
                            torch.full_like(l, float('-inf')))
    lse = torch.logsumexp(lse_parts.float(), dim=0).to(lse_parts.dtype)
    w = torch.exp(lse_parts - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[None])
    out = (w[..., None] * o).sum(0)
    return out, lse


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    g = H // Hkv
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    new = 0
    if k is not None:
        new = k.shape[1]
        _write_new(k_cache, v_cache, k, v, cache_seqlens, block_table)
    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros(B, H, Lq, D, dtype=cdt)
    lse = torch.full((B, H, Lq), float('-inf'), dtype=cdt)
    for b in range(B):
        S = int(cache_seqlens[b]) + new
        qb = q[b].to(cdt).permute(1, 0, 2)
        qpos = torch.arange(Lq) + S - Lq
        pm, pl, po = [], [], []
        for n in range((S + bs - 1) // bs):
            page = int(block_table[b, n])
            cnt = min(bs, S - n * bs)
            kp = k_cache[page, :cnt].to(cdt).permute(1, 0, 2).repeat_interleave(g, dim=0)
            vp = v_cache[page, :cnt].to(cdt).permute(1, 0, 2).repeat_interleave(g, dim=0)
            s = torch.matmul(qb, kp.transpose(-1, -2)) * sc
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            kpos = n * bs + torch.arange(cnt)
            ok = torch.ones(Lq, cnt, dtype=torch.bool)
            if left >= 0:
                ok &= kpos[None, :] >= qpos[:, None] - left
            if right >= 0:
                ok &= kpos[None, :] <= qpos[:, None] + right
            s = s.masked_fill(~ok, float('-inf'))
            m = s.amax(-1)
            m0 = torch.where(torch.isinf(m), torch.zeros_like(m), m)
            p = torch.exp(s - m0[..., None])
            l = p.sum(-1)
            o = torch.matmul(p, vp) / torch.where(l > 0, l, torch.ones_like(l))[..., None]
            pm.append(m0)
            pl.append(l)
            po.append(o)
        if not pm:
            continue
        ob, lb = _merge(pm, pl, po)
        out[b] = ob
        lse[b] = lb
    out = out.permute(0, 2, 1, 3).to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
