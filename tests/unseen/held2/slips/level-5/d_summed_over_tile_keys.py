"""Key tiles outside, query tiles inside; dS from P, dP and D."""

TRUTH = {
    "api": "level-5",
    "bugs": [
        "D is taken per tile as rowsum(P * dP) over the current tile's keys only, which equals rowsum(dO * O)"
        " only when one tile holds all the keys; D should be rowsum(dO * O) over the row",
    ],
    "kind": "semantic",
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
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    D = (dout * out).sum(dim=-1, keepdim=True)  # (..., L, 1)
    for j0 in range(0, S, block_k):  # one tile of keys at a time: its dk and dv are gathered here
        kb, vb = k[..., j0:j0 + block_k, :], v[..., j0:j0 + block_k, :]  # (..., Bk, E), (..., Bk, Ev)
        cols = torch.arange(j0, j0 + kb.shape[-2], device=q.device)  # (Bk,): the tile's keys' places
        dkb, dvb = torch.zeros_like(kb), torch.zeros_like(vb)
        for i0 in range(0, L, block_q):  # against each tile of queries
            qb, dob = q[..., i0:i0 + block_q, :], dout[..., i0:i0 + block_q, :]  # (..., Bq, E), (..., Bq, Ev)
            rows = torch.arange(i0, i0 + qb.shape[-2], device=q.device).unsqueeze(-1)  # (Bq, 1): the queries' places
            s = (qb @ kb.transpose(-2, -1)) * scale  # (..., Bq, Bk)
            if is_causal:
                s = s.masked_fill(cols > rows, -math.inf)
            i1 = i0 + qb.shape[-2]
            P = torch.exp(s - lse[..., i0:i1].unsqueeze(-1))
            dvb = dvb + P.transpose(-2, -1) @ dob
            dP = dob @ vb.transpose(-2, -1)  # (..., Bq, Bk)
            D_tile = (P * dP).sum(dim=-1, keepdim=True)
            dS = P * (dP - D_tile)
            dq[..., i0:i1, :] += (dS @ kb) * scale
            dkb = dkb + (dS.transpose(-2, -1) @ qb) * scale
        dk[..., j0:j0 + block_k, :], dv[..., j0:j0 + block_k, :] = dkb, dvb
    return dq.to(dtype), dk.to(dtype), dv.to(dtype)
