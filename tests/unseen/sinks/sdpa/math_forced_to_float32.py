"""gpt-oss eager attention as an SDPA drop-in: upcast to float32 for the softmax (as HF does for bf16 models), concat
the sink column, softmax, drop the sink, cast back.
"""

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": ["query, key, value and sinks are always upcast with .float(), so float64 inputs are computed in float32 "
             "and their output and gradients carry float32 rounding (~1e-7) instead of float64 accuracy"],
    "kind": "precision",
}


def _repeat_kv(x, n_rep):
    if n_rep == 1:
        return x
    *lead, kvh, s, d = x.shape
    return x.unsqueeze(-3).expand(*lead, kvh, n_rep, s, d).reshape(*lead, kvh * n_rep, s, d)


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
           sinks=None):
    if dropout_p > 0.0:
        raise NotImplementedError("attention dropout is not supported")
    n_rep = query.shape[-3] // key.shape[-3] if enable_gqa else 1
    key_states = _repeat_kv(key.float(), n_rep)
    value_states = _repeat_kv(value.float(), n_rep)
    scaling = scale if scale is not None else query.shape[-1] ** -0.5
    L, S = query.shape[-2], key.shape[-2]

    attn_weights = torch.matmul(query.float(), key_states.transpose(-2, -1)) * scaling
    if is_causal:
        attn_weights = attn_weights.masked_fill(
            torch.ones(L, S, dtype=torch.bool, device=query.device).triu(diagonal=1), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            attn_weights = attn_weights.masked_fill(~attn_mask, float("-inf"))
        else:
            attn_weights = attn_weights + attn_mask.float()

    if sinks is not None:
        sink_logits = sinks.float().reshape(-1, 1, 1).expand(*attn_weights.shape[:-1], 1)
    else:
        sink_logits = attn_weights.new_full((*attn_weights.shape[:-1], 1), float("-inf"))
    combined_logits = torch.cat([attn_weights, sink_logits], dim=-1)
    row_max = combined_logits.max(dim=-1, keepdim=True).values.detach()
    combined_logits = combined_logits - row_max.nan_to_num(0.0, 0.0, 0.0)
    dead = torch.isneginf(combined_logits).all(dim=-1, keepdim=True)  # rows with neither keys nor a sink
    probs = torch.softmax(combined_logits.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    scores = probs[..., :-1]
    attn_output = torch.matmul(scores, value_states)
    return attn_output.to(query.dtype)
