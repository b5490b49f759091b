"""Dense SDPA in float32/float64 with index-built masks, written with einsum and a guarded exp/sum softmax."""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "the causal mask keeps keys j < i (strictly below the diagonal) instead of j <= i, so each query loses its "
        "own key and query 0 sees no key at all",
        "the default scale is 1/sqrt(Ev) taken from value's last dim; sdpa's default is 1/sqrt(E) from query's "
        "last dim (differs when Ev != E)",
    ],
    "kind": "two",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    out_dtype = query.dtype
    cdt = torch.float64 if out_dtype == torch.float64 else torch.float32
    q, k, v = query.to(cdt), key.to(cdt), value.to(cdt)
    L, S = q.shape[-2], k.shape[-2]
    head_dim = v.shape[-1]
    sm_scale = scale if scale is not None else 1.0 / math.sqrt(head_dim)
    if enable_gqa and q.dim() >= 3 and q.shape[-3] != k.shape[-3]:
        n = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(n, dim=-3)
        v = v.repeat_interleave(n, dim=-3)

    s = torch.einsum("...ie,...je->...ij", q, k) * sm_scale
    valid = torch.ones(L, S, dtype=torch.bool, device=q.device)
    if is_causal:
        i = torch.arange(L, device=q.device)[:, None]
        j = torch.arange(S, device=q.device)[None, :]
        valid = j < i
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            valid = valid & attn_mask
        else:
            s = s + attn_mask.to(cdt)
    s = s.masked_fill(~valid, float("-inf"))
    mx = s.amax(-1, keepdim=True).detach()
    mx = torch.where(mx > float("-inf"), mx, torch.zeros_like(mx))
    w = torch.exp(s - mx)
    tot = w.sum(-1, keepdim=True)
    o = torch.einsum("...ij,...jd->...id", w, v) / torch.where(tot > 0, tot, torch.ones_like(tot))
    return o.to(out_dtype)
