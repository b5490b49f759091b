"""Reading a sink probe: the weight each row gives its sink, and the sink that weight says it read.

With q = 0 and v one-hot per key (:mod:`.design`), output row i is the row's weights over its keys. With sinks they
sum to 1 - w_sink, w_sink = exp(sink_h - lse_i): what is missing from 1 is the sink's weight. The spec's is known
(the oracle's), so a row whose sink weight differs says so -- "row 3 of head 1 gives the sink the weight 0.31; the
spec's gives 0.12 (sink 1.5, lse 3.6)" -- and, where the row's keys keep their weights relative to each other, its
weight says which logit the row added: with the keys' total K, w_sink / K = exp(sink_read) / Σ_j exp(s_ij), so

    sink_read = sink_h + log(w_mine / K_mine) - log(w_spec / K_spec)

The probes' sinks are spread over the heads (each head its own), so a sink read from another head, by the query's
position, or added more than once (once per key tile: sink + ln T) shows as which head's logit, or by how much,
across the rows that differ. Nothing here names a cause: the alternatives a row's output matches do
(:mod:`attnlab.judge.sink_causes`); these are the facts said beside them, or alone where none fits.
"""

from __future__ import annotations

import math

import torch

from attnlab.judge.probes.read import MAP_ROWS, Measured

CLOSE = 0.02  # a read sink within this of a head's logit is that head's (the probe's sinks are 1 / (H - 1) * 3 apart)


def read(case, out: torch.Tensor, ref: torch.Tensor, f, limit: float) -> list[Measured]:
    """The sink weights of a failing sink probe's rows against the spec's (``f`` the oracle's forward), where they
    differ on rows that see a key."""
    S = case.S or case.L
    flat = out.reshape(-1, *out.shape[-3:])
    Pm, Ps = flat[..., :S], ref.reshape(-1, *ref.shape[-3:])[..., :S]
    other = flat[..., S:].sum(-1)  # weight on values that are no key's (a paged probe's coded slots)
    wm, ws = 1 - Pm.sum(-1) - other, f.sink_P
    Km, Ks = Pm.sum(-1), Ps.sum(-1)
    live = (Ks > 0) & torch.isfinite(wm)
    tol = 5e-3 + 4 * S * limit
    rows = live & ((wm - ws).abs() > tol)
    if not rows.any():
        return []
    n, h, i = (int(t) for t in torch.nonzero(rows)[0])
    text = (f"row {i} of head {h}{f' (batch {n})' if rows.shape[0] > 1 else ''} gives the sink the weight "
            f"{float(wm[n, h, i]):.3g}; the spec's gives {float(ws[n, h, i]):.3g} (sink {float(f.sinks[n, h, i]):.4g}, "
            f"lse {float(f.lse[n, h, i]):.4g}; {int(rows.sum())} of {int(live.sum())} rows that see a key differ)")
    said, pattern = _shared(case, wm, ws, Km, Ks, f.sinks, rows, tol)
    lines = tuple(f"query {int(i)} (head {int(h)}{f', batch {int(n)}' if rows.shape[0] > 1 else ''}): yours "
                  f"{float(wm[n, h, i]):.3g}, the spec's {float(ws[n, h, i]):.3g}"
                  for n, h, i in torch.nonzero(rows)[:MAP_ROWS].tolist())
    return [Measured("sinks", f"{text}: {said}", lines, pattern)]


def _shared(case, wm, ws, Km, Ks, sinks, rows, tol) -> tuple[str, str]:
    """What the rows that differ share: no weight on the sink, the logit of another head (which, by head or by the
    query's position), the spec's sink moved by one amount (a count of it: ln T), or nothing one rule says."""
    if bool((wm[rows].abs() <= tol).all()):
        return "every such row's weights sum to 1: the sink takes no weight", "sink takes no weight"
    ok = rows & (wm > tol) & (Km > tol)
    if not ok.any():
        return "the keys take no weight where the spec's do", "sink takes every weight"
    read_ = sinks + (wm / Km).log() - (ws / Ks).log()
    heads = sinks[0, :, 0]  # the probe's sinks are one per head
    found = _heads_read(case, read_, heads, ok)
    if found:
        return found
    shift = (read_ - sinks)[ok]
    lo, hi = float(shift.min()), float(shift.max())
    if hi - lo <= CLOSE:
        c = (lo + hi) / 2
        k = round(math.exp(c))
        count = (f": as if added {k} times (once per key tile?)" if k >= 2 and abs(math.exp(c) - k) < 0.05 * k
                 else "")
        return (f"each row reads its sink as sink + {c:.4g} (its weight e^{c:.3g} = {math.exp(c):.3g} times the "
                f"spec's){count}", "sink counted more than once" if count else "sink shifted")
    return (f"the sink each row reads is its own moved by {lo:.3g} to {hi:.3g}: no one rule holds the rows",
            "sink weight differs")


def _heads_read(case, read_: torch.Tensor, heads: torch.Tensor, ok: torch.Tensor) -> tuple[str, str] | None:
    """Where every differing row read one head's logit: which, by head (a map) or by the query's position."""
    H = heads.numel()
    if H < 2:
        return None
    near = (read_[..., None] - heads).abs() <= CLOSE  # (N, H, L, H): the heads whose logit each row read
    if not bool(near.any(-1)[ok].all()):
        return None
    which = near.float().argmax(-1)  # (N, H, L)
    per_head = {h: sorted({int(g) for g in which[:, h][ok[:, h]].tolist()}) for h in range(H)}
    if all(len(gs) <= 1 for gs in per_head.values()):
        m = [gs[0] if gs else h for h, gs in per_head.items()]
        G = H // (case.Hkv or H)
        why = (": head 0's for every head" if set(m) == {0} else ": the kv head's index, h // G" if
               m == [h // G for h in range(H)] else ": h % Hkv" if m == [h % (case.Hkv or H) for h in range(H)] else "")
        return (f"head h's rows read head g's sink: g = {m} by head (the spec's {list(range(H))}){why}",
                "sink read from another head")
    i = torch.arange(read_.shape[-1]).view(1, 1, -1).expand_as(which)
    if bool((which == i % H)[ok].all()):
        return (f"row i reads sinks[i % {H}], the head its position gives, whatever its own head: the sink is read "
                "by the query's position", "sink read by the query's position")
    return None
