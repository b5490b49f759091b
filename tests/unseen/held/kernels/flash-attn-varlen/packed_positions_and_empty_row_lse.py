"""Vectorised varlen attention on the packed index space: one (H, total_q, total_k) score tensor, online mask building.

Sequence membership comes from repeat_interleave over the lengths; the diagonal shift S_b - L_b is added per row.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "causal, window and ALiBi compare packed indices (packed query row + S_b - L_b against the packed key row) "
        "instead of positions inside the sequence, so they are shifted by cu_seqlens_k[b] - cu_seqlens_q[b] "
        "whenever the query and key packings differ",
        "a query row that sees no key gets lse = log(1e-30) (about -69) from the clamped row sum instead of -inf",
    ],
    "kind": "two",
}


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    Tq, H, D = q.shape
    Tk, Hkv, _ = k.shape
    dev = q.device
    ft = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    len_q = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]).long()
    len_k = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).long()
    nb = len_q.numel()
    bq = torch.repeat_interleave(torch.arange(nb, device=dev), len_q, output_size=Tq)
    bk = torch.repeat_interleave(torch.arange(nb, device=dev), len_k, output_size=Tk)
    i = (torch.arange(Tq, device=dev) + (len_k - len_q)[bq])[:, None]
    j = torch.arange(Tk, device=dev)[None, :]

    g = H // Hkv
    s = torch.einsum("qhd,khd->hqk", q.to(ft), k.to(ft).repeat_interleave(g, 1)) * scale
    if softcap > 0.0:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(ft)
        sl = sl[bq].t() if sl.dim() == 2 else sl[:, None].expand(H, Tq)
        s = s - sl[:, :, None] * (i - j).abs()
    keep = bq[:, None] == bk[None, :]
    left, right = window_size
    if causal:
        right = 0
    if left >= 0:
        keep = keep & (j >= i - left)
    if right >= 0:
        keep = keep & (j <= i + right)
    s = s.masked_fill(~keep, -math.inf)
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    z = e.sum(-1, keepdim=True).clamp_min(1e-30)
    out = torch.einsum("hqk,khd->qhd", e / z, v.to(ft).repeat_interleave(g, 1)).to(q.dtype)
    if return_attn_probs:
        return out, (m + torch.log(z)).squeeze(-1), None
    return out
