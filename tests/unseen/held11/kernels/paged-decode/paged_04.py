TRUTH = {'api': 'paged-decode', 'bugs': ['query heads are grouped with q.reshape(Lq, -1, Hkv, D), i.e. head h = group * Hkv + kv_head, so query head h reads kv head h % Hkv instead of h // (H // Hkv); wrong for GQA with 1 < Hkv < H (decode_append, spec4_causal_append_gqa, noncausal_Lq4_append_window); MHA and MQA are right'], 'kind': 'semantic'}
import math

import torch


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    nblk, bs, Hkv, _ = k_cache.shape
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    k_flat = k_cache.view(nblk * bs, Hkv, D)
    v_flat = v_cache.view(nblk * bs, Hkv, D)
    new = 0 if k is None else k.shape[1]

    outs, lses = [], []
    for b in range(B):
        table = block_table[b].long()
        start = int(cache_seqlens[b])
        if new:
            p = torch.arange(start, start + new)
            slots = table[p // bs] * bs + p % bs
            k_flat[slots] = k[b]
            v_flat[slots] = v[b]
        S = start + new
        p = torch.arange(S)
        slots = table[p // bs] * bs + p % bs
        kb = k_flat[slots].to(ct)
        vb = v_flat[slots].to(ct)
        qb = q[b].to(ct).reshape(Lq, -1, Hkv, D)

        s = torch.einsum('qghd,khd->hgqk', qb, kb) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        qi = torch.arange(Lq).view(-1, 1) + (S - Lq)
        kj = p.view(1, -1)
        left, right = window_size
        if causal:
            right = 0
        ok = torch.ones(Lq, S, dtype=torch.bool)
        if left >= 0:
            ok &= kj >= qi - left
        if right >= 0:
            ok &= kj <= qi + right
        s = s.masked_fill(~ok, float('-inf'))
        mx = s.amax(-1, keepdim=True)
        mx = torch.where(torch.isneginf(mx), torch.zeros_like(mx), mx)
        e = torch.exp(s - mx)
        den = e.sum(-1, keepdim=True)
        o = torch.einsum('hgqk,khd->qghd', e / torch.where(den > 0, den, torch.ones_like(den)), vb)
        outs.append(o.reshape(Lq, H, D))
        lses.append((mx + torch.log(den)).squeeze(-1).permute(1, 0, 2).reshape(H, Lq))
    out = torch.stack(outs).to(q.dtype)
    lse = torch.stack(lses)
    if return_softmax_lse:
        return out, lse
    return out
