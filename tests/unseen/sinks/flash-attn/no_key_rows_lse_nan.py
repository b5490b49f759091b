"""flash_attn_func with sinks, online softmax over key blocks; the sink is folded in once after the loop, as one more
term of the denominator: l += exp(sink - m).
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": ["the sink is added after the key loop as exp(sink - m) with m the keys' running max (the sink never "
             "enters the max), so a row that sees no key (m = -inf; causal with L > S, windows) gets lse NaN and a NaN "
             "dsink instead of lse = sink, and exp overflows in float32 when the sink exceeds the row's scores by ~88"],
    "kind": "semantic",
}

BLOCK_N = 16


def _visible(L, S, j0, j1, left, right, device):
    i = torch.arange(L, device=device).view(-1, 1) + S - L
    j = torch.arange(j0, j1, device=device).view(1, -1)
    ok = torch.ones(L, j1 - j0, dtype=torch.bool, device=device)
    if left >= 0:
        ok &= j >= i - left
    if right >= 0:
        ok &= j <= i + right
    return ok, (i - j).abs()


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False, learnable_sink=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    qt = q.to(f).transpose(1, 2)
    kt = k.to(f).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
    vt = v.to(f).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)

    m = torch.full((B, H, L), float("-inf"), dtype=f, device=q.device)
    l_sum = torch.zeros(B, H, L, dtype=f, device=q.device)
    acc = torch.zeros(B, H, L, D, dtype=f, device=q.device)
    for j0 in range(0, S, BLOCK_N):
        j1 = min(S, j0 + BLOCK_N)
        s = qt @ kt[:, :, j0:j1].transpose(-2, -1) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        ok, dist = _visible(L, S, j0, j1, left, right, q.device)
        if alibi_slopes is not None:
            s = s - alibi_slopes.to(f).view(-1, H, 1, 1) * dist
        s = s.masked_fill(~ok, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1))
        base = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        scale_old = torch.exp(m - base)
        p = torch.exp(s - base.unsqueeze(-1))
        l_sum = l_sum * scale_old + p.sum(-1)
        acc = acc * scale_old.unsqueeze(-1) + p @ vt[:, :, j0:j1]
        m = m_new

    if learnable_sink is not None:
        # the sink is one more term of the denominator, in the same shifted units as l
        l_sum = l_sum + torch.exp(learnable_sink.to(f).view(1, H, 1) - m)
    out = acc / torch.where(l_sum == 0, torch.ones_like(l_sum), l_sum).unsqueeze(-1)
    lse = m + torch.log(l_sum)
    out = out.transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
