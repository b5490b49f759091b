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

TRUTH = {'api': 'level-5', 'level': 5, 'slips': ['dS is written P * dP - D (missing parentheses) instead of P * (dP - D): dq and dk wrong in every case', "the key tile's dk is assigned (=) for each query tile instead of summed over them, so only the last query tile's part survives: dk wrong whenever L > block_q"], 'kind': 'two'}

import math

import torch


def flash_backward(q, k, v, out, lse, dout, is_causal=False, block_q=64, block_k=64):
    """Attention's gradients from the forward's out and lse: q (..., L, E), k (..., S, E), v (..., S, Ev),
    out and dout (..., L, Ev), lse (..., L) as your level 4 flash_forward returns it.

    is_causal: query i sees keys 0 .. i (top-left aligned, as in the forward). Returns (dq, dk, dv), each the shape
    and dtype of q, k, v.
    """
    dtype = q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32  # half precision is computed in float32
    q, k, v, out, lse, dout = (t.to(work) for t in (q, k, v, out, lse, dout))
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(E)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    D = (dout * out).sum(-1, keepdim=True)  # TODO 1 (D): one number per query from dout and out, (..., L, 1)
    n_q = (L + block_q - 1) // block_q
    for j0 in range(0, S, block_k):  # one tile of keys at a time: its dk and dv are gathered here
        kb, vb = k[..., j0:j0 + block_k, :], v[..., j0:j0 + block_k, :]  # (..., Bk, E), (..., Bk, Ev)
        cols = torch.arange(j0, j0 + kb.shape[-2], device=q.device)  # (Bk,): the tile's keys' places
        dkb, dvb = torch.zeros_like(kb), torch.zeros_like(vb)
        for t in range(n_q):  # against each tile of queries
            i0 = t * block_q
            qb, dob = q[..., i0:i0 + block_q, :], dout[..., i0:i0 + block_q, :]  # (..., Bq, E), (..., Bq, Ev)
            Dq = D[..., i0:i0 + block_q, :]
            rows = torch.arange(i0, i0 + qb.shape[-2], device=q.device).unsqueeze(-1)  # (Bq, 1): the queries' places
            s = (qb @ kb.transpose(-2, -1)) * scale  # (..., Bq, Bk)
            if is_causal:
                s = s.masked_fill(cols > rows, -math.inf)
            P = torch.exp(s - lse[..., i0:i0 + block_q].unsqueeze(-1))  # TODO 2 (weights)
            dvb += P.transpose(-2, -1) @ dob  # TODO 3 (dv, dS)
            dP = dob @ vb.transpose(-2, -1)
            dS = P * dP - Dq
            dq[..., i0:i0 + block_q, :] += scale * dS @ kb  # TODO 4 (dq, dk)
            dkb = scale * dS.transpose(-2, -1) @ qb
        dk[..., j0:j0 + block_k, :], dv[..., j0:j0 + block_k, :] = dkb, dvb
    return dq.to(dtype), dk.to(dtype), dv.to(dtype)
