"""Dense flex_attention that materialises the BlockMask as an element mask on broadcast index grids, then one softmax."""
import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "inside partial blocks mask_mod is called as mask_mod(b, h, kv_idx, q_idx) (query and key index swapped), so "
        "element-level masking is transposed (e.g. a causal mask keeps only the diagonal of each partial diagonal block); "
        "it must be mask_mod(b, h, q_idx, kv_idx)",
        "with enable_gqa the kv heads are widened with Tensor.repeat (tiling), so query head h reads kv head h % Hkv "
        "instead of h // (H // Hkv)",
    ],
    "kind": "two",
}


def _dense(num, idx, ncols):
    slot = torch.arange(idx.shape[-1], device=idx.device)
    tgt = torch.where(slot < num[..., None], idx.long(), ncols)
    return torch.zeros(*idx.shape[:-1], ncols + 1, dtype=torch.bool, device=idx.device).scatter_(-1, tgt, True)[..., :ncols]


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, D = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    f = torch.float64 if query.dtype == torch.float64 else torch.float32
    sc = scale if scale is not None else 1.0 / math.sqrt(D)
    k, v = key.to(f), value.to(f)
    if Hkv != H:
        k = k.repeat(1, H // Hkv, 1, 1)
        v = v.repeat(1, H // Hkv, 1, 1)
    dev = query.device
    b = torch.arange(B, device=dev)[:, None, None, None]
    h = torch.arange(H, device=dev)[None, :, None, None]
    qi = torch.arange(L, device=dev)[None, None, :, None]
    ki = torch.arange(S, device=dev)[None, None, None, :]

    s = torch.einsum("bhld,bhsd->bhls", query.to(f), k) * sc
    if score_mod is not None:
        s = torch.broadcast_to(score_mod(s, b, h, qi, ki), s.shape).to(f)
    if block_mask is not None:
        QB, KB = block_mask.BLOCK_SIZE
        nkv = (S + KB - 1) // KB
        rows = (qi // QB).expand(1, 1, L, S)
        cols = (ki // KB).expand(1, 1, L, S)

        def lookup(d):
            d = d.expand(B, H, *d.shape[-2:])
            return d[b, h, rows.clamp(max=d.shape[-2] - 1), cols.clamp(max=d.shape[-1] - 1)]

        part = lookup(_dense(block_mask.kv_num_blocks, block_mask.kv_indices, nkv))
        inside = torch.broadcast_to(block_mask.mask_mod(b, h, ki, qi), (B, H, L, S))
        allowed = part & inside
        if block_mask.full_kv_num_blocks is not None:
            allowed = allowed | lookup(_dense(block_mask.full_kv_num_blocks, block_mask.full_kv_indices, nkv))
        s = s.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))[..., None])
    out = torch.einsum("bhls,bhsd->bhld", p, v).to(query.dtype)
    return (out, lse.float()) if return_lse else out
