TRUTH = {'api': 'flex', 'bugs': ['The lse is cast to the query dtype, so bfloat16 inputs get a bfloat16-rounded lse; shows on bfloat16 lse.'], 'kind': 'precision'}
import math
import torch


def _block_hits(indices, counts, nblk):
    ar = torch.arange(indices.shape[-1])
    valid = (ar < counts[..., None].long()).long()
    hits = torch.zeros(*indices.shape[:-1], nblk, dtype=torch.long)
    hits.scatter_add_(-1, indices.long(), valid)
    return hits > 0


def _token_mask(block_mask, b, h, qi, ki, L, S):
    QB, KB = block_mask.BLOCK_SIZE
    nkb = (S + KB - 1) // KB
    part = _block_hits(block_mask.kv_indices, block_mask.kv_num_blocks, nkb)
    part = part.repeat_interleave(QB, -2)[..., :L, :].repeat_interleave(KB, -1)[..., :S]
    allowed = part & block_mask.mask_mod(b, h, qi, ki)
    if block_mask.full_kv_num_blocks is not None:
        full = _block_hits(block_mask.full_kv_indices, block_mask.full_kv_num_blocks, nkb)
        full = full.repeat_interleave(QB, -2)[..., :L, :].repeat_interleave(KB, -1)[..., :S]
        allowed = allowed | full
    return allowed


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    cdt = torch.float32 if query.dtype == torch.bfloat16 else query.dtype
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    kvh = torch.arange(H) // (H // Hkv)
    k = key.to(cdt)[:, kvh]
    v = value.to(cdt)[:, kvh]
    s = torch.matmul(query.to(cdt), k.transpose(-1, -2)) * sc
    b = torch.arange(B).view(B, 1, 1, 1)
    h = torch.arange(H).view(1, H, 1, 1)
    qi = torch.arange(L).view(1, 1, L, 1)
    ki = torch.arange(S).view(1, 1, 1, S)
    if score_mod is not None:
        s = score_mod(s, b, h, qi, ki).to(cdt)
    if block_mask is not None:
        s = s.masked_fill(~_token_mask(block_mask, b, h, qi, ki, L, S), -math.inf)
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    den = e.sum(-1, keepdim=True)
    has = den > 0
    den1 = torch.where(has, den, torch.ones_like(den))
    out = (torch.matmul(e, v) / den1).to(query.dtype)
    lse = torch.where(has, m + torch.log(den1), torch.full_like(den, -math.inf)).squeeze(-1).to(query.dtype)
    if return_lse:
        return out, lse
    return out
