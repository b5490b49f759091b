"""Level 5 of your attention lab: FlashAttention's backward, by hand -- dq, dk, dv with no autograd.

Your level 4 forward kept, for each query i, the log-sum-exp of its scores, lse_i = log Σ_j exp(s_ij)
(s = q·k / √d, causal). With it a block of weights comes back without a second softmax:
P_ij = exp(s_ij - lse_i). Given the forward's output O and the gradient dO of the loss with respect
to it, the gradients are

    dV = Pᵀ dO          dP = dO Vᵀ          D_i = Σ_e dO_ie O_ie
    dS = P ∘ (dP - D)   dQ = dS K / √d      dK = dSᵀ Q / √d

taken one key block at a time, so no (L, S) matrix is ever held. Four pieces are marked TODO; as it
stands it runs, and gives the wrong answer. The check runs your function under
torch.inference_mode(), where autograd records nothing: .backward() and autograd.grad cannot help.
After each one, run

    attnlab lab check lab_backward.py

It grades dq, dk, dv against the float64 oracle's gradients (PyTorch's own backward sets the limit),
float64 and float32, and says the likely cause of what fails.
"""

import math

import torch


def flash_backward(q, k, v, out, lse, dout, block=64):
    """Causal attention's gradients from the forward's out and lse: q, k, v, out, dout (..., T, d), lse (..., T).

    Returns (dq, dk, dv), each the shape and dtype of q, k, v.
    """
    dtype = q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32  # half precision is computed in float32
    q, k, v, out, lse, dout = (t.to(work) for t in (q, k, v, out, lse, dout))
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(E)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    rows = torch.arange(L, device=q.device).unsqueeze(-1)  # (L, 1): query i
    # TODO 1 (D): one number per query, from dout and out, (..., L, 1)
    for j0 in range(0, S, block):
        kb, vb = k[..., j0:j0 + block, :], v[..., j0:j0 + block, :]  # (..., B, d)
        cols = torch.arange(kb.shape[-2], device=q.device) + j0  # the block's keys' places in the sequence
        s = (q @ kb.transpose(-2, -1) * scale).masked_fill(cols > rows, -math.inf)  # (..., L, B)
        # TODO 2 (weights): the block's P from s and the saved lse (each query's own)
        # TODO 3 (dv, dS): dv of the block's keys, then dS = P * (dP - D)
        # TODO 4 (dq, dk): add dS @ kb to dq and set the block's dk from dS and q, both times the scale
    return dq.to(dtype), dk.to(dtype), dv.to(dtype)
