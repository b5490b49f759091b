"""Tiled backward; bf16 T=512 tiles 64 max grad err 7.8e-3 (right 1.9e-3), tiles 16: 1.4e-2 (right 1.9e-3)."""

TRUTH = {
    "api": "level-5",
    "bugs": [
        "dq, dk, dv and the key tile's dk and dv accumulators are made in the inputs' dtype (bfloat16 for "
        "bfloat16 inputs), so the sums over tiles are rounded at every step; they should be gathered in the "
        "float32 work dtype and cast once at the end",
    ],
    "kind": "precision",
}

import math  # noqa: E402

import torch  # noqa: E402


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
    dq, dk, dv = (torch.zeros_like(t, dtype=dtype) for t in (q, k, v))
    D = (dout * out).sum(dim=-1, keepdim=True)  # (..., L, 1)
    for j0 in range(0, S, block_k):  # one tile of keys at a time: its dk and dv are gathered here
        kb, vb = k[..., j0:j0 + block_k, :], v[..., j0:j0 + block_k, :]  # (..., Bk, E), (..., Bk, Ev)
        cols = torch.arange(j0, j0 + kb.shape[-2], device=q.device)  # (Bk,): the tile's keys' places
        dkb, dvb = torch.zeros_like(kb, dtype=dtype), torch.zeros_like(vb, dtype=dtype)
        for i0 in range(0, L, block_q):  # against each tile of queries
            qb, dob = q[..., i0:i0 + block_q, :], dout[..., i0:i0 + block_q, :]  # (..., Bq, E), (..., Bq, Ev)
            rows = torch.arange(i0, i0 + qb.shape[-2], device=q.device).unsqueeze(-1)  # (Bq, 1): the queries' places
            s = (qb @ kb.transpose(-2, -1)) * scale  # (..., Bq, Bk)
            if is_causal:
                s = s.masked_fill(cols > rows, -math.inf)
            i1 = i0 + qb.shape[-2]
            P = torch.exp(s - lse[..., i0:i1].unsqueeze(-1))
            dvb += P.transpose(-2, -1) @ dob
            dP = dob @ vb.transpose(-2, -1)  # (..., Bq, Bk)
            dS = P * (dP - D[..., i0:i1, :])
            dq[..., i0:i1, :] += (dS @ kb) * scale
            dkb += (dS.transpose(-2, -1) @ qb) * scale
        dk[..., j0:j0 + block_k, :], dv[..., j0:j0 + block_k, :] = dkb, dvb
    return dq.to(dtype), dk.to(dtype), dv.to(dtype)
