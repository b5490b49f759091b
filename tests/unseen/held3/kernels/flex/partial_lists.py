"""Block-sparse flex_attention: per query tile, visits the BlockMask's kv blocks and applies mask_mod inside them."""
import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "only the partial-block lists (kv_num_blocks / kv_indices) are visited; the full-block lists (full_kv_num_blocks "
        "/ full_kv_indices) that create_block_mask produces for completely unmasked blocks are ignored, so every fully "
        "visible block (e.g. the blocks below the diagonal of a causal mask) is dropped from attention",
    ],
    "kind": "semantic",
}


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, D = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    acc_t = torch.float64 if query.dtype == torch.float64 else torch.float32
    sm_scale = scale if scale is not None else 1.0 / math.sqrt(D)
    q = query.to(acc_t)
    k = key.to(acc_t).repeat_interleave(H // Hkv, 1)
    v = value.to(acc_t).repeat_interleave(H // Hkv, 1)
    dev = q.device
    b_ix = torch.arange(B, device=dev).view(B, 1, 1, 1)
    h_ix = torch.arange(H, device=dev).view(1, H, 1, 1)

    if block_mask is None:
        QB = KB = 128
        n_q, n_kv = (L + QB - 1) // QB, (S + KB - 1) // KB
        kv_num = torch.full((1, 1, n_q), n_kv, dtype=torch.int32, device=dev)
        kv_idx = torch.arange(n_kv, dtype=torch.int32, device=dev).expand(1, 1, n_q, n_kv)
        mask_mod = None
    else:
        QB, KB = block_mask.BLOCK_SIZE
        kv_num, kv_idx = block_mask.kv_num_blocks, block_mask.kv_indices
        mask_mod = block_mask.mask_mod
    kv_num = kv_num.expand(B, H, kv_num.shape[-1])
    kv_idx = kv_idx.expand(B, H, *kv_idx.shape[-2:])

    out = torch.zeros(B, H, L, v.shape[-1], dtype=acc_t, device=dev)
    lse = torch.full((B, H, L), float("-inf"), dtype=acc_t, device=dev)
    for qi in range((L + QB - 1) // QB):
        q0, q1 = qi * QB, min(L, (qi + 1) * QB)
        rows = torch.arange(q0, q1, device=dev).view(1, 1, -1, 1)
        m_i = torch.full((B, H, q1 - q0), float("-inf"), dtype=acc_t, device=dev)
        l_i = torch.zeros((B, H, q1 - q0), dtype=acc_t, device=dev)
        o_i = torch.zeros((B, H, q1 - q0, v.shape[-1]), dtype=acc_t, device=dev)
        count = kv_num[:, :, qi]
        for slot in range(int(count.max()) if count.numel() else 0):
            active = slot < count
            for kb in torch.unique(kv_idx[:, :, qi, slot][active]).tolist():
                sel = active & (kv_idx[:, :, qi, slot] == kb)
                k0, k1 = kb * KB, min(S, (kb + 1) * KB)
                if k0 >= k1:
                    continue
                cols = torch.arange(k0, k1, device=dev).view(1, 1, 1, -1)
                s = torch.matmul(q[:, :, q0:q1], k[:, :, k0:k1].transpose(-1, -2)) * sm_scale
                if score_mod is not None:
                    s = torch.broadcast_to(score_mod(s, b_ix, h_ix, rows, cols), s.shape).to(acc_t)
                keep = sel[:, :, None, None].expand_as(s)
                if mask_mod is not None:
                    keep = keep & torch.broadcast_to(mask_mod(b_ix, h_ix, rows, cols), s.shape)
                s = s.masked_fill(~keep, float("-inf"))
                m_new = torch.maximum(m_i, s.amax(-1))
                ref = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
                scale_old = torch.exp(m_i - ref)
                p = torch.exp(s - ref.unsqueeze(-1))
                l_i = l_i * scale_old + p.sum(-1)
                o_i = o_i * scale_old.unsqueeze(-1) + torch.matmul(p, v[:, :, k0:k1])
                m_i = m_new
        nz = l_i > 0
        d = torch.where(nz, l_i, torch.ones_like(l_i))
        out[:, :, q0:q1] = o_i / d.unsqueeze(-1)
        lse[:, :, q0:q1] = torch.where(nz, m_i + torch.log(d), lse[:, :, q0:q1])
    out = out.to(query.dtype)
    if return_lse:
        return out, lse.float()
    return out
