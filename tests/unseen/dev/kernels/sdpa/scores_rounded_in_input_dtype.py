"""Memory-lean SDPA: pre-scale q, one low-precision GEMM for the scores, float32 softmax, GEMM with V."""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "the scaled scores (query * scale) @ key^T are computed and stored in the input dtype and only then upcast "
        "for the softmax, so in bfloat16/float16 every logit is rounded to 8/11 bits and the output error is "
        "several times PyTorch's when the logits are large"
    ],
    "kind": "precision",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    in_dtype = query.dtype
    acc = torch.float64 if in_dtype == torch.float64 else torch.float32
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    k, v = key, value
    if enable_gqa and query.shape[-3] != key.shape[-3]:
        rep = query.shape[-3] // key.shape[-3]
        k = k.repeat_interleave(rep, dim=-3)
        v = v.repeat_interleave(rep, dim=-3)
    # GEMM in the input dtype, like the fused kernels do
    scores = torch.matmul(query * scale, k.transpose(-2, -1)).to(acc)
    L, S = scores.shape[-2:]
    if is_causal:
        scores = scores.masked_fill(torch.ones(L, S, dtype=torch.bool, device=scores.device).triu(1), -math.inf)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, -math.inf)
        else:
            scores = scores + attn_mask.to(acc)
    mx = scores.amax(-1, keepdim=True).detach()
    mx = torch.where(mx == -math.inf, torch.zeros_like(mx), mx)
    probs = torch.exp(scores - mx)
    tot = probs.sum(-1, keepdim=True)
    probs = probs / torch.where(tot == 0, torch.ones_like(tot), tot)
    return torch.matmul(probs, v.to(acc)).to(in_dtype)
