import math

import torch

TRUTH = {'api': 'flex', 'bugs': ['score_mod is called as score_mod(score, b, h, kv_idx, q_idx) (query and key index swapped, the vmap in_dims are set up for that order), so any score_mod that is not symmetric in q_idx/kv_idx (relative bias q - kv, a captured bias[b, h, q, kv] table that is not symmetric) gives wrong scores.'], 'kind': 'semantic'}

TILE_Q = 64
TILE_KV = 32


def _grid_score(fn):
    f = torch.vmap(fn, in_dims=(0, None, None, 0, None))
    return torch.vmap(f, in_dims=(0, None, None, None, 0))


def _grid_mask(fn):
    f = torch.vmap(fn, in_dims=(None, None, None, 0))
    return torch.vmap(f, in_dims=(None, None, 0, None))


def _kv_blocks(block_mask, b, h, qi, n_kv_blocks):
    if block_mask is None:
        return [(j, True) for j in range(n_kv_blocks)]
    nb = block_mask.kv_num_blocks
    bi = b if nb.shape[0] > 1 else 0
    hi = h if nb.shape[1] > 1 else 0
    n = int(nb[bi, hi, qi])
    blocks = [(int(j), False) for j in block_mask.kv_indices[bi, hi, qi, :n]]
    if block_mask.full_kv_num_blocks is not None:
        nf = int(block_mask.full_kv_num_blocks[bi, hi, qi])
        blocks += [(int(j), True) for j in block_mask.full_kv_indices[bi, hi, qi, :nf]]
    return blocks


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S, Ev = key.shape[1], key.shape[2], value.shape[3]
    group = H // Hkv if enable_gqa else 1
    acc = torch.float64 if query.dtype == torch.float64 else torch.float32
    if scale is None:
        scale = 1.0 / math.sqrt(E)
    if block_mask is not None:
        QB, KB = block_mask.BLOCK_SIZE
    else:
        QB, KB = TILE_Q, TILE_KV
    smod = _grid_score(score_mod) if score_mod is not None else None
    mmod = _grid_mask(block_mask.mask_mod) if block_mask is not None else None
    n_kv_blocks = (S + KB - 1) // KB
    out = torch.zeros(B, H, L, Ev, dtype=acc)
    lse = torch.full((B, H, L), -math.inf, dtype=acc)
    for b in range(B):
        b_idx = torch.tensor(b)
        for h in range(H):
            kvh = h // group
            h_idx = torch.tensor(h)
            q = query[b, h].to(acc)
            k = key[b, kvh].to(acc)
            v = value[b, kvh].to(acc)
            for qi in range((L + QB - 1) // QB):
                m0, m1 = qi * QB, min(L, qi * QB + QB)
                q_idx = torch.arange(m0, m1)
                qt = q[m0:m1]
                row_max = torch.full((m1 - m0,), -math.inf, dtype=acc)
                row_sum = torch.zeros(m1 - m0, dtype=acc)
                o = torch.zeros(m1 - m0, Ev, dtype=acc)
                for kj, full in _kv_blocks(block_mask, b, h, qi, n_kv_blocks):
                    n0, n1 = kj * KB, min(S, kj * KB + KB)
                    if n0 >= n1:
                        continue
                    kv_idx = torch.arange(n0, n1)
                    s = torch.matmul(qt, k[n0:n1].transpose(0, 1)) * scale
                    if smod is not None:
                        s = smod(s, b_idx, h_idx, kv_idx, q_idx).to(acc)
                    if not full:
                        keep = mmod(b_idx, h_idx, q_idx, kv_idx)
                        s = s.masked_fill(~keep, -math.inf)
                    new_max = torch.maximum(row_max, s.amax(-1))
                    base = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
                    p = torch.exp(s - base[:, None])
                    rescale = torch.exp(row_max - base)
                    row_sum = row_sum * rescale + p.sum(-1)
                    o = o * rescale[:, None] + torch.matmul(p, v[n0:n1])
                    row_max = new_max
                nz = row_sum > 0
                den = torch.where(nz, row_sum, torch.ones_like(row_sum))
                out[b, h, m0:m1] = torch.where(nz[:, None], o / den[:, None], torch.zeros_like(o))
                lse[b, h, m0:m1] = torch.where(nz, row_max + torch.log(den), torch.full_like(den, -math.inf))
    out = out.to(query.dtype)
    if return_lse:
        return out, lse
    return out
