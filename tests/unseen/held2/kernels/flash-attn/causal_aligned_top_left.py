"""Flash-attention forward written for one (query head, kv head) pair and vectorised over batch and heads with
torch.vmap; masks from index grids, float32 softmax statistics."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the causal mask keeps keys j <= i (top-left aligned, as in sdpa); flash_attn_func aligns causal "
        "bottom-right, keeping j <= i + Sk - Lq, so results differ whenever Lq != Sk"
    ],
    "kind": "semantic",
}


def _head(qh, kh, vh, slope, scale, causal, left, right, softcap, use_alibi):
    Lq, Sk = qh.shape[0], kh.shape[0]
    s = (qh @ kh.transpose(0, 1)) * scale
    if softcap > 0.0:
        s = torch.tanh(s / softcap) * softcap
    qpos = torch.arange(Lq, device=qh.device).unsqueeze(1)
    kpos = torch.arange(Sk, device=qh.device).unsqueeze(0)
    shifted = qpos + (Sk - Lq)
    if use_alibi:
        s = s - slope * (shifted - kpos).abs().to(s.dtype)
    keep = torch.ones(Lq, Sk, dtype=torch.bool, device=qh.device)
    if causal:
        keep = keep & (kpos <= qpos)
    if left >= 0:
        keep = keep & (kpos >= shifted - left)
    if right >= 0:
        keep = keep & (kpos <= shifted + right)
    s = torch.where(keep, s, torch.full_like(s, float("-inf")))
    mx = s.amax(dim=-1, keepdim=True).detach()
    mx = torch.where(torch.isinf(mx), torch.zeros_like(mx), mx)
    e = torch.exp(s - mx)
    z = e.sum(dim=-1, keepdim=True)
    o = (e @ vh) / torch.where(z > 0, z, torch.ones_like(z))
    lse = torch.where(z > 0, mx + torch.log(torch.where(z > 0, z, torch.ones_like(z))),
                      torch.full_like(z, float("-inf")))
    return o, lse.squeeze(-1)


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("no dropout")
    dt = q.dtype
    ft = torch.float64 if dt == torch.float64 else torch.float32
    B, Lq, H, D = q.shape
    Hk = k.shape[2]
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    left, right = window_size
    if causal:
        right = -1

    qb = q.to(ft).permute(0, 2, 1, 3)
    kb = k.to(ft).permute(0, 2, 1, 3).repeat_interleave(H // Hk, dim=1)
    vb = v.to(ft).permute(0, 2, 1, 3).repeat_interleave(H // Hk, dim=1)
    if alibi_slopes is None:
        slopes = torch.zeros(B, H, dtype=ft, device=q.device)
    else:
        slopes = alibi_slopes.to(ft).expand(B, H) if alibi_slopes.dim() == 1 else alibi_slopes.to(ft)

    def f(qh, kh, vh, slope):
        return _head(qh, kh, vh, slope, scale, causal, left, right, softcap, alibi_slopes is not None)

    out, lse = torch.vmap(torch.vmap(f))(qb, kb, vb, slopes)
    out = out.permute(0, 2, 1, 3).to(dt)
    if return_attn_probs:
        return out, lse.detach(), None
    return out
