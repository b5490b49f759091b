"""Online-softmax flash_attn_func over key blocks of 64: float32 running max, running sum and output accumulator.

Each block: new max, rescale the accumulator, add exp(s - m) @ V and the block's row sum.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "when the running max grows at a new key block the output accumulator is rescaled by exp(m_old - m_new) but "
        "the running sum is not, so rows whose max increases after the first block (S > 64) get wrong output and lse"
    ],
    "kind": "semantic",
}

BLOCK = 64


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    ft = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale or 1.0 / math.sqrt(D)
    rep = H // Hkv
    qh = q.to(ft).transpose(1, 2)
    kh = k.to(ft).transpose(1, 2).repeat_interleave(rep, 1)
    vh = v.to(ft).transpose(1, 2).repeat_interleave(rep, 1)
    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(ft)
        slopes = (slopes.unsqueeze(0).expand(B, H) if slopes.dim() == 1 else slopes).reshape(B, H, 1, 1)
    wl, wr = window_size
    if causal:
        wr = 0
    rows = torch.arange(L, device=q.device).unsqueeze(1) + S - L

    run_max = torch.full((B, H, L, 1), float("-inf"), dtype=ft, device=q.device)
    run_sum = torch.zeros((B, H, L, 1), dtype=ft, device=q.device)
    acc = torch.zeros((B, H, L, vh.size(-1)), dtype=ft, device=q.device)
    for n0 in range(0, S, BLOCK):
        n1 = min(S, n0 + BLOCK)
        cols = torch.arange(n0, n1, device=q.device).unsqueeze(0)
        s = torch.matmul(qh, kh[:, :, n0:n1].transpose(-1, -2)) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        if slopes is not None:
            s = s - slopes * (rows - cols).abs()
        vis = torch.ones(L, n1 - n0, dtype=torch.bool, device=q.device)
        if wl >= 0:
            vis = vis & (cols >= rows - wl)
        if wr >= 0:
            vis = vis & (cols <= rows + wr)
        s = s.masked_fill(~vis, float("-inf"))
        new_max = torch.maximum(run_max, s.amax(-1, keepdim=True)).detach()
        ref = torch.where(torch.isfinite(new_max), new_max, torch.zeros_like(new_max))
        p = torch.exp(s - ref)
        acc = acc * torch.exp(run_max - ref) + torch.matmul(p, vh[:, :, n0:n1])
        run_sum = run_sum + p.sum(-1, keepdim=True)
        run_max = new_max
    out = acc / torch.where(run_sum > 0, run_sum, torch.ones_like(run_sum))
    out = out.transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        m = torch.where(torch.isfinite(run_max), run_max, torch.zeros_like(run_max))
        return out, (m + torch.log(run_sum)).squeeze(-1), None
    return out
