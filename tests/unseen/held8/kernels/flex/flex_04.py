TRUTH = {
    "api": "flex",
    "bugs": [],
    "kind": "correct"
}

import math
import torch


def _blocks(num, idx, nk):
    valid = torch.arange(idx.shape[-1]) < num[..., None]
    return ((idx.long()[..., None] == torch.arange(nk)) & valid[..., None]).any(-2)


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    cdt = torch.float64 if query.dtype == torch.float64 else torch.float32
    kv_head = torch.arange(H) // (H // Hkv)
    q = query.to(cdt)
    k = key.to(cdt)[:, kv_head]
    v = value.to(cdt)[:, kv_head]
    if block_mask is not None:
        QB, KB = block_mask.BLOCK_SIZE
    else:
        QB, KB = L, 64
    nk = (S + KB - 1) // KB
    if block_mask is not None:
        part = _blocks(block_mask.kv_num_blocks, block_mask.kv_indices, nk)
        if block_mask.full_kv_num_blocks is not None:
            full = _blocks(block_mask.full_kv_num_blocks, block_mask.full_kv_indices, nk)
        else:
            full = torch.zeros_like(part)
        part = part.repeat_interleave(QB, dim=2)[:, :, :L]
        full = full.repeat_interleave(QB, dim=2)[:, :, :L]
    bi = torch.arange(B).view(B, 1, 1, 1)
    hi = torch.arange(H).view(1, H, 1, 1)
    qi = torch.arange(L).view(1, 1, L, 1)
    lses, outs = [], []
    for jb in range(nk):
        k0, k1 = jb * KB, min(S, (jb + 1) * KB)
        ki = torch.arange(k0, k1).view(1, 1, 1, -1)
        s = torch.matmul(q, k[:, :, k0:k1].transpose(-1, -2)) * sc
        if score_mod is not None:
            s = score_mod(s, bi, hi, qi, ki).to(cdt)
        if block_mask is not None:
            keep = full[..., jb, None] | (part[..., jb, None] & block_mask.mask_mod(bi, hi, qi, ki))
            s = s.masked_fill(~keep, float('-inf'))
        s = s.expand(B, H, L, k1 - k0)
        lse_j = torch.logsumexp(s, dim=-1)
        safe = torch.where(torch.isinf(lse_j), torch.zeros_like(lse_j), lse_j)
        outs.append(torch.matmul(torch.exp(s - safe[..., None]), v[:, :, k0:k1]))
        lses.append(lse_j)
    lse_all = torch.stack(lses)
    lse = torch.logsumexp(lse_all, dim=0)
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    w = torch.exp(lse_all - safe[None])
    out = (w[..., None] * torch.stack(outs)).sum(0).to(query.dtype)
    if return_lse:
        return out, lse
    return out
