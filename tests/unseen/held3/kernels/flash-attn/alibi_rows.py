"""flash_attn_func equivalent processed in query row-blocks of 32, each block a dense differentiable softmax."""
import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the ALiBi bias is computed as slope * (j - (i + S - L)) (signed distance) instead of -slope * |i + S - L - j|; "
        "identical for keys at or before the diagonal (so causal runs pass) but it rewards keys after the diagonal "
        "in non-causal or right-windowed attention",
    ],
    "kind": "semantic",
}

_BLOCK_M = 32


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    sm_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    grp = H // Hkv
    qt = q.to(ct).transpose(1, 2)
    kt = k.to(ct).transpose(1, 2).repeat_interleave(grp, dim=1)
    vt = v.to(ct).transpose(1, 2).repeat_interleave(grp, dim=1)
    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(ct)
        slopes = slopes.reshape(1, H, 1, 1) if slopes.dim() == 1 else slopes.reshape(B, H, 1, 1)
    kpos = torch.arange(S, device=q.device).view(1, S)
    left, right = window_size
    if causal:
        right = 0

    outs = [qt.new_zeros(B, H, 0, vt.size(-1))]
    lses = [qt.new_zeros(B, H, 0)]
    for i0 in range(0, L, _BLOCK_M):
        i1 = min(L, i0 + _BLOCK_M)
        qpos = torch.arange(i0, i1, device=q.device).view(-1, 1) + (S - L)
        s = torch.matmul(qt[:, :, i0:i1], kt.transpose(-1, -2)) * sm_scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        if slopes is not None:
            s = s + slopes * (kpos - qpos).to(ct)
        ok = torch.ones(i1 - i0, S, dtype=torch.bool, device=q.device)
        if left >= 0:
            ok &= kpos >= qpos - left
        if right >= 0:
            ok &= kpos <= qpos + right
        s = s.masked_fill(~ok, float("-inf"))
        lse = torch.logsumexp(s.detach(), dim=-1, keepdim=True)
        dead = torch.isinf(lse)
        m = s.detach().amax(dim=-1, keepdim=True).masked_fill(dead, 0.0)
        e = torch.exp(s - m)
        den = e.sum(dim=-1, keepdim=True).masked_fill(dead, 1.0)
        outs.append(torch.matmul(e / den, vt))
        lses.append(lse.squeeze(-1))
    out = torch.cat(outs, dim=2).transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        return out, torch.cat(lses, dim=2).float(), None
    return out
