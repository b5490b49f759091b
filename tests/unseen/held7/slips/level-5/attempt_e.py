"""Level 5 of your attention lab: FlashAttention's backward, by hand -- dq, dk, dv with no autograd.

Your level 4 forward returned, with out, each query's log-sum-exp lse_i = log Σ_j exp(s_ij)
(s = q·k / √d, the keys query i sees). With it a tile of weights comes back without a second
softmax: P_ij = exp(s_ij - lse_i). Given the forward's out O and the gradient dO of the loss with
respect to it, the gradients are

    D_i = Σ_e dO_ie O_ie          (one number per query)
    dV = Pᵀ dO          dP = dO Vᵀ          dS = P ∘ (dP - D)
    dQ = dS K / √d      dK = dSᵀ Q / √d

taken tile by tile, as FlashAttention-2 does: for each tile of keys, its dK and dV are gathered
over the tiles of queries, while each query tile's dQ is added to; no (L, S) matrix is ever held.
Four pieces are marked TODO; as it stands it runs, and gives the wrong answer. The check runs your
function under torch.inference_mode(), where autograd records nothing: .backward() and
autograd.grad cannot help. After each one, run

    attnlab lab check lab_backward.py

It grades dq, dk, dv against the float64 oracle's gradients (PyTorch's own backward sets the limit)
on 25 cases: causal and not, L != S both ways, several tiles with partial last ones, float64 and
float32, scores in the hundreds, with out and lse as a correct level 4 forward returns them; and it
says the likely cause of
what fails.
"""

TRUTH = {'api': 'level-5',
 'bugs': ['the lse slice is not given a trailing dim: exp(s - lse[..., qs:qe]) broadcasts the (..., Bq) lse '
          'along the keys (dim -1) instead of the queries; with the (2, 2) lead dims it aligns (..., Bq) '
          'against (..., Bq, Bk) wrongly and raises a size-mismatch RuntimeError (every case)',
          'dK misses the 1/sqrt(d) factor: dk += dSᵀ Q instead of dSᵀ Q / sqrt(d) (dk is sqrt(8) times too '
          'large in every case; dq, dv right)'],
 'kind': 'two'}


import math

import torch


def flash_backward(q, k, v, out, lse, dout, is_causal=False, block_q=64, block_k=64):
    """Attention's gradients from the forward's out and lse: q (..., L, E), k (..., S, E), v (..., S, Ev),
    out and dout (..., L, Ev), lse (..., L) as your level 4 flash_forward returns it.

    is_causal: query i sees keys 0 .. i (top-left aligned, as in the forward). Returns (dq, dk, dv), each the shape
    and dtype of q, k, v.
    """
    dtype = q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q, k, v, out, lse, dout = (t.to(work) for t in (q, k, v, out, lse, dout))
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(E)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    Delta = (dout * out).sum(-1)  # (..., L)
    for qs in range(0, L, block_q):
        qe = min(qs + block_q, L)
        qi, doi = q[..., qs:qe, :], dout[..., qs:qe, :]
        lse_t, D_t = lse[..., qs:qe, None], Delta[..., qs:qe, None]
        dqi = torch.zeros_like(qi)
        for ks in range(0, S, block_k):
            ke = min(ks + block_k, S)
            if is_causal and ks > qe - 1:
                break  # keys after every query of this tile get no weight and no gradient
            kj, vj = k[..., ks:ke, :], v[..., ks:ke, :]
            s = qi @ kj.transpose(-2, -1) * scale
            if is_causal:
                later = torch.arange(ks, ke, device=q.device)[None, :] > torch.arange(qs, qe, device=q.device)[:, None]
                s = s.masked_fill(later, float("-inf"))
            p = torch.exp(s - lse[..., qs:qe])
            dv[..., ks:ke, :] += p.transpose(-2, -1) @ doi
            dp = doi @ vj.transpose(-2, -1)
            dsc = p * (dp - D_t)
            dqi += dsc @ kj * scale
            dk[..., ks:ke, :] += dsc.transpose(-2, -1) @ qi
        dq[..., qs:qe, :] = dqi
    return dq.to(dtype), dk.to(dtype), dv.to(dtype)
