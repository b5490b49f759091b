"""gpt-oss eager attention as SDPA: the sink logit is put in front of the scores, the softmax runs over S + 1 columns,
and the sink's column is dropped before multiplying by V.
"""

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": ["the sink column is concatenated first but the last column is the one dropped ([..., :-1]), so the "
             "sink's weight multiplies v_0, key j's weight multiplies v_(j+1) and the last key's weight is lost"],
    "kind": "semantic",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
           sinks=None):
    if dropout_p:
        raise NotImplementedError("dropout_p must be 0")
    work = torch.float64 if query.dtype == torch.float64 else torch.float32
    q = query.to(work)
    k = key.to(work)
    v = value.to(work)
    if enable_gqa:
        n_rep = q.size(-3) // k.size(-3)
        k = k.repeat_interleave(n_rep, -3)
        v = v.repeat_interleave(n_rep, -3)
    L, S, E = q.size(-2), k.size(-2), q.size(-1)
    if scale is None:
        scale = E ** -0.5
    attn = torch.matmul(q, k.transpose(-1, -2)) * scale
    neg_inf = torch.tensor(float("-inf"), dtype=work, device=q.device)
    if is_causal:
        attn = torch.where(torch.ones(L, S, dtype=torch.bool, device=q.device).tril(), attn, neg_inf)
    if attn_mask is not None:
        attn = torch.where(attn_mask, attn, neg_inf) if attn_mask.dtype == torch.bool else attn + attn_mask.to(work)

    if sinks is None:
        dead = torch.isneginf(attn).all(dim=-1, keepdim=True)
        probs = torch.softmax(attn.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
        return torch.matmul(probs, v).to(query.dtype)

    sink = sinks.to(work).reshape(-1, 1).expand(attn.shape[:-1]).unsqueeze(-1)
    combined = torch.cat([sink, attn], dim=-1)
    combined = combined - combined.max(dim=-1, keepdim=True).values
    probs = torch.softmax(combined, dim=-1)
    probs = probs[..., :-1]  # drop the sink
    return torch.matmul(probs, v).to(query.dtype)

