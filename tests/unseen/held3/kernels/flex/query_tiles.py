"""flex_attention processed in query tiles of 32 rows; each tile sees all keys, masked by the tile's rows of the BlockMask."""
import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "the BlockMask is read only at batch 0 / head 0 (kv_num_blocks[0, 0], kv_indices[0, 0], the full-block lists "
        "[0, 0], and mask_mod called with b = h = 0) and reused for every (b, h); masks created per batch or per head "
        "(create_block_mask with B/H > 1 and a b/h-dependent mask_mod) are applied wrongly",
        "score_mod receives the row index local to the 32-row query tile (0..31) as q_idx instead of the global query "
        "index, so position-dependent score mods (relative bias, causal-by-score, ALiBi) are wrong from the second "
        "tile on",
    ],
    "kind": "two",
}

_QT = 32


def _dense(num, idx, ncols):
    slot = torch.arange(idx.shape[-1], device=idx.device)
    tgt = torch.where(slot < num[..., None], idx.long(), ncols)
    d = torch.zeros(*idx.shape[:-1], ncols + 1, dtype=torch.bool, device=idx.device)
    return d.scatter_(-1, tgt, True)[..., :ncols]


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, D = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    sm = 1.0 / math.sqrt(D) if scale is None else scale
    q = query.to(ct)
    k = key.to(ct).repeat_interleave(H // Hkv, dim=1)
    v = value.to(ct).repeat_interleave(H // Hkv, dim=1)
    dev = q.device
    bb = torch.arange(B, device=dev).view(B, 1, 1, 1)
    hh = torch.arange(H, device=dev).view(1, H, 1, 1)
    kk = torch.arange(S, device=dev).view(1, 1, 1, S)

    elem = None
    if block_mask is not None:
        QB, KB = block_mask.BLOCK_SIZE
        nkv = (S + KB - 1) // KB
        part = _dense(block_mask.kv_num_blocks[0, 0], block_mask.kv_indices[0, 0], nkv)
        full = None
        if block_mask.full_kv_num_blocks is not None:
            full = _dense(block_mask.full_kv_num_blocks[0, 0], block_mask.full_kv_indices[0, 0], nkv)
        rows = (torch.arange(L, device=dev) // QB).clamp(max=part.shape[0] - 1)
        cols = (torch.arange(S, device=dev) // KB).clamp(max=nkv - 1)
        zero = torch.zeros((), dtype=torch.long, device=dev)
        inner = torch.broadcast_to(
            block_mask.mask_mod(zero, zero, torch.arange(L, device=dev)[:, None], torch.arange(S, device=dev)[None, :]),
            (L, S))
        elem = part[rows][:, cols] & inner
        if full is not None:
            elem = elem | full[rows][:, cols]

    out = torch.zeros(B, H, L, v.shape[-1], dtype=ct, device=dev)
    lse = torch.full((B, H, L), float("-inf"), dtype=ct, device=dev)
    for r0 in range(0, L, _QT):
        r1 = min(L, r0 + _QT)
        s = torch.matmul(q[:, :, r0:r1], k.transpose(-1, -2)) * sm
        if score_mod is not None:
            local_q = torch.arange(r1 - r0, device=dev).view(1, 1, -1, 1)
            s = torch.broadcast_to(score_mod(s, bb, hh, local_q, kk), s.shape).to(ct)
        if elem is not None:
            s = s.masked_fill(~elem[r0:r1], float("-inf"))
        t = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - torch.where(torch.isfinite(t), t, torch.zeros_like(t)).unsqueeze(-1))
        out[:, :, r0:r1] = torch.matmul(p, v)
        lse[:, :, r0:r1] = t
    out = out.to(query.dtype)
    return (out, lse.float()) if return_lse else out
