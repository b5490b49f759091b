"""flash_attn_func with a learnable sink, dense and in base 2 like the Triton kernels: scores and sink times log2(e),
exp2 softmax with the sink as an extra term, sliding window and causal masks aligned bottom-right.
"""

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the window's left edge is tested as j > i + S - L - left instead of >=, so a finite left window hides the "
        "key exactly `left` positions back (one key too few per row)",
        "softmax_lse is returned in base 2 (m2 + log2(l)) without multiplying by ln(2), so the lse is 1.44 times the "
        "natural-log value",
    ],
    "kind": "two",
}

LOG2E = 1.4426950408889634


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    sm_scale = softmax_scale if softmax_scale is not None else D ** -0.5
    kv_head = torch.arange(H, device=q.device) // (H // Hkv)
    qh = q.to(cdt).transpose(1, 2)
    kh = k.to(cdt).transpose(1, 2)[:, kv_head]
    vh = v.to(cdt).transpose(1, 2)[:, kv_head]
    s = qh @ kh.transpose(-1, -2) * sm_scale
    if softcap > 0.0:
        s = softcap * torch.tanh(s / softcap)
    qi = torch.arange(L, device=q.device)[:, None] + (S - L)
    kj = torch.arange(S, device=q.device)[None, :]
    if alibi_slopes is not None:
        s = s - alibi_slopes.to(cdt).reshape(-1, H, 1, 1) * (qi - kj).abs()
    left, right = window_size
    if causal:
        right = 0
    allowed = torch.ones(L, S, dtype=torch.bool, device=q.device)
    if left >= 0:
        allowed &= kj > qi - left
    if right >= 0:
        allowed &= kj <= qi + right
    s2 = torch.where(allowed, s * LOG2E, torch.full_like(s, float("-inf")))

    m2 = s2.amax(-1)
    if learnable_sink is not None:
        sink2 = learnable_sink.to(cdt).view(1, H, 1) * LOG2E
        m2 = torch.maximum(m2, sink2)
    m2 = torch.where(torch.isneginf(m2), torch.zeros_like(m2), m2).detach()
    p = torch.exp2(s2 - m2[..., None])
    l2 = p.sum(-1)
    if learnable_sink is not None:
        l2 = l2 + torch.exp2(sink2 - m2)
    out = (p @ vh) / torch.where(l2 > 0, l2, torch.ones_like(l2))[..., None]
    lse = m2 + torch.log2(l2)
    out = out.transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
