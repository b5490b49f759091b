import math

import torch

TRUTH = {"api": "flex", "bugs": [], "kind": "correct"}

Q_TILE = 48


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    """Two-pass softmax over query tiles; the mask is evaluated element-wise from block_mask.mask_mod."""
    B, H, L, E = query.shape
    Hkv, S, Ev = key.shape[1], key.shape[2], value.shape[3]
    if H != Hkv and not enable_gqa:
        raise ValueError("enable_gqa=False requires matching heads")
    group = H // Hkv
    acc_t = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(E) if scale is None else float(scale)
    dev = query.device
    k = key.to(acc_t)[:, :, None]                        # (B, Hkv, 1, S, E)
    v = value.to(acc_t)[:, :, None]                      # (B, Hkv, 1, S, Ev)
    b_idx = torch.arange(B, device=dev).view(B, 1, 1, 1)
    h_idx = torch.arange(H, device=dev).view(1, H, 1, 1)
    kv_idx = torch.arange(S, device=dev).view(1, 1, 1, S)
    out = torch.empty(B, H, L, Ev, dtype=query.dtype, device=dev)
    lse = torch.empty(B, H, L, dtype=acc_t, device=dev)
    for q0 in range(0, L, Q_TILE):
        q1 = min(q0 + Q_TILE, L)
        M = q1 - q0
        q = query[:, :, q0:q1].to(acc_t).view(B, Hkv, group, M, E)
        s = torch.matmul(q, k.transpose(-1, -2)).view(B, H, M, S) * scale
        q_idx = torch.arange(q0, q1, device=dev).view(1, 1, M, 1)
        if score_mod is not None:
            s = score_mod(s, b_idx, h_idx, q_idx, kv_idx).expand(B, H, M, S)
        if block_mask is not None:
            keep = block_mask.mask_mod(b_idx, h_idx, q_idx, kv_idx).expand(B, H, M, S)
            s = s.masked_fill(~keep, -math.inf)
        row_max = s.amax(-1, keepdim=True)
        row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
        p = torch.exp(s - row_max)
        denom = p.sum(-1, keepdim=True)
        empty = denom == 0
        denom = torch.where(empty, torch.ones_like(denom), denom)
        o = torch.matmul((p / denom).view(B, Hkv, group, M, S), v).view(B, H, M, Ev)
        out[:, :, q0:q1] = o.to(query.dtype)
        lse[:, :, q0:q1] = torch.where(empty, torch.full_like(denom, -math.inf), row_max + torch.log(denom))[..., 0]
    if return_lse:
        return out, lse
    return out
