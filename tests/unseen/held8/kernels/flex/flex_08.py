TRUTH = {
    "api": "flex",
    "bugs": [
        "score_mod receives the kv head index (h // group) instead of the query head h; wrong only with GQA and a head-dependent score_mod (batch_scoremod_gqa)"
    ],
    "kind": "semantic"
}

import math
import torch


def kernel(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    B, H, L, E = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    Ev = value.shape[-1]
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    cdt = torch.float64 if query.dtype == torch.float64 else torch.float32
    grp = H // Hkv
    if block_mask is not None:
        QB, KB = block_mask.BLOCK_SIZE
    else:
        QB, KB = 128, 128
    nq = (L + QB - 1) // QB
    nk = (S + KB - 1) // KB
    out = torch.zeros(B, H, L, Ev, dtype=cdt)
    lse = torch.full((B, H, L), float('-inf'), dtype=cdt)
    for b in range(B):
        for h in range(H):
            qh = query[b, h].to(cdt)
            kh = key[b, h // grp].to(cdt)
            vh = value[b, h // grp].to(cdt)
            if block_mask is not None:
                bb = b if block_mask.kv_num_blocks.shape[0] > 1 else 0
                hh = h if block_mask.kv_num_blocks.shape[1] > 1 else 0
            for iq in range(nq):
                q0, q1 = iq * QB, min((iq + 1) * QB, L)
                if block_mask is None:
                    plan = [(j, False) for j in range(nk)]
                else:
                    n_p = int(block_mask.kv_num_blocks[bb, hh, iq])
                    plan = [(int(j), True) for j in block_mask.kv_indices[bb, hh, iq, :n_p]]
                    if block_mask.full_kv_num_blocks is not None:
                        n_f = int(block_mask.full_kv_num_blocks[bb, hh, iq])
                        plan += [(int(j), False) for j in block_mask.full_kv_indices[bb, hh, iq, :n_f]]
                m_i = torch.full((q1 - q0,), float('-inf'), dtype=cdt)
                l_i = torch.zeros(q1 - q0, dtype=cdt)
                acc = torch.zeros(q1 - q0, Ev, dtype=cdt)
                qi = torch.arange(q0, q1)[:, None]
                for jb, partial in plan:
                    k0, k1 = jb * KB, min((jb + 1) * KB, S)
                    if k0 >= k1:
                        continue
                    ki = torch.arange(k0, k1)[None, :]
                    s = (qh[q0:q1] @ kh[k0:k1].t()) * sc
                    if score_mod is not None:
                        s = score_mod(s, torch.tensor(b), torch.tensor(h // grp), qi, ki).to(cdt)
                    if partial:
                        keep = block_mask.mask_mod(torch.tensor(b), torch.tensor(h), qi, ki)
                        s = s.masked_fill(~keep, float('-inf'))
                    m_new = torch.maximum(m_i, s.amax(-1))
                    m_use = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
                    p = torch.exp(s - m_use[:, None])
                    c = torch.exp(m_i - m_use)
                    l_i = l_i * c + p.sum(-1)
                    acc = acc * c[:, None] + p @ vh[k0:k1]
                    m_i = m_new
                pos = l_i > 0
                out[b, h, q0:q1] = acc / torch.where(pos, l_i, torch.ones_like(l_i))[:, None]
                lse[b, h, q0:q1] = torch.where(pos, m_i + torch.log(torch.where(pos, l_i, torch.ones_like(l_i))),
                                               torch.full_like(l_i, float('-inf')))
    out = out.to(query.dtype)
    if return_lse:
        return out, lse
    return out
