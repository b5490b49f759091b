import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "causal=True resets the window to (-1, 0) instead of only setting right = 0, so a left window given with causal is dropped. Wrong for causal cases with window_size[0] >= 0.",
        "Split size uses floor division (max(1, S_b // 4)) instead of ceil, so the four splits cover only 4*(S_b // 4) keys: the last S_b % 4 keys of every sequence are never attended (sequences with S_b < 4 are fine)."
    ],
    "kind": "two"
}


NUM_SPLITS = 4


def _partial(qh, kk, vv, qpos, kpos, scale, softcap, left, right):
    """One split of the keys: returns (normalized out, lse) of qh (H, Lq, D) over keys kk (H, n, D)."""
    s = torch.matmul(qh, kk.transpose(-1, -2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    vis = torch.ones(qpos.shape[0], kpos.shape[1], dtype=torch.bool)
    if left >= 0:
        vis = vis & (kpos >= qpos - left)
    if right >= 0:
        vis = vis & (kpos <= qpos + right)
    s = s.masked_fill(~vis, float('-inf'))
    mx = s.amax(-1, keepdim=True)
    mx = torch.where(torch.isinf(mx), torch.zeros_like(mx), mx)
    e = torch.exp(s - mx)
    den = e.sum(-1, keepdim=True)
    pos = den > 0
    den1 = torch.where(pos, den, torch.ones_like(den))
    o = torch.matmul(e / den1, vv)
    lse = torch.where(pos, mx + torch.log(den1), torch.full_like(den, float('-inf')))
    return o, lse


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    """Split-KV (flash-decoding style): each split of a sequence's keys is attended on its own and the partial
    results are merged through their log-sum-exps."""
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    Dv = v_cache.shape[-1]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    t_new = 0 if k is None else k.shape[1]
    seqlens = [int(x) for x in cache_seqlens]
    for b in range(B):
        for t in range(t_new):
            p = seqlens[b] + t
            k_cache[block_table[b, p // bs], p % bs] = k[b, t]
            v_cache[block_table[b, p // bs], p % bs] = v[b, t]

    left, right = window_size
    if causal:
        left, right = -1, 0
    out = torch.empty(B, Lq, H, Dv, dtype=q.dtype)
    lse_out = torch.empty(B, H, Lq, dtype=ct)
    for b in range(B):
        S = seqlens[b] + t_new
        chunk = max(1, S // NUM_SPLITS)
        qh = q[b].transpose(0, 1).to(ct)
        qpos = torch.arange(Lq)[:, None] + (S - Lq)
        o_parts = torch.zeros(NUM_SPLITS, H, Lq, Dv, dtype=ct)
        l_parts = torch.full((NUM_SPLITS, H, Lq, 1), float('-inf'), dtype=ct)
        for sp in range(NUM_SPLITS):
            a, e = sp * chunk, min(S, (sp + 1) * chunk)
            if a >= e:
                continue
            pos = torch.arange(a, e)
            blocks = block_table[b].long()[pos // bs]
            kk = k_cache[blocks, pos % bs].to(ct).transpose(0, 1).repeat_interleave(H // Hkv, 0)
            vv = v_cache[blocks, pos % bs].to(ct).transpose(0, 1).repeat_interleave(H // Hkv, 0)
            o_parts[sp], l_parts[sp] = _partial(qh, kk, vv, qpos, pos[None, :], scale, softcap, left, right)
        lse = torch.logsumexp(l_parts, 0)                          # (H, Lq, 1)
        ok = torch.isfinite(lse)
        w = torch.exp(l_parts - torch.where(ok, lse, torch.zeros_like(lse)))
        w = torch.where(ok, w, torch.zeros_like(w))
        out[b] = (w * o_parts).sum(0).transpose(0, 1).to(q.dtype)
        lse_out[b] = lse[..., 0]
    if return_softmax_lse:
        return out, lse_out
    return out
