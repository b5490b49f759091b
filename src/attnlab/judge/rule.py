"""The one tolerance rule, after FlashAttention's tests, and the rounding floor it stands on.

On the same inputs, for each quantity (the output and each gradient) a form passes when

    max|form - oracle|  <=  2 * max|PyTorch - oracle|  +  floor

where the oracle is the float64 reference of :mod:`attnlab.judge.oracle` and PyTorch runs in the
input dtype. The ``floor`` is the rounding error the input dtype allows for the sums that make
that quantity, derived from the computation itself rather than fixed: every sum of n products may
be off by

    u * sqrt(n) * sum|product|          (u = the dtype's machine epsilon, torch.finfo(dtype).eps)

and these errors are carried, to first order, from the scores (n = E) through the softmax into
the output (n = S), and through dP = dO V^T (n = Ev), D = rowsum(dO * O) and
dS = P * (dP - D) into dq (n = S), dk (n = L) and dv (n = L); see :func:`rounding_floor`. The
floor is the largest such bound over the quantity's elements, plus twice the error of merely
storing the oracle's answer in the dtype. It grows with the size of the numbers, so the rule holds
for every seed, and it is ~1e-6 (float32) of the quantities' size, so a wrong form still fails.
With ``dtype=float64`` the same floor is what PyTorch's float64 answer must meet against the
oracle: the cross-check that the oracle itself is right.

Every number is reported; nothing hides in ``allclose`` defaults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnlab.judge import oracle
from attnlab.results import Result

FACTOR = 2.0  # the rule's multiple of PyTorch's own error; a knowingly less precise kernel may be held to more
NO_GRADS = {"out": 0.0, "dq": 0.0, "dk": 0.0, "dv": 0.0, "dmask": 0.0}


def rounding_floor(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False,
                   grad_out=None, keep=None, dropout_p=0.0, dtype=None, score_mod=None,
                   fwd: oracle.Forward | None = None, elementwise: bool = False, params: dict | None = None,
                   sinks=None) -> dict:
    """The rounding budget of each quantity: ``{"out": ..., "dq": ..., "dk": ..., "dv": ..., "dmask": ...}``.

    First-order error propagation in float64: every sum of n products is allowed
    ``u * sqrt(n) * sum|product|`` (the probabilistic bound of Higham & Mary), with u the unit roundoff
    of the precision the sums accumulate in, and the weights P and dS = P * (dP - D) are allowed one
    rounding each, h, in the dtype they are stored in before their matmuls. In float32 and float64
    u = h = ``torch.finfo(dtype).eps``. In half precision (float16, bfloat16) sums accumulate in
    float32 on every backend that does it right (PyTorch's kernels, FlashAttention, tensor cores),
    so u is float32's eps and h the half dtype's: P and dS are rounded to it before P V and dS K,
    as FlashAttention does. Sums over a row's scores are bounded with norms (|q_i . k_j| <= |q_i| |k_j|),
    so that every error is a per-row number times the weights P, and the budget costs four products
    with P. A score modifier is taken not to amplify the scores' error (true of the built-ins:
    soft-capping's slope is at most 1, ALiBi and relative biases add a constant). The output's own
    rounding to the dtype is :func:`floor`'s. ``fwd``: the oracle's forward on these arguments where it has already
    been computed (:func:`attnlab.judge.oracle.answer`), so that a case runs it once. ``elementwise=True``:
    each quantity's bound per element instead of its largest, as float64 tensors of the oracle's flattened shapes
    (out (N, H, L, Ev); dq (N, H, L, E); dk, dv (N, Hkv, S, .)), without dmask. ``params``: the score modifier's
    tensors whose gradients are judged, by name (float64 leaves it reads): each gets the error dS's bound makes
    through the modifier (:func:`_param_floors`). With ``sinks`` (or a ``fwd`` that has them) the floors are those
    of the problem a sink is -- one more key and value of zeros whose score is the sink
    (:func:`attnlab.judge.oracle.as_key`) -- and the sinks' gradient gets its own, ``"dsinks"``.
    """
    dtype = dtype or query.dtype
    h = torch.finfo(dtype).eps
    u = torch.finfo(torch.float32).eps if dtype in (torch.float16, torch.bfloat16) else h
    with torch.no_grad():
        f = fwd if fwd is not None else oracle.forward(*(t.detach().double().cpu() for t in (query, key, value)),
                                                       oracle.cpu64(attn_mask), is_causal, scale, enable_gqa, keep,
                                                       dropout_p, score_mod,
                                                       None if sinks is None else sinks.detach().double().cpu())
        if f.P.numel() == 0:
            return dict(NO_GRADS)
        keys, f = f, oracle.as_key(f)  # with sinks: the sink as one more key (the modifier's tensors read keys')
        S = f.k.shape[2]
        # scores s = scale * q.k, E products, then the mask added and exp taken (relative u): per row,
        # the largest error over the row's keys. P_ij then moves by at most P_ij * rel_i.
        s_err = score_error(f, u)  # (N, H, L, 1)
        rel = 2.0 * s_err + u * math.sqrt(S) + h  # P's relative error: the scores', the sum's, its own rounding
        Pv = f.Pd @ f.v.abs()  # (N, H, L, Ev): the sum of |products| that makes the output
        o_err = (u * math.sqrt(S) + rel) * Pv
        fl = {"out": o_err}
        if grad_out is not None:
            fl.update(_gradient_floors(f, grad_out, o_err, rel, u, h, elementwise, attn_mask, score_mod, params, keys))
    if elementwise:
        return fl
    return {n: float(x.max()) for n, x in fl.items()}


def _gradient_floors(f: oracle.Forward, grad_out, o_err, rel, u: float, h: float, elementwise: bool, attn_mask,
                     score_mod, params, keys: oracle.Forward) -> dict:
    """dq, dk, dv (and dmask, a modifier's tensors, and the sinks') from the output's error ``o_err`` and P's relative
    ``rel``; ``keys``: the forward as the oracle gave it (with sinks, ``f`` has the sink as one more key)."""
    q, kx, vx, P, Pd, O = f.q, f.k, f.v, f.P, f.Pd, f.out
    N, H, L, E = q.shape
    S, Ev, G, sc = kx.shape[2], vx.shape[3], f.groups, abs(f.scale)
    fl = {}
    dO = grad_out.detach().double().cpu().reshape(O.shape)  # (N, H, L, Ev)
    kf = torch.where(P > 0, Pd / P, 0.0)  # dropout's keep * 1/(1-p) per weight (1 without dropout)
    D = (dO * O).sum(dim=-1, keepdim=True)  # (N, H, L, 1)
    g = (dO @ vx.transpose(-2, -1)) * kf - D  # dP - D, (N, H, L, S)
    # dP = dO.v and D = dO.O are sums of Ev products (O carrying its own error); dS = P (dP - D) moves
    # with P, with them, and by its own rounding before dS K: per element, then into the matmuls
    dD = u * math.sqrt(Ev) * dO.norm(dim=-1, keepdim=True) * O.norm(dim=-1, keepdim=True) + (
        dO.abs() * o_err).sum(dim=-1, keepdim=True)
    dP = u * math.sqrt(Ev) * dO.norm(dim=-1, keepdim=True) * vx.norm(dim=-1).unsqueeze(-2) * kf
    dS_err = P * ((rel + h + u) * g.abs() + dP + dD)  # (N, H, L, S)
    dS_abs = P * g.abs()
    dq = sc * (dS_err + u * math.sqrt(S) * dS_abs) @ kx.abs()
    dk = sc * (dS_err + u * math.sqrt(L) * dS_abs).transpose(-2, -1) @ q.abs()
    dv = (Pd * (rel + u * math.sqrt(L))).transpose(-2, -1) @ dO.abs()
    S0 = keys.k.shape[2]  # the keys' own (the sink's key, where there is one, is no key of the caller's)
    fl["dq"] = dq
    fl["dk"] = _per_key_head(dk, G)[..., :S0, :]  # the G query heads of a group add into one key head
    fl["dv"] = _per_key_head(dv, G)[..., :S0, :]
    if not elementwise:
        fl["dmask"] = dS_err[..., :S0].max() * max(1, N * H * L * S0 // max(1, _numel(attn_mask)))
        fl.update(_param_floors(keys, score_mod, params or {}, (dS_err + u * math.sqrt(L * S) * dS_abs)[..., :S0]))
        if keys.sinks is not None:  # d sink_h = sum over the head's N * L rows of the sink key's dS = P_sink (0 - D)
            col = dS_err[..., S0] + u * math.sqrt(N * L) * dS_abs[..., S0]  # (N, H, L)
            fl["dsinks"] = col.sum(dim=(0, 2)).max()
    return fl


def _param_floors(f: oracle.Forward, score_mod, params: dict, dS_bound: torch.Tensor) -> dict:
    """Each modifier tensor's gradient bound: the scores' gradient dS may be off by ``dS_bound`` (N, H, L, S) per
    element, and that reaches a tensor through the modifier's Jacobian -- one product with it, whose entries
    for each tensor element keep one sign in the built-ins (a bias table adds, ALiBi's distance subtracts).
    ``params`` are leaves ``score_mod`` reads, requiring grad."""
    if not params or score_mod is None:
        return {}
    N, H, L, S = f.P.shape
    b, h, i, j = oracle.grids(N, H, L, S)
    s = (f.q @ f.k.transpose(-2, -1) * f.scale).detach()  # the scaled scores the modifier is given
    with torch.enable_grad():
        out = score_mod(s, b, h, i, j)
        grads = torch.autograd.grad(out, list(params.values()), dS_bound, allow_unused=True)
    return {n: g.abs().max() if g is not None else torch.zeros(()) for n, g in zip(params, grads, strict=True)}


def score_error(f: oracle.Forward, u: float) -> torch.Tensor:
    """(N, H, L, 1): how far a row's scores may be off, for sums of E products in unit roundoff ``u`` (the
    mask added and exp taken count one more u)."""
    k_len = f.k.norm(dim=-1).amax(dim=-1, keepdim=True).unsqueeze(-1)  # (N, H, 1, 1)
    return u * (math.sqrt(f.q.shape[-1]) * abs(f.scale) * f.q.norm(dim=-1, keepdim=True) * k_len + 1.0)


def _per_key_head(x: torch.Tensor, G: int) -> torch.Tensor:
    """(N, H, S, .) per query head -> (N, Hkv, S, .), summed over the G query heads that share a key head."""
    N, H = x.shape[:2]
    return x.reshape(N, H // G, G, *x.shape[2:]).sum(dim=2)


def _numel(m) -> int:
    return m.numel() if isinstance(m, torch.Tensor) and oracle.causal_variant(m) is None else 1


def max_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    d = (x.detach().double().cpu() - ref.detach().double().cpu()).abs()
    return d.max().item() if d.numel() else 0.0


def mean_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    d = (x.detach().double().cpu() - ref.detach().double().cpu()).abs()
    return d.mean().item() if d.numel() else 0.0


def floor(ref: torch.Tensor, dtype: torch.dtype) -> float:
    """Twice the error of storing ``ref`` in ``dtype``, plus a hair for exactly representable cases."""
    if not ref.numel():
        return 1e-12
    stored = ref.detach().to(dtype).double()
    return 2.0 * (stored - ref.detach().double()).abs().max().item() + 1e-12


# How near an answer must be to a reading's (a wrong semantics computed on the same inputs) to be that reading
# (attnlab.judge.readings): far above the rounding of the answers' dtype -- a function that computes otherwise than
# the reading's formula, in another order, is still that reading -- and far below any reading's distance from the
# right answer, which its readings must exceed ten times to say anything.
READING = {torch.float64: 1e-9, torch.float32: 1e-4}
READING_HALF = 1e-2
BLOWN_UP = 1e3  # a reading's answer this many times the right one's size: exp amplified what went into it ...
BLOWN_UP_TOLERANCE = 1e-1  # ... and float sums of such numbers cancel: a tenth of its size (the right answer is far)


def reading_tolerance(dtype, alt: torch.Tensor, right: torch.Tensor) -> float:
    """The distance within which an answer is the reading's answer ``alt`` (``right``: the right one there), in
    the answers' ``dtype`` (a torch dtype or its name): relative to the reading's size (:data:`READING`)."""
    dt = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    big = float(alt.abs().max()) if alt.numel() else 0.0
    ref = float(right.abs().max()) if right.numel() else 0.0
    rel = BLOWN_UP_TOLERANCE if big > BLOWN_UP * (1 + ref) else READING.get(dt, READING_HALF)
    return rel * (1 + big)


@dataclass(frozen=True)
class Comparison(Result):
    """One quantity (out, dq, dk, dv, dmask) of one case: the form's error, PyTorch's, the limit."""

    quantity: str
    err: float
    mean_err: float
    torch_err: float
    allowed: float
    passed: bool
    # The limit reaches the answer's own size only because the factor is above FACTOR: an output of zeros would pass
    # this quantity, so it judged nothing (``ref_max``: max|oracle|, what the limit must stay below to judge).
    vacuous: bool = False
    ref_max: float = 0.0

    def judging_factor(self, factor: float) -> float:
        """The largest factor at which this quantity, held at ``factor``, still judges (its limit below max|oracle|)."""
        if not (math.isfinite(self.torch_err) and self.torch_err > 0):
            return math.inf
        rest = self.allowed - factor * self.torch_err
        return max((self.ref_max - rest) / self.torch_err, 0.0)


def compare(quantity: str, mine: torch.Tensor | None, theirs: torch.Tensor, ref: torch.Tensor,
            dtype: torch.dtype, rounding: float, theirs_ref: torch.Tensor | None = None,
            factor: float = FACTOR) -> Comparison:
    """Apply the tolerance rule to ``mine`` given PyTorch's ``theirs`` and the float64 ``ref``.

    ``rounding`` is the quantity's computed rounding budget (:func:`rounding_floor`); ``theirs_ref``
    the oracle PyTorch's answer is measured against when it differs from ``ref`` (dropout); ``factor`` the
    multiple of PyTorch's error allowed (2, after FlashAttention's tests). ``mine`` None (no gradient came back)
    or of another shape fails, with the limit as the rule computed it.
    """
    terr = max_err(theirs, ref if theirs_ref is None else theirs_ref)
    # PyTorch answering NaN where the oracle is finite (2.13's CPU kernel, is_causal with scale < 0) gives no
    # error to scale: the limit is then the rounding floor alone.
    rest = rounding + floor(ref, dtype)
    allowed = (factor * terr if math.isfinite(terr) else 0.0) + rest
    if mine is None or mine.shape != ref.shape:  # nothing to measure: failed, against the limit the rule computed
        return Comparison(quantity, float("inf"), float("inf"), terr, allowed, False)
    err = max_err(mine, ref)
    ok = bool(err <= allowed) and bool(torch.isfinite(mine.detach()).all())
    top = ref.detach().abs().max().item() if ref.numel() else 0.0
    # Judged nothing: at the rule's own factor the limit would stay below the answer's size, at this one it does not.
    vacuous = factor > FACTOR and allowed >= top > (FACTOR * terr if math.isfinite(terr) else 0.0) + rest
    return Comparison(quantity, err, mean_err(mine, ref), terr, allowed, ok, vacuous, top)
