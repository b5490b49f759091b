"""Block-sparse flex_attention: iterates query tiles over the BlockMask's listed kv blocks with an online softmax."""
import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "partial blocks (kv_num_blocks/kv_indices) are treated like full blocks: mask_mod is never evaluated inside them, "
        "so masking only happens at BLOCK_SIZE granularity and masked-out elements inside partially masked blocks "
        "(e.g. above the diagonal of a causal mask) are attended",
    ],
    "kind": "semantic",
}


def _dense_blocks(num, idx, n_cols):
    cols = torch.arange(idx.shape[-1], device=idx.device)
    live = cols < num.unsqueeze(-1)
    target = torch.where(live, idx.long(), torch.full_like(idx.long(), n_cols))
    d = torch.zeros(*idx.shape[:-1], n_cols + 1, dtype=torch.bool, device=idx.device)
    return d.scatter_(-1, target, True)[..., :n_cols]


def _score_mod_grid(score_mod, s, q0, q1, k0, k1):
    B, H = s.shape[0], s.shape[1]
    dev = s.device
    b = torch.arange(B, device=dev).view(B, 1, 1, 1)
    h = torch.arange(H, device=dev).view(1, H, 1, 1)
    qi = torch.arange(q0, q1, device=dev).view(1, 1, -1, 1)
    ki = torch.arange(k0, k1, device=dev).view(1, 1, 1, -1)
    return torch.broadcast_to(score_mod(s, b, h, qi, ki), s.shape).to(s.dtype)


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, D = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    sm = scale if scale is not None else 1.0 / math.sqrt(D)
    q = query.to(ct)
    k = key.to(ct).repeat_interleave(H // Hkv, dim=1)
    v = value.to(ct).repeat_interleave(H // Hkv, dim=1)

    if block_mask is not None:
        QB, KB = block_mask.BLOCK_SIZE
        nkv = (S + KB - 1) // KB
        listed = _dense_blocks(block_mask.kv_num_blocks, block_mask.kv_indices, nkv)
        if block_mask.full_kv_num_blocks is not None:
            listed = listed | _dense_blocks(block_mask.full_kv_num_blocks, block_mask.full_kv_indices, nkv)
        listed = listed.expand(B, H, *listed.shape[2:])
    else:
        QB, KB = 128, 128
        nkv = (S + KB - 1) // KB
        listed = torch.ones(B, H, (L + QB - 1) // QB, nkv, dtype=torch.bool, device=q.device)

    out = torch.zeros(B, H, L, v.shape[-1], dtype=ct, device=q.device)
    lse = torch.full((B, H, L), float("-inf"), dtype=ct, device=q.device)
    for i in range((L + QB - 1) // QB):
        q0, q1 = i * QB, min(L, (i + 1) * QB)
        m = torch.full((B, H, q1 - q0), float("-inf"), dtype=ct, device=q.device)
        l = torch.zeros((B, H, q1 - q0), dtype=ct, device=q.device)
        acc = torch.zeros((B, H, q1 - q0, v.shape[-1]), dtype=ct, device=q.device)
        for j in range(nkv):
            use = listed[:, :, i, j]
            if not bool(use.any()):
                continue
            k0, k1 = j * KB, min(S, (j + 1) * KB)
            s = torch.matmul(q[:, :, q0:q1], k[:, :, k0:k1].transpose(-1, -2)) * sm
            if score_mod is not None:
                s = _score_mod_grid(score_mod, s, q0, q1, k0, k1)
            s = s.masked_fill(~use[:, :, None, None], float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            base = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
            a = torch.exp(m - base)
            p = torch.exp(s - base.unsqueeze(-1))
            l = l * a + p.sum(-1)
            acc = acc * a.unsqueeze(-1) + torch.matmul(p, v[:, :, k0:k1])
            m = m_new
        ok = l > 0
        den = torch.where(ok, l, torch.ones_like(l))
        out[:, :, q0:q1] = acc / den.unsqueeze(-1)
        lse[:, :, q0:q1] = torch.where(ok, m + torch.log(den), lse[:, :, q0:q1])
    out = out.to(query.dtype)
    return (out, lse.float()) if return_lse else out
