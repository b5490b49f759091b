import math

import torch


def _tile_update(state, scores, values):
    """Fold one tile of scores (..., Bq, Bk) and its values (..., Bk, Ev) into (m, l, acc)."""
    m, l, acc = state
    tile_max = scores.max(dim=-1, keepdim=True).values
    new_m = torch.maximum(m, tile_max)
    # a row that has seen only -inf keeps a -inf max: shift by 0 there so exp(-inf - -inf) does not appear
    shift = torch.where(torch.isfinite(new_m), new_m, torch.zeros_like(new_m))
    corr = torch.exp(m - shift)
    p = torch.exp(scores - shift)
    l = l * corr + p.sum(dim=-1, keepdim=True)
    acc = acc * corr + torch.matmul(p, values)
    return new_m, l, acc


def flash_forward(q, k, v, is_causal=False, block_q=64, block_k=64):
    in_dtype = q.dtype
    f = torch.float64 if in_dtype == torch.float64 else torch.float32
    q, k, v = q.to(f), k.to(f), v.to(f)
    *batch, n_q, d = q.shape
    n_k, d_v = k.shape[-2], v.shape[-1]
    sm_scale = d**-0.5

    outs, lses = [], []
    for qs in range(0, n_q, block_q):
        qe = min(qs + block_q, n_q)
        q_tile = q[..., qs:qe, :] * sm_scale
        q_pos = torch.arange(qs, qe, device=q.device)[:, None]
        state = (
            torch.full((*batch, qe - qs, 1), -math.inf, dtype=f, device=q.device),
            torch.zeros((*batch, qe - qs, 1), dtype=f, device=q.device),
            torch.zeros((*batch, qe - qs, d_v), dtype=f, device=q.device),
        )
        k_end = min(n_k, qe) if is_causal else n_k  # causal: nothing past the tile's last query
        for ks in range(0, k_end, block_k):
            ke = min(ks + block_k, n_k)
            sc = q_tile @ k[..., ks:ke, :].transpose(-1, -2)
            if is_causal:
                k_pos = torch.arange(ks, ke, device=q.device)[None, :]
                sc = torch.where(k_pos <= q_pos, sc, torch.full_like(sc, -math.inf))
            state = _tile_update(state, sc, v[..., ks:ke, :])
        m, l, acc = state
        outs.append(acc / l)
        lses.append((m + l.log()).squeeze(-1))
    out = torch.cat(outs, dim=-2)
    lse = torch.cat(lses, dim=-1)
    return out.to(in_dtype), lse
