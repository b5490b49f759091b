"""SDPA with sinks where every mask is first widened to the (L, S + 1) logits that include the sink column, so that
one masking step covers causal, bool and float masks alike.
"""

import math

import torch
import torch.nn.functional as F

TRUTH = {
    "api": "sdpa",
    "bugs": ["a bool attn_mask is widened to the sink column with F.pad's default value (False), so whenever a bool "
             "mask is passed the sink is masked out and those calls behave as if there were no sinks"],
    "kind": "semantic",
}


def _widen(mask, cdt):
    if mask.dtype == torch.bool:
        return F.pad(mask, (0, 1))
    return F.pad(mask.to(cdt), (0, 1), value=0.0)


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
           sinks=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout_p > 0")
    cdt = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(cdt), key.to(cdt), value.to(cdt)
    H = q.shape[-3]
    if enable_gqa and k.shape[-3] != H:
        idx = torch.arange(H, device=q.device) // (H // k.shape[-3])
        k = k.index_select(-3, idx)
        v = v.index_select(-3, idx)
    L, S = q.shape[-2], k.shape[-2]
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])

    logits = torch.matmul(q, k.transpose(-2, -1)) * scale
    sink_val = sinks.to(cdt) if sinks is not None else torch.full((H,), float("-inf"), dtype=cdt, device=q.device)
    logits = torch.cat([logits, sink_val.view(H, 1, 1).expand(*logits.shape[:-1], 1)], dim=-1)

    if is_causal:
        causal = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
        logits = logits.masked_fill(~F.pad(causal, (0, 1), value=True), float("-inf"))
    if attn_mask is not None:
        wide = _widen(attn_mask, cdt)
        logits = logits.masked_fill(~wide, float("-inf")) if wide.dtype == torch.bool else logits + wide

    dead = torch.isneginf(logits).all(dim=-1, keepdim=True)
    probs = torch.softmax(logits.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    return torch.matmul(probs[..., :S], v).to(query.dtype)
