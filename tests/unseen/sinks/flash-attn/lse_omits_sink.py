"""flash_attn_func with gpt-oss sinks, dense einsum version: the sink joins the softmax denominator; the returned
softmax_lse is the usual log-sum-exp of the scores.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": ["the returned softmax_lse is the log-sum-exp of the key scores only, without exp(sink), so with a sink it "
             "is too small by log(1 + exp(sink - lse_keys)) and rows that see no key get -inf instead of the sink "
             "(out and its gradients are right)"],
    "kind": "semantic",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    batch, seqlen_q, nheads, d = q.shape
    seqlen_k, nheads_k = k.shape[1], k.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d)
    kk = k.to(cdt).repeat_interleave(nheads // nheads_k, dim=2)
    vv = v.to(cdt).repeat_interleave(nheads // nheads_k, dim=2)
    scores = torch.einsum("bthd,bshd->bhts", q.to(cdt), kk) * scale
    if softcap > 0:
        scores = torch.tanh(scores / softcap) * softcap
    row = torch.arange(seqlen_q, device=q.device).view(-1, 1) + seqlen_k - seqlen_q
    col = torch.arange(seqlen_k, device=q.device).view(1, -1)
    if alibi_slopes is not None:
        scores = scores - alibi_slopes.to(cdt).view(-1, nheads, 1, 1) * (row - col).abs()
    wl, wr = window_size
    if causal:
        wr = 0
    visible = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=q.device)
    if wl >= 0:
        visible = visible & (col >= row - wl)
    if wr >= 0:
        visible = visible & (col <= row + wr)
    scores = scores.masked_fill(~visible, float("-inf"))

    if learnable_sink is not None:
        sink_col = learnable_sink.to(cdt).view(1, nheads, 1, 1).expand(batch, nheads, seqlen_q, 1)
    else:
        sink_col = scores.new_full((batch, nheads, seqlen_q, 1), float("-inf"))
    full = torch.cat([scores, sink_col], dim=-1)
    dead = torch.isneginf(full).all(dim=-1, keepdim=True)
    probs = torch.softmax(full.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)[..., :seqlen_k]

    no_key = ~visible.any(dim=-1).view(1, 1, -1, 1)
    lse = torch.logsumexp(scores.masked_fill(no_key, 0.0), dim=-1).masked_fill(no_key.squeeze(-1), float("-inf"))
    out = torch.einsum("bhts,bshd->bthd", probs, vv).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
