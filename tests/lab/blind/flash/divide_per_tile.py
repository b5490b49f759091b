import math

import torch


def flash_forward(q, k, v, is_causal=False, block_q=64, block_k=64):
    in_dtype = q.dtype
    f = torch.float64 if in_dtype == torch.float64 else torch.float32
    q, k, v = q.to(f), k.to(f), v.to(f)
    *batch, n_q, d = q.shape
    n_k, d_v = k.shape[-2], v.shape[-1]
    outs, lses = [], []
    for qs in range(0, n_q, block_q):
        qe = min(qs + block_q, n_q)
        q_tile = q[..., qs:qe, :] / math.sqrt(d)
        q_pos = torch.arange(qs, qe, device=q.device)[:, None]
        m = torch.full((*batch, qe - qs, 1), -math.inf, dtype=f, device=q.device)
        l = torch.zeros((*batch, qe - qs, 1), dtype=f, device=q.device)
        o = torch.zeros((*batch, qe - qs, d_v), dtype=f, device=q.device)
        for ks in range(0, min(n_k, qe) if is_causal else n_k, block_k):
            ke = min(ks + block_k, n_k)
            sc = q_tile @ k[..., ks:ke, :].transpose(-1, -2)
            if is_causal:
                sc = sc.masked_fill(torch.arange(ks, ke, device=q.device)[None, :] > q_pos, -math.inf)
            new_m = torch.maximum(m, sc.amax(-1, keepdim=True))
            base = torch.where(torch.isfinite(new_m), new_m, torch.zeros_like(new_m))
            p = torch.exp(sc - base)
            tile_sum = p.sum(-1, keepdim=True)
            corr = torch.exp(m - base)
            # this tile's softmax-weighted values, merged into the running output
            o = o * corr + (p / tile_sum) @ v[..., ks:ke, :]
            l = l * corr + tile_sum
            m = new_m
        outs.append(o)
        lses.append((m + torch.log(l)).squeeze(-1))
    return torch.cat(outs, dim=-2).to(in_dtype), torch.cat(lses, dim=-1)
