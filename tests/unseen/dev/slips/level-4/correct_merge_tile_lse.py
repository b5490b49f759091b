"""Tiled attention forward that merges normalised tile results by their log-sum-exps, not an unnormalised acc.

Each key tile gives its own softmax-weighted values o_t and its own lse_t; the running (out, lse) pair of a query
tile absorbs it as lse' = logaddexp(lse, lse_t), out' = out * exp(lse - lse') + o_t * exp(lse_t - lse') (FlashDecoding's
combine step, done tile after tile). Rows with nothing seen yet keep lse = -inf and weight 0. Under is_causal the key
loop breaks at the first tile that starts after the query tile's last row.
"""

TRUTH = {
    "api": "level-4",
    "bugs": [],
    "kind": "correct",
}

import math  # noqa: E402

import torch  # noqa: E402


def flash_forward(q, k, v, is_causal=False, block_q=64, block_k=64):
    """Attention tile by tile: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (out (..., L, Ev), lse (..., L)).

    is_causal: query i sees keys 0 .. i (top-left aligned, as PyTorch's is_causal=True). out is in q's dtype;
    lse = log Σ_j exp(s_ij) over the keys query i sees, in float32 (float64 for float64 inputs).
    """
    *lead, L, E = q.shape
    S, Ev, dtype = k.shape[-2], v.shape[-1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32  # half precision is computed in float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    scale = 1.0 / math.sqrt(E)
    out = torch.zeros(*lead, L, Ev, dtype=work, device=q.device)
    lse = torch.zeros(*lead, L, dtype=work, device=q.device)
    for i0 in range(0, L, block_q):  # one tile of queries at a time
        qb = q[..., i0:i0 + block_q, :]  # (..., Bq, E); the last tile may be shorter
        Bq = qb.shape[-2]
        rows = torch.arange(i0, i0 + Bq, device=q.device).unsqueeze(-1)  # (Bq, 1): the tile's queries' places
        run_lse = torch.full((*lead, Bq, 1), -math.inf, dtype=work, device=q.device)  # log of the weight so far
        run_out = torch.zeros(*lead, Bq, Ev, dtype=work, device=q.device)  # normalised output so far
        for j0 in range(0, S, block_k):  # every tile of keys, the last one possibly partial
            if is_causal and j0 > i0 + Bq - 1:
                break  # this tile and every later one start after the tile's last query
            kb, vb = k[..., j0:j0 + block_k, :], v[..., j0:j0 + block_k, :]  # (..., Bk, E), (..., Bk, Ev)
            cols = torch.arange(j0, j0 + kb.shape[-2], device=q.device)  # (Bk,): the tile's keys' places
            s = (qb @ kb.transpose(-2, -1)) * scale  # (..., Bq, Bk): the tile's scores
            if is_causal:
                s = s.masked_fill(cols > rows, -math.inf)
            tile_lse = torch.logsumexp(s, dim=-1, keepdim=True)  # -inf for a row that sees none of the tile
            seen = tile_lse > -math.inf
            tile_out = torch.exp(s - torch.where(seen, tile_lse, torch.zeros_like(tile_lse))) @ vb
            new_lse = torch.logaddexp(run_lse, tile_lse)
            ref = torch.where(new_lse > -math.inf, new_lse, torch.zeros_like(new_lse))
            run_out = run_out * torch.exp(run_lse - ref) + tile_out * torch.exp(tile_lse - ref)
            run_lse = new_lse
        out[..., i0:i0 + Bq, :] = run_out
        lse[..., i0:i0 + Bq] = run_lse[..., 0]
    return out.to(dtype), lse
