TRUTH = {'api': 'paged-decode', 'bugs': ['The query alignment uses the pre-append length cache_seqlens[b] instead of the total keys, shifting causal and window bounds by seqlen_new; shows on causal/window cases with appended keys.'], 'kind': 'semantic'}
import math
import torch

PAGES_PER_SPLIT = 2


def _write_new(k_cache, v_cache, k, v, cache_seqlens, block_table):
    bs = k_cache.shape[1]
    for b in range(k.shape[0]):
        start = int(cache_seqlens[b])
        for t in range(k.shape[1]):
            lp = start + t
            page = block_table[b, lp // bs]
            k_cache[page, lp % bs].copy_(k[b, t])
            v_cache[page, lp % bs].copy_(v[b, t])


def _split(qh, kk, vv, k0, qpos, sc, softcap, left, right):
    # qh (H, Lq, D); kk, vv (H, n, D): keys k0 .. k0 + n - 1
    s = torch.matmul(qh, kk.transpose(-1, -2)) * sc
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    kpos = torch.arange(k0, k0 + kk.shape[1])[None, :]
    keep = torch.ones(qh.shape[1], kk.shape[1], dtype=torch.bool)
    if left >= 0:
        keep = keep & (kpos >= qpos - left)
    if right >= 0:
        keep = keep & (kpos <= qpos + right)
    s = s.masked_fill(~keep, -math.inf)
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    den = e.sum(-1, keepdim=True)
    ok = den > 0
    o = torch.matmul(e, vv) / torch.where(ok, den, torch.ones_like(den))
    lse = torch.where(ok, m + torch.log(torch.where(ok, den, torch.ones_like(den))), torch.full_like(den, -math.inf))
    return o, lse


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    Dv = v_cache.shape[-1]
    g = H // Hkv
    cdt = torch.float32 if q.dtype == torch.bfloat16 else q.dtype
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    n_new = 0 if k is None else k.shape[1]
    if n_new:
        _write_new(k_cache, v_cache, k, v, cache_seqlens, block_table)
    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros(B, H, Lq, Dv, dtype=cdt)
    lse = torch.full((B, H, Lq), -math.inf, dtype=cdt)
    span = PAGES_PER_SPLIT * bs
    for b in range(B):
        Sb = int(cache_seqlens[b]) + n_new
        npages = (Sb + bs - 1) // bs
        qh = q[b].to(cdt).transpose(0, 1)
        qpos = torch.arange(Lq)[:, None] + (int(cache_seqlens[b]) - Lq)
        po, pl = [], []
        for p0 in range(0, npages, PAGES_PER_SPLIT):
            pages = block_table[b, p0:min(p0 + PAGES_PER_SPLIT, npages)].long()
            k0 = p0 * bs
            n = min(span, Sb - k0)
            kk = k_cache[pages].reshape(-1, Hkv, D)[:n].to(cdt).transpose(0, 1).repeat_interleave(g, 0)
            vv = v_cache[pages].reshape(-1, Hkv, Dv)[:n].to(cdt).transpose(0, 1).repeat_interleave(g, 0)
            o, l = _split(qh, kk, vv, k0, qpos, sc, softcap, left, right)
            po.append(o)
            pl.append(l)
        if not po:
            continue
        O = torch.stack(po)
        LS = torch.stack(pl)
        mx = LS.amax(0)
        mx = torch.where(torch.isinf(mx), torch.zeros_like(mx), mx)
        w = torch.exp(LS - mx)
        tot = w.sum(0)
        good = tot > 0
        out[b] = (w * O).sum(0) / torch.where(good, tot, torch.ones_like(tot))
        lse[b] = torch.where(good, mx + torch.log(torch.where(good, tot, torch.ones_like(tot))),
                             torch.full_like(tot, -math.inf)).squeeze(-1)
    out = out.transpose(1, 2).to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
