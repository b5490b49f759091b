"""Triton-flex-style kernel with exp2 arithmetic: online softmax over kv tiles of 64, LSE converted back to natural log."""
import math

import torch
from torch.nn.attention.flex_attention import create_mask

TRUTH = {
    "api": "flex",
    "bugs": [
        "the exponent argument s2 - m2 is rounded to bfloat16 and exp2 is evaluated in bfloat16 (fixed P dtype, also for "
        "float32 inputs), so each probability carries up to ~1-2% relative error that feeds both the row sum and P@V; "
        "float32 outputs/lse end up only ~1e-3 accurate. exp2 should be evaluated in float32",
    ],
    "kind": "precision",
}

_TILE = 64
_LOG2E = 1.4426950408889634
_P_DTYPE = torch.bfloat16


def _allowed(block_mask, B, H, L, S, device):
    QB, KB = block_mask.BLOCK_SIZE
    nkv = (S + KB - 1) // KB

    def dense(num, idx):
        slot = torch.arange(idx.shape[-1], device=device)
        tgt = torch.where(slot < num[..., None], idx.long(), nkv)
        d = torch.zeros(*idx.shape[:-1], nkv + 1, dtype=torch.bool, device=device).scatter_(-1, tgt, True)
        return d[..., :nkv].repeat_interleave(QB, -2)[..., :L, :].repeat_interleave(KB, -1)[..., :S]

    ok = dense(block_mask.kv_num_blocks, block_mask.kv_indices) & create_mask(block_mask.mask_mod, B, H, L, S, device)
    if block_mask.full_kv_num_blocks is not None:
        ok = ok | dense(block_mask.full_kv_num_blocks, block_mask.full_kv_indices)
    return ok.expand(B, H, L, S)


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, D = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    ft = torch.float64 if query.dtype == torch.float64 else torch.float32
    pt = ft if query.dtype == torch.float64 else _P_DTYPE
    scale = scale if scale is not None else 1.0 / math.sqrt(D)
    q = query.to(ft)
    k = key.to(ft).repeat_interleave(H // Hkv, dim=1)
    v = value.to(ft).repeat_interleave(H // Hkv, dim=1)
    dev = q.device
    allowed = _allowed(block_mask, B, H, L, S, dev) if block_mask is not None else None
    bb = torch.arange(B, device=dev).view(B, 1, 1, 1)
    hh = torch.arange(H, device=dev).view(1, H, 1, 1)
    qq = torch.arange(L, device=dev).view(1, 1, L, 1)

    m2 = torch.full((B, H, L), float("-inf"), dtype=ft, device=dev)
    l = torch.zeros((B, H, L), dtype=ft, device=dev)
    acc = torch.zeros((B, H, L, v.shape[-1]), dtype=ft, device=dev)
    for j0 in range(0, S, _TILE):
        j1 = min(S, j0 + _TILE)
        s = torch.matmul(q, k[:, :, j0:j1].transpose(-1, -2)) * scale
        if score_mod is not None:
            kk = torch.arange(j0, j1, device=dev).view(1, 1, 1, -1)
            s = torch.broadcast_to(score_mod(s, bb, hh, qq, kk), s.shape).to(ft)
        if allowed is not None:
            s = s.masked_fill(~allowed[..., j0:j1], float("-inf"))
        s2 = s * _LOG2E
        m_new = torch.maximum(m2, s2.amax(-1))
        base = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        alpha = torch.exp2(m2 - base)
        p = torch.exp2((s2 - base.unsqueeze(-1)).to(pt)).to(ft)
        l = l * alpha + p.sum(-1)
        acc = acc * alpha.unsqueeze(-1) + torch.matmul(p, v[:, :, j0:j1])
        m2 = m_new
    nz = l > 0
    den = torch.where(nz, l, torch.ones_like(l))
    out = (acc / den.unsqueeze(-1)).to(query.dtype)
    if return_lse:
        lse = torch.where(nz, (m2 + torch.log2(den)) / _LOG2E, torch.full_like(den, float("-inf")))
        return out, lse.float()
    return out
