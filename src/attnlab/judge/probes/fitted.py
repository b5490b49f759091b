"""The scale a failing output was computed at, measured on the case itself.

A scale slip (``E ** -1/2``, which Python reads as ``E ** -1 / 2``; the model width for the head width) makes the
output attention at another scale: the same mask, the same softmax, every score multiplied by one number. Where no
named cause explains a failing case, the judge computes attention at a range of scales (the scores made once) and
keeps the one nearest the function's output; only if the oracle's answer at that scale *is* the output -- every row
within the case's own limit -- is the scale said, as a measurement: "the output is attention at scale 1/(2 * E)
(0.0625 at E = 8), where the spec's is 0.3536 = 1/sqrt(E)". A wrong formula of any other kind is near no scale, and
nothing is said.
"""

from __future__ import annotations

import math

import torch

from attnlab.judge import oracle, rule

LOG2_SPAN = 12.0  # factors from 2^-12 to 2^12 of the spec's scale
STEP = 0.5  # the grid, in log2 of the factor, before the fit is refined between its neighbours
REFINE = 50  # golden-section steps between them: the factor to 1e-10 of itself
LARGEST = 1 << 18  # scores (batch x heads x L x S) past which a case is not fitted: ~150 softmaxes each
NOT_SPEC = 1e-3  # a fitted factor this near 1 is the spec's own scale: nothing to say
HALF = ("bfloat16", "float16")  # dtypes whose fitted scale is said only in a simple form


def scale(case, x, mine, exp, limit: float) -> list[dict]:
    """[the measured line's dict] where one scale's attention is the function's output, else []."""
    if (mine is None or not isinstance(mine[0], torch.Tensor) or case.mod is not None or case.dropout_p > 0
            or case.sinks or not math.isfinite(limit)):
        return []
    out = mine[0].detach().double().cpu()
    ref = exp.ref[0]
    if out.shape != ref.shape or not bool(torch.isfinite(out).all()):
        return []
    q, k, v = (t.detach().double().cpu() for t in (x.q, x.k, x.v))
    if q[..., 0].numel() * k.shape[-2] > LARGEST:
        return []
    E = q.shape[-1]
    if E == 0:
        return []
    spec = 1.0 / math.sqrt(E) if case.scale is None else float(case.scale)
    if spec == 0:
        return []
    mask = oracle.cpu64(x.dense)
    at = _at_scale(q, k, v, mask, case.is_causal, case.gqa, spec)

    def err(log2f: float) -> float:  # the search's: the scores made once, only the scale changed
        return rule.max_err(out, at(spec * 2.0 ** log2f))

    def oracle_err(log2f: float) -> float:  # the claim's: the oracle's own answer at that scale
        a = oracle.reference(q, k, v, attn_mask=mask, is_causal=case.is_causal, scale=spec * 2.0 ** log2f,
                             enable_gqa=case.gqa)
        return rule.max_err(out, a)

    best = _nearest(err)
    if best is None:
        return []
    near, exact = _form(spec * 2.0 ** best, E)
    is_form = bool(near) and oracle_err(math.log2(exact / spec)) <= limit  # a simple form that fits too: it
    if is_form:
        best = math.log2(exact / spec)
    if abs(2.0 ** best - 1) <= NOT_SPEC or (not is_form and oracle_err(best) > limit):
        return []
    if not is_form and case.dtype in HALF:  # a half dtype's rule is wide: a scale a few % off absorbs a key or two
        return []  # seen wrongly; there only a scale of a simple form (1/E, 1/(2 sqrt(E)), ...) is said
    return [_said(spec * 2.0 ** best, spec, E, near if is_form else "", near, case.scale is None)]


def _nearest(err) -> float | None:
    """The log2 factor whose attention is nearest the output (``err`` of a log2 factor), by :func:`search`; None
    where the best is at the end of the range searched (no scale inside it is the output's)."""
    return search(err, [i * STEP - LOG2_SPAN for i in range(int(2 * LOG2_SPAN / STEP) + 1)])


def search(err, grid: list[float], steps: int = REFINE) -> float | None:
    """The x of ``grid`` (ascending) where ``err(x)`` is least, refined by golden section between its neighbours;
    None where the least is at either end of the grid (the minimum may lie outside it). The probes' one search for a
    constant fitted to a measurement (the scale here, a soft-cap's in :mod:`.read`)."""
    errs = [err(g) for g in grid]
    i = min(range(len(grid)), key=errs.__getitem__)
    if i in (0, len(grid) - 1):
        return None
    lo, hi = grid[i - 1], grid[i + 1]
    for _ in range(steps):
        a, b = hi - (hi - lo) / 1.618034, lo + (hi - lo) / 1.618034
        if err(a) <= err(b):
            hi = b
        else:
            lo = a
    return (lo + hi) / 2


def _said(fitted: float, spec: float, E: int, form: str, near: str, default: bool) -> dict:
    """The measured line's dict: the fitted scale in words (its form where the exact form fits), and the pattern
    that lets cases share the line only where they share the claim."""
    spec_form = " = 1/sqrt(E)" if default else ""
    if form:  # the same claim at every E: the line may gather cases of several
        words = (f"the output is attention at scale {form} ({fitted:.4g} at E = {E}), where the spec's is "
                 f"{spec:.4g}{spec_form}")
        pattern = f"scale {form}"
    else:  # a number of this case's: only cases at that very scale share its line
        words = (f"the output is attention at scale {fitted:.4g}{' (about ' + near + ')' if near else ''}, where "
                 f"the spec's is {spec:.4g}{spec_form} (E = {E})")
        pattern = f"scale {fitted:.4g} E {E} spec {spec:.4g}"
    words += (": q·kᵀ is multiplied by that number instead of the spec's scale -- the output, to within the rule, "
              "is attention computed so (measured by fitting the scale to the output)")
    return {"kind": "scores", "text": words, "map": [], "pattern": pattern}


def _at_scale(q, k, v, mask, is_causal: bool, gqa: bool, spec: float):
    """scale -> attention at that scale, float64, for the search (the oracle, which the fitted scale is then held
    to, checks the answer): the oracle's own forward at the spec's scale, once -- its heads' map, and what its masks
    add to each score -- with only the scale on q kᵀ changed."""
    _, f = oracle.answer(q, k, v, attn_mask=mask, is_causal=is_causal, scale=spec, enable_gqa=gqa)
    s = f.q @ f.k.transpose(-2, -1)  # (N, H, L, S): q kᵀ, each query head against its key head
    lse = torch.where(torch.isfinite(f.lse), f.lse, 0.0)[..., None]
    scores = torch.where(f.P > 0, f.P.log() + lse, -math.inf)  # the oracle's scores, its masks in them
    add = torch.where(torch.isneginf(scores), scores, scores - s * spec)  # what the masks add

    def at(scale: float) -> torch.Tensor:
        return oracle.unflatten(oracle.softmax_rows(s * scale + add) @ f.v, f)
    return at


def _form(s: float, E: int) -> tuple[str, float]:
    """(``s`` as E^a 2^b -- a in halves from -1 to 1, b from -3 to 3 -- where one such form is within 1 %, the
    simplest first: "1/(2 * E)", "1/sqrt(E)", "2/E"; that form's exact value) or ("", s) where none is."""
    fits = []
    for a2 in (-2, -1, 0, 1, 2):
        for b in range(-3, 4):
            if abs(E ** (a2 / 2) * 2.0 ** b / s - 1) <= 1e-2:
                fits.append((abs(a2) + abs(b), a2, b))
    if not fits:
        return "", s
    _, a2, b = min(fits)
    exact = E ** (a2 / 2) * 2.0 ** b
    e = {-2: "E", -1: "sqrt(E)", 0: "", 1: "sqrt(E)", 2: "E"}[a2]
    num = f"{2 ** b}" if b >= 0 else "1"
    den = f"{2 ** -b}" if b < 0 else ""
    top = " * ".join(p for p in (num if num != "1" or a2 <= 0 else "", e if a2 > 0 else "") if p) or "1"
    bottom = " * ".join(p for p in (den, e if a2 < 0 else "") if p)
    return (f"{top}/({bottom})" if " " in bottom else (f"{top}/{bottom}" if bottom else top)), exact
