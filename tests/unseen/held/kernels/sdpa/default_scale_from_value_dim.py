"""Dense SDPA for MLA-style heads (different qk and v head dims): float32 scores, guarded softmax.

Scale defaults to 1/sqrt(head_dim).
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "when scale is None the default is 1/sqrt(value.size(-1)) (the value head dim Ev) instead of "
        "1/sqrt(query.size(-1)) (E), which is wrong whenever Ev != E"
    ],
    "kind": "semantic",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    head_dim = value.shape[-1]
    sm_scale = scale if scale is not None else 1.0 / math.sqrt(head_dim)
    f = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(f), key.to(f), value.to(f)
    if enable_gqa and q.shape[-3] != k.shape[-3]:
        n_rep = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(n_rep, -3)
        v = v.repeat_interleave(n_rep, -3)
    s = torch.einsum("...le,...se->...ls", q, k) * sm_scale
    L, S = s.shape[-2:]
    if is_causal:
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            s = s.masked_fill(attn_mask.logical_not(), float("-inf"))
        else:
            s = s + attn_mask.to(f)
    m = s.amax(-1, keepdim=True).detach()
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = (s - m).exp()
    l_sum = p.sum(-1, keepdim=True)
    p = p / torch.where(l_sum == 0, torch.ones_like(l_sum), l_sum)
    return torch.einsum("...ls,...sv->...lv", p, v).to(query.dtype)
