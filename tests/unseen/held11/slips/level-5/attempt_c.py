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

TRUTH = {'api': 'level-5', 'level': 5, 'slips': ['D is recomputed inside each (key tile, query tile) pair as the row sum of P * dP over that key tile only, instead of D_i = dO_i . O_i over all the keys: dq and dk are wrong whenever a query sees more than one key tile (S > block_k); a single key tile (L=10, S=12) passes, dv always passes'], 'kind': 'semantic'}

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
    for j0 in range(0, S, block_k):
        j1 = min(j0 + block_k, S)
        kb, vb = k[..., j0:j1, :], v[..., j0:j1, :]
        cols = torch.arange(j0, j1, device=q.device)
        dkb, dvb = torch.zeros_like(kb), torch.zeros_like(vb)
        for i0 in range(0, L, block_q):
            i1 = min(i0 + block_q, L)
            qb, dob = q[..., i0:i1, :], dout[..., i0:i1, :]
            rows = torch.arange(i0, i1, device=q.device).unsqueeze(-1)
            s = (qb @ kb.transpose(-2, -1)) * scale
            if is_causal:
                s = s.masked_fill(cols > rows, -math.inf)
            P = torch.exp(s - lse[..., i0:i1].unsqueeze(-1))
            dvb += P.transpose(-2, -1) @ dob
            dP = dob @ vb.transpose(-2, -1)
            D = (P * dP).sum(dim=-1, keepdim=True)  # one number per query
            dS = P * (dP - D)
            dq[..., i0:i1, :] += dS @ kb * scale
            dkb += dS.transpose(-2, -1) @ qb * scale
        dk[..., j0:j1, :] = dkb
        dv[..., j0:j1, :] = dvb
    return dq.to(dtype), dk.to(dtype), dv.to(dtype)
