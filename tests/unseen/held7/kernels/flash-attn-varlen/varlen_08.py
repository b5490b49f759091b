import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "The softmax_lse buffer is allocated like q (q.new_empty, bfloat16 for bfloat16 inputs) and only converted to float32 on return, so lse is rounded to bfloat16 (abs error up to ~1.6e-2 at |lse| ~ 4-8). Should be a float32 buffer. out and grads are fine; lse wrong for bfloat16 only."
    ],
    "kind": "precision"
}



def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    """Whole packed batch at once: one (total_q, total_k) score matrix with a block-diagonal mask."""
    tq, H, D = q.shape
    tk, Hkv = k.shape[0], k.shape[1]
    scale = softmax_scale if softmax_scale is not None else D ** -0.5
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    cu_q = cu_seqlens_q.long()
    cu_k = cu_seqlens_k.long()
    len_q = cu_q[1:] - cu_q[:-1]
    len_k = cu_k[1:] - cu_k[:-1]

    rows = torch.arange(tq)
    cols = torch.arange(tk)
    seq_q = torch.searchsorted(cu_q[1:], rows, right=True)   # sequence of each packed query
    seq_k = torch.searchsorted(cu_k[1:], cols, right=True)
    qpos = rows - cu_q[seq_q] + (len_k - len_q)[seq_q]        # query position on its own key axis
    kpos = cols - cu_k[seq_k]

    g = H // Hkv
    kx = k.to(f).repeat_interleave(g, dim=1)
    vx = v.to(f).repeat_interleave(g, dim=1)
    s = torch.einsum('qhd,khd->hqk', q.to(f), kx) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    dist = qpos[:, None] - kpos[None, :]
    if alibi_slopes is not None:
        sl = alibi_slopes.to(f)
        sl = sl.expand(len(len_q), H) if sl.dim() == 1 else sl
        s = s - sl[seq_q].t()[:, :, None] * dist.abs().to(f)[None]
    allow = seq_q[:, None] == seq_k[None, :]
    left, right = window_size
    if causal:
        right = 0
    if left >= 0:
        allow &= dist <= left
    if right >= 0:
        allow &= -dist <= right
    s = s.masked_fill(~allow, float('-inf'))
    m = s.detach().max(-1, keepdim=True).values
    m = m.masked_fill(torch.isinf(m), 0.0)
    e = torch.exp(s - m)
    z = e.sum(-1, keepdim=True)
    live = z > 0
    zz = torch.where(live, z, torch.ones_like(z))
    out = torch.einsum('hqk,khd->qhd', e / zz, vx).to(q.dtype)
    if not return_attn_probs:
        return out
    lse = q.new_empty(H, tq)
    lse.copy_(torch.where(live, m + zz.log(), torch.full_like(z, float('-inf'))).squeeze(-1).detach())
    return out, lse.to(f), None
