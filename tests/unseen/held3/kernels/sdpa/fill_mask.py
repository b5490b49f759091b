"""SDPA with masks folded into the score matrix via masked_fill, using plain differentiable ops."""
import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "the default softmax scale is computed from the value head dim (value.size(-1) ** -0.5) instead of the query/key "
        "head dim; wrong whenever value's last dim differs from query's",
        "boolean-mask (and causal) positions are filled with a finite -1e9 instead of -inf, so a query row whose mask is all "
        "False gets a uniform average of V instead of the zero row PyTorch returns",
    ],
    "kind": "two",
}

_NEG = -1e9


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    out_dtype = query.dtype
    acc = torch.float64 if out_dtype == torch.float64 else torch.float32
    q, k, v = query.to(acc), key.to(acc), value.to(acc)
    if enable_gqa and k.size(-3) != q.size(-3):
        n = q.size(-3) // k.size(-3)
        k = k.repeat_interleave(n, dim=-3)
        v = v.repeat_interleave(n, dim=-3)
    L, S = q.size(-2), k.size(-2)
    if scale is None:
        scale = v.size(-1) ** -0.5

    s = q @ k.transpose(-2, -1) * scale
    if is_causal:
        upper = torch.ones(L, S, dtype=torch.bool, device=q.device).triu(diagonal=1)
        s = s.masked_fill(upper, _NEG)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            s = s.masked_fill(attn_mask.logical_not(), _NEG)
        else:
            s = s + attn_mask.to(acc)
    top = s.detach().amax(dim=-1, keepdim=True)
    top = torch.nan_to_num(top, neginf=0.0, posinf=0.0)
    w = (s - top).exp()
    tot = w.sum(dim=-1, keepdim=True)
    w = w / torch.where(tot == 0, torch.ones_like(tot), tot)
    return (w @ v).to(out_dtype)
