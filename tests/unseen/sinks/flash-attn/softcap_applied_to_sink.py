"""gpt-oss attention sinks in a dense flash_attn_func: build the (L, S + 1) logits with the sink as the last column,
then apply the soft-cap, ALiBi and the causal/window mask, softmax, and drop the sink column.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": ["the soft-cap tanh is applied after the sink column is appended, so with softcap > 0 the sink logit is "
             "squashed to softcap * tanh(sink / softcap) instead of entering raw"],
    "kind": "semantic",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    qh = q.to(cdt).transpose(1, 2)
    kh = k.to(cdt).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
    vh = v.to(cdt).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)

    logits = qh @ kh.transpose(-1, -2) * scale
    if learnable_sink is not None:
        sink = learnable_sink.to(cdt).view(1, H, 1, 1).expand(B, H, L, 1)
    else:
        sink = torch.full((B, H, L, 1), float("-inf"), dtype=cdt, device=q.device)
    logits = torch.cat([logits, sink], dim=-1)
    if softcap > 0.0:
        logits = softcap * torch.tanh(logits / softcap)

    i = torch.arange(L, device=q.device)[:, None] + S - L
    j = torch.arange(S, device=q.device)[None, :]
    if alibi_slopes is not None:
        bias = -alibi_slopes.to(cdt).view(-1, H, 1, 1) * (i - j).abs()
        logits = torch.cat([logits[..., :S] + bias, logits[..., S:]], dim=-1)
    left, right = window_size
    if causal:
        right = 0
    hidden = torch.zeros(L, S + 1, dtype=torch.bool, device=q.device)
    if left >= 0:
        hidden[:, :S] |= j < i - left
    if right >= 0:
        hidden[:, :S] |= j > i + right
    logits = logits.masked_fill(hidden, float("-inf"))

    mx = logits.amax(dim=-1, keepdim=True).detach()
    mx = torch.where(torch.isneginf(mx), torch.zeros_like(mx), mx)
    e = torch.exp(logits - mx)
    z = e.sum(dim=-1, keepdim=True)
    lse = (mx + torch.log(z)).squeeze(-1)
    p = e[..., :S] / torch.where(z == 0, torch.ones_like(z), z)
    out = (p @ vh).transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
