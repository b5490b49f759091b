"""Block-sparse flex attention: BlockMask partial/full key blocks per (batch, head, query block), score_mod vmapped
over each tile, online softmax with float32 statistics and accumulator."""

import math

import torch

TRUTH = {
    "api": "flex",
    "bugs": [
        "the scaled score tile is cast to the input dtype (bfloat16 for bfloat16 inputs) before score_mod and"
        " the softmax, rounding every score; scores should stay in float32 and only the output be cast back "
        "(measured, bf16 B=1 H=4 L=S=1024 E=64, no mask, max abs error vs float64 flex_attention: out 3.64e-3"
        " vs 7.34e-4 for the correct kernel, 5.0x; lse 1.3e-3 vs 6.1e-7)",
    ],
    "kind": "precision",
}


def _tile_fn(fn, with_score):
    lead = (0,) if with_score else ()
    f = torch.vmap(fn, in_dims=lead + (None, None, None, 0))
    f = torch.vmap(f, in_dims=lead + (None, None, 0, None))
    return f


def _kv_blocks(block_mask, b, h, qb):
    bb = b if block_mask.kv_num_blocks.shape[0] > 1 else 0
    hh = h if block_mask.kv_num_blocks.shape[1] > 1 else 0
    blocks = []
    n = int(block_mask.kv_num_blocks[bb, hh, qb])
    blocks += [(int(x), False) for x in block_mask.kv_indices[bb, hh, qb, :n]]
    if block_mask.full_kv_num_blocks is not None:
        nf = int(block_mask.full_kv_num_blocks[bb, hh, qb])
        blocks += [(int(x), True) for x in block_mask.full_kv_indices[bb, hh, qb, :nf]]
    return sorted(blocks)


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    dtype = query.dtype
    wt = torch.float64 if dtype == torch.float64 else torch.float32
    B, H, L, E = query.shape
    Hkv, S, Ev = key.shape[1], key.shape[2], value.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(E)
    group = H // Hkv if enable_gqa else 1
    dev = query.device
    q = query.to(wt)
    k = key.to(wt)
    v = value.to(wt)

    if block_mask is not None:
        QB, KB = block_mask.BLOCK_SIZE
        mask_fn = _tile_fn(block_mask.mask_mod, with_score=False)
    else:
        QB, KB = 128, 128
        mask_fn = None
    score_fn = _tile_fn(score_mod, with_score=True) if score_mod is not None else None

    out_bh = []
    lse_bh = []
    for b in range(B):
        b_t = torch.tensor(b, device=dev)
        for h in range(H):
            h_t = torch.tensor(h, device=dev)
            hk = h // group
            outs = []
            lses = []
            for qb, i0 in enumerate(range(0, L, QB)):
                i1 = min(i0 + QB, L)
                q_idx = torch.arange(i0, i1, device=dev)
                qt = q[b, h, i0:i1]
                if block_mask is not None:
                    blocks = _kv_blocks(block_mask, b, h, qb)
                else:
                    blocks = [(j, True) for j in range((S + KB - 1) // KB)]
                m_i = torch.full((i1 - i0, 1), float("-inf"), dtype=wt, device=dev)
                l_i = torch.zeros((i1 - i0, 1), dtype=wt, device=dev)
                acc = torch.zeros((i1 - i0, Ev), dtype=wt, device=dev)
                for kb, full in blocks:
                    j0 = kb * KB
                    j1 = min(j0 + KB, S)
                    if j0 >= S:
                        continue
                    kv_idx = torch.arange(j0, j1, device=dev)
                    s = ((qt @ k[b, hk, j0:j1].transpose(0, 1)) * scale).to(dtype).to(wt)
                    if score_fn is not None:
                        s = score_fn(s, b_t, h_t, q_idx, kv_idx)
                    if not full:
                        keep = mask_fn(b_t, h_t, q_idx, kv_idx)
                        s = torch.where(keep, s, torch.full_like(s, float("-inf")))
                    m_new = torch.maximum(m_i, s.amax(dim=-1, keepdim=True)).detach()
                    m_use = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
                    alpha = torch.exp(m_i - m_use)
                    p = torch.exp(s - m_use)
                    l_i = l_i * alpha + p.sum(dim=-1, keepdim=True)
                    acc = acc * alpha + p @ v[b, hk, j0:j1]
                    m_i = m_new
                live = l_i > 0
                l_safe = torch.where(live, l_i, torch.ones_like(l_i))
                outs.append(acc / l_safe)
                lses.append(torch.where(live, m_i + torch.log(l_safe), torch.full_like(l_i, float("-inf"))))
            out_bh.append(torch.cat(outs, dim=0))
            lse_bh.append(torch.cat(lses, dim=0).squeeze(-1))
    out = torch.stack(out_bh).view(B, H, L, Ev).to(dtype)
    if return_lse:
        return out, torch.stack(lse_bh).view(B, H, L).detach()
    return out
