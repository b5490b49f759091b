"""Dense SDPA with gpt-oss sinks: raw q·kᵀ logits and the sink column are concatenated, then scaled and softmaxed.

TRUTH below lists the bug.
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": ["the sink column is concatenated before the softmax scale is applied, so the sink logit is multiplied by "
             "scale (1/sqrt(E) by default) like the q·k scores"],
    "kind": "semantic",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
           sinks=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    cdt = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(cdt), key.to(cdt), value.to(cdt)
    H = q.shape[-3]
    if enable_gqa and k.shape[-3] != H:
        rep = H // k.shape[-3]
        k = k.repeat_interleave(rep, dim=-3)
        v = v.repeat_interleave(rep, dim=-3)
    L, S = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale

    logits = q @ k.transpose(-2, -1)
    if sinks is not None:
        sink_col = sinks.to(cdt).view(H, 1, 1).expand(*logits.shape[:-1], 1)
    else:
        sink_col = torch.full((*logits.shape[:-1], 1), float("-inf"), dtype=cdt, device=q.device)
    logits = torch.cat([logits, sink_col], dim=-1) * scale

    bias = torch.zeros(L, S + 1, dtype=cdt, device=q.device)
    if is_causal:
        bias[:, :S] = bias[:, :S].masked_fill(~torch.ones(L, S, dtype=torch.bool, device=q.device).tril(),
                                              float("-inf"))
    logits = logits + bias
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            pad = torch.ones(*attn_mask.shape[:-1], 1, dtype=torch.bool, device=attn_mask.device)
            logits = logits.masked_fill(~torch.cat([attn_mask, pad], dim=-1), float("-inf"))
        else:
            pad = torch.zeros(*attn_mask.shape[:-1], 1, dtype=cdt, device=attn_mask.device)
            logits = logits + torch.cat([attn_mask.to(cdt), pad], dim=-1)

    logits = logits - logits.amax(dim=-1, keepdim=True).detach().nan_to_num(0.0, 0.0, 0.0)
    w = logits.exp()
    z = w.sum(dim=-1, keepdim=True)
    w = w / torch.where(z == 0, torch.ones_like(z), z)
    return (w[..., :S] @ v).to(query.dtype)
