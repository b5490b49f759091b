TRUTH = {'api': 'sdpa',
 'bugs': ['keys removed by the bool mask / is_causal are filled with -1e9 instead of -inf, so a query row with no '
          'allowed key (a fully False bool-mask row, or a float -inf row under is_causal) gets the uniform '
          "average of the -1e9-filled keys' values instead of zeros (bool_mask_B1LS_emptyrows, "
          'twobatch_boolLS_scale, float_mask_causal_11LS, bool_causal_L!=S: out and dv)',
          'GQA expansion tiles the kv heads (torch.cat of copies) instead of repeat_interleave, so query head h '
          'reads kv head h % Hkv; wrong when 1 < Hkv < H (gqa_6_2_causal)'],
 'kind': 'two'}

import math
import torch


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    dt = query.dtype
    cd = torch.float64 if dt == torch.float64 else torch.float32
    E = query.shape[-1]
    L, S = query.shape[-2], key.shape[-2]
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    q, k, v = query.to(cd), key.to(cd), value.to(cd)
    H, Hkv = q.shape[-3], k.shape[-3]
    if enable_gqa and H != Hkv:
        k = torch.cat([k] * (H // Hkv), dim=-3)
        v = torch.cat([v] * (H // Hkv), dim=-3)
    s = torch.matmul(q, k.transpose(-2, -1)) * sc
    keep = torch.ones(L, S, dtype=torch.bool)
    if is_causal:
        keep = torch.tril(keep)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = keep & attn_mask
        else:
            s = s + attn_mask.to(cd)
    s = s.masked_fill(~keep, -1e9)
    m = s.detach().amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    den = p.sum(dim=-1, keepdim=True)
    p = p / torch.where(den > 0, den, torch.ones_like(den))
    out = torch.matmul(p, v)
    return out.to(dt)
