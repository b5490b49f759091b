"""A tiled backward with every step switchable: what a level 5 backward with one slip returns.

:func:`tiled` walks the key tiles and, inside, the query tiles, as the level 5 starter does, and
returns ``{"dq", "dk", "dv"}`` in float64. A :class:`Slip` switches one step to what a learner gets
wrong there: D from the wrong tensors, P where Pᵀ belongs, the scale left out or doubled, the lse of
another row or a second softmax, the mask, the sign of dS, a sum overwritten instead of added to.
Where the slip cannot run on a case's shapes (P @ dO with tiles of different sizes), it gives None:
that case says nothing of it, as the learner's code raised there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Slip:
    D: str = "o"  # D_i from rowsum(dO ∘ O); "v": dO ∘ V, "zero", "dout": dO ∘ dO, "dp": rowsum(dP); "row": right,
    # but without its last axis, so that the query tile's (..., Bq) lines up with the keys (column j gets D of row j);
    # "tile": rowsum(P ∘ dP) over the tile's own keys (the identity with rowsum(dO ∘ O) holds over all of them);
    # "key-rows": right, but sliced at the key tile's range, D[j0:j0 + Bk], for the query tile's rows
    dv: str = "right"  # "p": a tile's P @ dO (no transpose); "p-whole": the whole P @ dO
    dk: str = "right"  # "ds": dS @ q (no transpose)
    scale: str = "right"  # "missing" from dq, dk; "dq-missing", "dk-missing"; "dv": on dv too; "twice": on dq, dk
    lse: str = "row"  # "key": lse indexed by the key; "key-rows": the key tile's slice of lse taken for the query rows;
    # "column": the query tile's slice without its last axis, lined up with the keys (column j gets lse of row j);
    # "softmax": each tile's own softmax (a row the tile masks whole: 0), "softmax-nan": the same, that row NaN;
    # "none": exp(s) alone
    mask: bool = True  # the causal mask when P is rebuilt
    sign: float = 1.0  # dS = sign · P ∘ (dP − D)
    ds: str = "right"  # "precedence": dS = P ∘ dP − D
    dq: str = "add"  # "set": dq's rows overwritten by each key tile
    dkv: str = "add"  # "set": a key tile's dk, dv overwritten by each query tile; "set-v": dv alone
    skip: str | None = None  # under is_causal: "after": the query tiles after the key tile skipped (qs >= ke)


def forward64(q, k, v, causal: bool):
    """out and lse (natural log, (..., L)) in float64, as a right level 4 forward returns them."""
    s = _masked(q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1]), causal, 0, 0)
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse.unsqueeze(-1)) @ v.double(), lse


def _masked(s, causal: bool, i0: int, j0: int):
    if not causal:
        return s
    rows = torch.arange(i0, i0 + s.shape[-2]).unsqueeze(-1)
    cols = torch.arange(j0, j0 + s.shape[-1])
    return s.masked_fill(cols > rows, -math.inf)


def tiled(q, k, v, out, lse, dout, causal: bool, block_q: int, block_k: int, slip: Slip = Slip()):
    """{"dq", "dk", "dv"} of a tiled backward with ``slip``, float64; None where the slip cannot run here."""
    q, k, v, out, lse, dout = (t.double() for t in (q, k, v, out, lse, dout))
    L, S = q.shape[-2], k.shape[-2]
    sc = 1.0 / math.sqrt(q.shape[-1])
    fq = {"right": sc, "missing": 1.0, "dv": sc, "twice": sc * sc, "dq-missing": 1.0, "dk-missing": sc}[slip.scale]
    fk = {"dq-missing": sc, "dk-missing": 1.0}.get(slip.scale, fq)
    D = _delta(out, dout, v, slip)
    if D is None:
        return None
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for j0 in range(0, S, block_k):
        kb, vb = k[..., j0:j0 + block_k, :], v[..., j0:j0 + block_k, :]
        dkb, dvb = torch.zeros_like(kb), torch.zeros_like(vb)
        for i0 in range(0, L, block_q):
            if causal and slip.skip == "after" and i0 >= j0 + kb.shape[-2]:
                break  # (every later query tile sees this key tile whole)
            qb, dob = q[..., i0:i0 + block_q, :], dout[..., i0:i0 + block_q, :]
            s = _masked(qb @ kb.transpose(-2, -1) * sc, causal and slip.mask, i0, j0)
            P = _weights(s, lse, i0, j0, slip)
            if P is None:
                return None
            dP = dob @ vb.transpose(-2, -1)
            Dq = D[..., i0:i0 + block_q, :] if slip.D != "row" else D[..., i0:i0 + block_q, 0].unsqueeze(-2)
            if slip.D == "tile":
                Dq = (P * dP).sum(-1, keepdim=True)
            if slip.D == "key-rows":
                Dq = D[..., j0:j0 + kb.shape[-2], :]
                if Dq.shape[-2] != qb.shape[-2]:
                    return None  # (other rows than the query tile's: the learner's code raised)
            if Dq.shape[-1] not in (1, dP.shape[-1]):
                return None  # (a row of Bq numbers against Bk keys: the learner's code raised)
            dS = slip.sign * (P * dP - Dq if slip.ds == "precedence" else P * (dP - Dq))
            part_v = _dv_part(P, dob, slip, block_q, block_k)
            part_k = dS.transpose(-2, -1) @ qb * fk if slip.dk == "right" else (
                dS @ qb * fk if dS.shape[-2] == dS.shape[-1] else None)
            if part_v is None or part_k is None:
                return None
            dvb = (dvb if slip.dkv == "add" else 0 * dvb) + part_v * (sc if slip.scale == "dv" else 1.0)
            dkb = dkb if slip.dkv in ("add", "set-v") else 0 * dkb
            dkb = dkb + part_k
            part_q = dS @ kb * fq
            dq[..., i0:i0 + block_q, :] = (dq[..., i0:i0 + block_q, :] if slip.dq == "add" else 0) + part_q
        dk[..., j0:j0 + block_k, :], dv[..., j0:j0 + block_k, :] = dkb, dvb
    if slip.dv == "p-whole":
        if L != S:
            return None
        P = torch.exp(_masked(q @ k.transpose(-2, -1) * sc, causal, 0, 0) - lse.unsqueeze(-1))
        dv = P @ dout
    return {"dq": dq, "dk": dk, "dv": dv}


def _delta(out, dout, v, slip: Slip):
    if slip.D in ("o", "tile", "key-rows"):  # ("tile" takes its own per tile, "key-rows" another slice: see tiled)
        return (dout * out).sum(-1, keepdim=True)
    if slip.D == "v":
        return (dout * v).sum(-1, keepdim=True) if v.shape == dout.shape else None
    if slip.D == "row":
        return (dout * out).sum(-1, keepdim=True)  # (its last axis dropped where it is used: see tiled)
    if slip.D == "zero":
        return torch.zeros_like(out[..., :1])
    if slip.D == "dout":
        return (dout * dout).sum(-1, keepdim=True)
    return None if slip.D != "dp" else (dout @ v.transpose(-2, -1)).sum(-1, keepdim=True)


def _weights(s, lse, i0: int, j0: int, slip: Slip):
    if slip.lse == "key":
        at = lse[..., j0:j0 + s.shape[-1]].unsqueeze(-2)
        return torch.exp(s - at) if at.shape[-1] == s.shape[-1] else None  # (no lse there: the learner's raised)
    if slip.lse == "column":
        at = lse[..., i0:i0 + s.shape[-2]].unsqueeze(-2)
        return torch.exp(s - at) if at.shape[-1] == s.shape[-1] else None
    if slip.lse == "key-rows":
        at = lse[..., j0:j0 + s.shape[-1]].unsqueeze(-1)
        return torch.exp(s - at) if at.shape[-2] == s.shape[-2] else None
    if slip.lse == "softmax":
        return torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)
    if slip.lse == "softmax-nan":
        return torch.softmax(s, dim=-1)
    if slip.lse == "none":
        return torch.exp(s)
    return torch.exp(s - lse[..., i0:i0 + s.shape[-2]].unsqueeze(-1))


def _dv_part(P, dob, slip: Slip, block_q: int, block_k: int):
    if slip.dv == "p":
        return P @ dob if P.shape[-1] == P.shape[-2] else None
    return P.transpose(-2, -1) @ dob
