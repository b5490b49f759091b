"""Dense flash_attn_func equivalent with differentiable torch ops (einsum scores, explicit visibility mask)."""
import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the sliding-window bounds are computed from the raw query index i (i - left <= j <= i + right) instead of the "
        "bottom-right aligned position i + S - L, so windows are shifted whenever seqlen_q != seqlen_k (causal itself is "
        "aligned correctly)",
    ],
    "kind": "semantic",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    rep = H // Hkv
    kk = k.to(f).repeat_interleave(rep, dim=2)
    vv = v.to(f).repeat_interleave(rep, dim=2)

    s = torch.einsum("bihd,bjhd->bhij", q.to(f), kk) * scale
    if softcap > 0:
        s = torch.tanh(s / softcap) * softcap

    i = torch.arange(L, device=q.device)[:, None]
    j = torch.arange(S, device=q.device)[None, :]
    diag = i + (S - L)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(f)
        sl = sl[None, :, None, None] if sl.dim() == 1 else sl[:, :, None, None]
        s = s - sl * (diag - j).abs().to(f)
    visible = torch.ones(L, S, dtype=torch.bool, device=q.device)
    if causal:
        visible &= j <= diag
    left, right = window_size
    if left >= 0:
        visible &= j >= i - left
    if right >= 0:
        visible &= j <= i + right
    s = s.masked_fill(~visible, float("-inf"))

    mx = s.amax(dim=-1, keepdim=True).detach()
    mx = torch.where(torch.isinf(mx), torch.zeros_like(mx), mx)
    e = torch.exp(s - mx)
    tot = e.sum(dim=-1, keepdim=True)
    out = torch.einsum("bhij,bjhd->bihd", e / torch.where(tot > 0, tot, torch.ones_like(tot)), vv).to(q.dtype)
    if not return_attn_probs:
        return out
    lse = (mx + torch.log(tot)).squeeze(-1).detach().float()
    return out, lse, None
