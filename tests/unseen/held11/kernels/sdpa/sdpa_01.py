TRUTH = {'api': 'sdpa', 'bugs': ['is_causal builds the causal mask with tril(diagonal=S - L), i.e. bottom-right aligned, while sdpa is top-left aligned; wrong outputs/grads whenever is_causal and L != S (causal_L<S, causal_L>S, bool mask + causal with L != S); for L > S the first L - S rows even come out as zeros'], 'kind': 'semantic'}
import math

import torch


def _flatten_batch(x):
    return x.reshape(-1, *x.shape[-3:])


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    *batch, H, L, E = query.shape
    Hkv, S = key.shape[-3], key.shape[-2]
    Ev = value.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(E)
    work = torch.float64 if query.dtype == torch.float64 else torch.float32

    q = _flatten_batch(query).to(work)
    k = _flatten_batch(key).to(work)
    v = _flatten_batch(value).to(work)
    if enable_gqa and Hkv != H:
        rep = H // Hkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)

    scores = torch.einsum('bhle,bhse->bhls', q, k) * scale

    allowed = torch.ones(L, S, dtype=torch.bool)
    if is_causal:
        allowed = allowed.tril(diagonal=S - L)
    if attn_mask is not None:
        m = attn_mask.expand(*batch, H, L, S).reshape(-1, H, L, S)
        if m.dtype == torch.bool:
            allowed = allowed & m
        else:
            scores = scores + m.to(work)
    scores = scores.masked_fill(~allowed, float('-inf'))

    row_max = scores.amax(dim=-1, keepdim=True).clamp_min(torch.finfo(work).min)
    w = torch.exp(scores - row_max)
    denom = w.sum(dim=-1, keepdim=True)
    probs = w / torch.where(denom == 0, torch.ones_like(denom), denom)
    out = torch.einsum('bhls,bhse->bhle', probs, v)
    return out.reshape(*batch, H, L, Ev).to(query.dtype)
