TRUTH = {'api': 'flex',
 'bugs': ['enable_gqa expands kv heads with .repeat (tiling) instead of repeat_interleave, so query head h reads '
          'kv head h % Hkv; wrong when 1 < Hkv < H (gqa_headmask)',
          'full blocks (full_kv_num_blocks / full_kv_indices) are never read, only the partial kv blocks, so keys '
          'in full blocks are hidden; wrong whenever the block mask has full blocks (causal, window, prefix, '
          'gqa_headmask, docmask ...)'],
 'kind': 'two'}

import math
import torch


def _block_table(num, idx, nk):
    slot = torch.arange(idx.shape[-1])
    valid = slot < num.unsqueeze(-1).long()
    tgt = torch.where(valid, idx.long(), torch.full_like(idx.long(), nk))
    tab = torch.zeros(idx.shape[:-1] + (nk + 1,), dtype=torch.bool)
    tab.scatter_(-1, tgt, True)
    return tab[..., :nk]


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    dt = query.dtype
    cd = torch.float64 if dt == torch.float64 else torch.float32
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    q, k, v = query.to(cd), key.to(cd), value.to(cd)
    if enable_gqa and H != Hkv:
        k = k.repeat(1, H // Hkv, 1, 1)
        v = v.repeat(1, H // Hkv, 1, 1)
    s = torch.matmul(q, k.transpose(-1, -2)) * sc
    bi = torch.arange(B).view(B, 1, 1, 1)
    hi = torch.arange(H).view(1, H, 1, 1)
    qi = torch.arange(L).view(1, 1, L, 1)
    ki = torch.arange(S).view(1, 1, 1, S)
    if score_mod is not None:
        s = score_mod(s, bi, hi, qi, ki).to(cd)
    keep = torch.ones(1, 1, L, S, dtype=torch.bool)
    if block_mask is not None:
        QB, KB = block_mask.BLOCK_SIZE
        nk = (S + KB - 1) // KB
        part = _block_table(block_mask.kv_num_blocks, block_mask.kv_indices, nk)
        full = torch.zeros_like(part)
        part = part.repeat_interleave(QB, dim=-2)[..., :L, :].repeat_interleave(KB, dim=-1)[..., :S]
        full = full.repeat_interleave(QB, dim=-2)[..., :L, :].repeat_interleave(KB, dim=-1)[..., :S]
        mm = block_mask.mask_mod(bi, hi, qi, ki)
        keep = full | (part & mm)
    s = s.masked_fill(~keep, -math.inf)
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    den = e.sum(dim=-1, keepdim=True)
    out = (torch.matmul(e, v) / torch.where(den > 0, den, torch.ones_like(den))).to(dt)
    if return_lse:
        lse = torch.where(den > 0, m + torch.log(den), torch.full_like(den, -math.inf)).squeeze(-1)
        return out, lse.to(cd)
    return out
