"""Judging one function on one case: what it is held to, how it is called, and the verdict.

For a case, :func:`expect` computes once what every function is judged by -- the float64 oracle's
output and gradients, the rounding floors, and PyTorch's own answer in the case's dtype on the
case's device (the "2 x PyTorch's error" of the rule). It also checks the oracle: PyTorch's answer
in float64 must agree with it to float64 rounding, or the case is an ERROR that says so, whatever
the judged function does -- a disagreement never widens a limit.

:func:`judge` then calls the function on fresh copies laid out as the case says (transposed,
expanded, sliced), checks the contract (an output of PyTorch's shape, dtype and device; the
caller's tensors untouched, values and ``requires_grad``), and holds the output and every gradient
to the rule of :mod:`attnlab.judge.rule`. A failing row also records which wrong semantics its output
matches (:mod:`attnlab.judge.hypotheses`), for the diagnoses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F

from attnlab import kernels
from attnlab.judge import apis, backward_precision, explain, hypotheses, mod_cases, oracle, precision, rule, sink_causes
from attnlab.judge import hint as H
from attnlab.judge.apart.remote import Remote, described
from attnlab.judge.apis import lse
from attnlab.judge.cases import DTYPES, Case, views
from attnlab.judge.explain import rows_err
from attnlab.judge.facts import SILENT, Facts, problem, raised
from attnlab.judge.hint import Hint, hint
from attnlab.judge.inference import MODES, Snapshot, Watched, paths
from attnlab.judge.inference import compare as compare_paths
from attnlab.judge.probes import fitted
from attnlab.judge.probes.read import read
from attnlab.masks import Mask
from attnlab.results import Result

CROSS_FACTOR = 4.0  # PyTorch in float64 within 4x the float64 rounding floor of the oracle: the oracle is right


@dataclass
class Row(Result):
    form: str
    case: str
    dtype: str
    status: str  # pass | fail | skipped | error
    comparisons: list[rule.Comparison] = field(default_factory=list)
    detail: str = ""
    tags: list[str] = field(default_factory=list)  # what the case exercises (Case.tags)
    hints: list[Hint] = field(default_factory=list)  # wrong semantics a failing output matches (hypotheses)
    cross: rule.Comparison | None = None  # PyTorch in float64 against the oracle: the oracle's own check
    facts: Facts = field(default_factory=Facts)  # what failed, as values (what the diagnoses read)
    measured: list[dict] = field(default_factory=list)  # a probe's differences from the spec (probes.read)
    refuted: list[str] = field(default_factory=list)  # hints the function's passing cases refute (judge.confirm)

    def __post_init__(self):
        self.hints = [hint(h) for h in self.hints]  # the readings' text (judge.hint), as data

    @property
    def worst(self) -> rule.Comparison | None:
        """The comparison closest to (or furthest past) its limit."""
        if not self.comparisons:
            return None
        return max(self.comparisons, key=lambda c: c.err / c.allowed if c.allowed > 0 else math.inf)


def row(name: str, case: Case, status: str, detail: str = "", **kw) -> Row:
    return Row(name, case.name, case.dtype, status, detail=detail, tags=sorted(case.tags), **kw)


@dataclass(frozen=True)
class Expected:
    """What a function is judged by on one case (see :func:`expect`)."""

    ref: tuple  # the oracle: out, dq, dk, dv[, dmask][, d params] (float64, CPU)
    ref0: tuple  # the same without dropout (what PyTorch's answer is measured against)
    budget: dict  # rounding floor per quantity
    theirs: tuple  # PyTorch in the case's dtype and device
    cross: rule.Comparison  # PyTorch in float64 against the oracle, worst quantity
    keep: torch.Tensor | None  # the dropout keep-mask the oracle applied
    fresh: object  # the case's score modifier maker (see _modifier)
    fwd: oracle.Forward | None = None  # the oracle's forward (with the keep-mask), computed once for the case
    theirs64: tuple | None = None  # PyTorch in float64 on these inputs (the oracle's own check)


@dataclass(frozen=True)
class Inputs:
    """A case's tensors (:func:`attnlab.judge.cases.make_inputs`): ``mask`` is what attnlab's forms take (an
    attnlab mask function stays a function), ``dense`` its tensor twin for PyTorch and other functions."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    mask: object
    dense: torch.Tensor | None
    grad_out: torch.Tensor
    sinks: torch.Tensor | None = None  # (H,) in the case's dtype and device: a sink case's (judge.sink_cases)

    def mask_for(self, accepts_masks: bool):
        return self.mask if accepts_masks else self.dense

    @property
    def oracle_mask(self):
        """The oracle reads a mask function (its own evaluation) and PyTorch's CausalBias itself, a tensor as it is."""
        return self.mask if isinstance(self.mask, Mask) or oracle.causal_variant(self.mask) else self.dense

    @property
    def torch_mask(self):
        """What PyTorch is given: its own CausalBias as it is, else the dense tensor."""
        return self.mask if oracle.causal_variant(self.mask) else self.dense


def quantities(case: Case, backward: bool = True) -> list[str]:
    """What is compared on a case: the output, and with ``backward`` every gradient; an API case's own
    (:func:`apis.quantities`) end with its log-sum-exp."""
    if case.api:
        names = apis.quantities(case)
        return names if backward else ["out", "lse"]
    if not backward:
        return ["out"]
    return sdpa_quantities(case)


def sdpa_quantities(case: Case) -> list[str]:
    return ["out", "dq", "dk", "dv"] + (["dmask"] if case.grad_mask else []) + mod_cases.PARAM_NAMES.get(
        case.mod, []) + (["dsinks"] if case.sinks else [])


def call(fn, q, k, v, mask, case: Case, dropout_p: float = 0.0, score_mod=None, sinks=None):
    """Call a form passing only non-default keywords (user functions may not take them all)."""
    if isinstance(fn, Remote):  # a function in another process: the call goes there, its output comes back
        return fn.call(q, k, v, mask, case, dropout_p)
    if isinstance(fn, apis.Adapted):  # another API: its own arguments, from the case
        return fn.call_case(q, k, v, case, dropout_p, score_mod, sinks)[0]
    kw = {"dropout_p": dropout_p} if dropout_p > 0 else {}
    if score_mod is not None:
        kw["score_mod"] = score_mod
    if sinks is not None:
        kw["sinks"] = sinks
    if mask is not None:
        kw["attn_mask"] = mask
    if case.is_causal:
        kw["is_causal"] = True
    if case.gqa:
        kw["enable_gqa"] = True
    if case.scale is not None:
        kw["scale"] = torch.tensor(case.scale, dtype=torch.float64) if case.scale_tensor else case.scale
    return fn(q, k, v, **kw)


def _modifier(case: Case, seed: int):
    """The case's score modifier: ``fresh(dtype=None) -> (Mod or None, the tensors it holds)``, each call
    on its own copies of those tensors (leaves whose gradients are compared like dq, dk, dv). An API's own
    arguments (flash-attn's softcap and ALiBi) are its modifier (:func:`apis.modifier`)."""
    own = apis.modifier(case) if case.api else None
    if own is not None:
        return own
    tensors, build = mod_cases.make(case.mod, case.H, seed, DTYPES[case.dtype]) if case.mod else ([], None)

    def fresh(dtype=None, device=None):
        if build is None:
            return None, []
        ts = [t.detach().to(device or t.device, dtype or t.dtype).clone().requires_grad_(True) for t in tensors]
        return build(ts), ts

    return fresh


def run(f, case: Case, seed: int, q, k, v, m, grad_out, p: float = 0.0, fresh=None, layout: bool = True,
        backward: bool = True, inference: bool = False, sinks=None):
    """Call ``f`` on fresh inputs after ``torch.manual_seed(seed)``; returns ((out, dq, dk, dv[, dmask][, dparams]),
    contract problems). Inputs are laid out as the case says (``layout``); gradients are taken with respect
    to the tensors ``f`` was given: by ``torch.autograd.grad``, or where the function's backward only works under
    ``.backward()`` (reentrant activation checkpointing) from the ``.grad`` it leaves. ``backward=False``: the
    forward alone, on inputs that do not require grad, returns ((out,), problems). ``inference``: then the
    forward again under each of :data:`attnlab.judge.inference.MODES`, whose outputs end the tuple (see
    :func:`attnlab.judge.inference.paths`). ``sinks``: a sink case's (H,), passed as a fresh leaf (``sinks=``, or
    an API's ``learnable_sink=``) whose gradient ends the gradients. A :class:`Remote` function does all of it in
    its own process, and sends back the tensors and the problems as values."""
    if isinstance(f, Remote):
        return f.run(case, seed, q, k, v, m, grad_out, p, fresh, layout, backward, inference, sinks)
    got, problems = _with_grad(f, case, seed, q, k, v, m, grad_out, p, fresh, layout, backward, sinks)
    if inference and got is not None:
        outs, more = paths(lambda: _forward(f, case, seed, q, k, v, m, p, fresh, layout, sinks), problems)
        got, problems = (*got, *outs), problems + more
    return got, problems


def _laid_out(case: Case, q, k, v, m, layout: bool, grad: bool):
    """Fresh q, k, v laid out as the case says (leaves that require grad when ``grad``) and the caller's own copy
    of a mask tensor; (inputs, whether the mask is a tensor of values)."""
    _, (qq, kk, vv) = views(case, q, k, v) if layout else (None, [t.detach().clone().requires_grad_(True)
                                                                 for t in (q, k, v)])
    if not grad:  # the same layout, nothing to differentiate
        qq, kk, vv = (t.detach() for t in (qq, kk, vv))
    tensor = isinstance(m, torch.Tensor) and oracle.causal_variant(m) is None  # (a CausalBias holds no values)
    mm = m.detach().clone().requires_grad_(case.grad_mask and grad) if tensor else m
    return (qq, kk, vv, mm), tensor


def _forward(f, case: Case, seed: int, q, k, v, m, p: float, fresh, layout: bool, sinks=None):
    """One call of ``f`` on fresh inputs that do not require grad (in whatever mode the caller set): (its output,
    the names of the inputs it changed in place -- every tensor it was given, for an API's function)."""
    (qq, kk, vv, mm), tensor = _laid_out(case, q, k, v, m, layout, grad=False)
    mod, _ = fresh(device=q.device) if fresh is not None else (None, [])
    ss = None if sinks is None else sinks.detach().clone()
    if p > 0:
        torch.manual_seed(seed)
    if isinstance(f, apis.Adapted):
        watched = Watched(f.fn, apis.writes(f.api))
        out = apis.Adapted(watched, f.api).call_case(qq, kk, vv, case, p, mod, ss)[0]
        return out, watched.changed()
    snap = Snapshot(list(zip(INPUT_NAMES, [qq, kk, vv] + ([mm] if tensor else []), strict=False)))
    out = call(f, qq, kk, vv, mm, case, p, mod, ss)
    return out, snap.changed()


def _with_grad(f, case: Case, seed: int, q, k, v, m, grad_out, p: float, fresh, layout: bool, backward: bool,
               sinks=None):
    """:func:`run`'s call with gradients (``backward``) or on inputs that do not require grad."""
    (qq, kk, vv, mm), tensor = _laid_out(case, q, k, v, m, layout, grad=backward)
    mod, ts = fresh(device=q.device) if fresh is not None else (None, [])
    ss = None if sinks is None else sinks.detach().clone().requires_grad_(backward)
    ts = ts + ([ss] if ss is not None else [])  # the sinks' gradient ends the gradients, as the oracle's does
    given = [qq, kk, vv] + ([mm] if tensor else [])
    snap = Snapshot(list(zip(INPUT_NAMES, given, strict=False)))
    if p > 0:  # the dropout a function draws follows torch.manual_seed
        torch.manual_seed(seed)
    watched, own = None, []  # own: what an API's own checks find (a KV cache written in the wrong slots)
    if isinstance(f, apis.Adapted):  # another API: (out, its log-sum-exp), and gradients where it has a backward
        watched = Watched(f.fn, apis.writes(f.api))  # every argument its call gives it, checked for changes in place
        out, lse_, own = apis.Adapted(watched, f.api).call_case(qq, kk, vv, case, p, mod, ss)
    else:
        out, lse_ = call(f, qq, kk, vv, mm, case, p, mod, ss), None
    problems = _contract(out, q, snap, watched) + own
    if not isinstance(out, torch.Tensor) or out.is_meta:  # (meta: a shape without numbers, said as its device)
        return None, problems
    extra = (lse_,) if isinstance(f, apis.Adapted) else ()
    if isinstance(f, apis.Adapted) and lse_ is None:
        problems.append(problem("no-lse"))
    if not backward:
        return (out.detach(), *extra), problems
    if case.api and not apis.backward(case):
        return (out, *extra), problems
    wrt = [qq, kk, vv] + ([mm] if case.grad_mask else []) + ts
    if out.shape != grad_out.shape:
        problems.append(problem("shape", got=tuple(out.shape), want=tuple(grad_out.shape)))
        return (out, *[None] * len(wrt)), problems
    if not out.requires_grad and bool((out == 0).all()):  # attended no key (every key masked or skipped): zeros
        return (out, *(torch.zeros_like(t) for t in wrt), *extra), problems  # that depend on nothing, and so do
    if not out.requires_grad:  # its gradients -- the output's own failure, judged as it is, not a detached graph
        problems.append(problem("no-grad"))
        return (out, *[None] * len(wrt)), problems
    try:
        grads = torch.autograd.grad(out, wrt, grad_out.to(out.dtype), allow_unused=True)
    except RuntimeError as first:  # e.g. reentrant checkpointing, which takes only .backward(): ask it that way
        grads = _by_backward(f, case, seed, p, qq, kk, vv, mm, mod, wrt, grad_out, first, ss)
    return (out, *grads, *extra), problems


def _by_backward(f, case: Case, seed: int, p: float, qq, kk, vv, mm, mod, wrt, grad_out, first: RuntimeError,
                 ss=None):
    """The gradients ``out.backward(grad_out)`` leaves in ``.grad`` (kept on the views too), from a fresh forward:
    the graph ``torch.autograd.grad`` refused may be half spent. Its own failure raises the first error."""
    for t in wrt:
        t.grad = None
        if not t.is_leaf:
            t.retain_grad()
    if p > 0:
        torch.manual_seed(seed)
    out = f.call_case(qq, kk, vv, case, p, mod, ss)[0] if isinstance(f, apis.Adapted) else call(
        f, qq, kk, vv, mm, case, p, mod, ss)
    try:
        out.backward(grad_out.to(out.dtype))
    except RuntimeError:
        raise first from None
    return tuple(t.grad for t in wrt)


INPUT_NAMES = ("query", "key", "value", "attn_mask")


def _contract(out, q, snap: Snapshot, watched: Watched | None = None) -> list[list[str]]:
    """What breaks PyTorch's contract, as [key, sentence] (:data:`attnlab.judge.facts.PROBLEMS`): not a
    tensor, another dtype or device, inputs changed in place (``snap``: q, k, v and the mask as they were given;
    ``watched``: an API's function, every tensor its call was given) or their ``requires_grad``."""
    changed = (watched.changed() if watched is not None else []) or snap.changed()  # an API's own names first
    problems = [problem("in-place", name=name) for name in changed]
    problems += [problem("requires-grad", name=name, was=was, now=now) for name, was, now in snap.regraded()]
    if not isinstance(out, torch.Tensor):
        return [problem("not-a-tensor", returned=type(out).__name__), *problems]
    head = [problem("dtype", got=out.dtype, want=q.dtype)] if out.dtype != q.dtype else []
    head += [problem("device", got=out.device, want=q.device)] if out.device != q.device else []
    return head + problems


def _with_numbers(mine, problems: list, case: Case, backward: bool, device) -> tuple:
    """``mine`` without the meta tensors in it: a meta tensor holds a shape without numbers, so nothing of it can be
    compared (reading one raises "Cannot copy out of meta tensor"). An output on meta leaves nothing to judge (its
    row says where it is: the contract's device problem); a log-sum-exp or a gradient on meta is judged as missing,
    and said."""
    if mine is None or not any(isinstance(t, torch.Tensor) and t.is_meta for t in mine):
        return mine, problems
    if isinstance(mine[0], torch.Tensor) and mine[0].is_meta:
        said = any(key == "device" for key, _ in problems)
        return None, problems if said else [problem("device", got=mine[0].device, want=device), *problems]
    names = quantities(case, backward)
    names = names + [f"the output under {mode}" for mode, _, _ in MODES][:max(0, len(mine) - len(names))]
    metas = [names[i] if i < len(names) else f"result {i}" for i, t in enumerate(mine)
             if isinstance(t, torch.Tensor) and t.is_meta]
    words = {"lse": "the log-sum-exp"}
    told = ["device", f"{', '.join(words.get(n, n) for n in metas)} came back on meta (a shape without numbers); "
                      f"return {'it' if len(metas) == 1 else 'them'} on the inputs' device {device}"]
    return tuple(None if isinstance(t, torch.Tensor) and t.is_meta else t for t in mine), [*problems, told]


def expect(case: Case, seed: int, x: Inputs, keep) -> Expected:
    """What a form is judged by: the oracle (with the keep-mask), the oracle without dropout, the
    rounding floors, PyTorch's answer in the case's dtype (without dropout), and the oracle's own check.
    The oracle's forward runs once (twice with dropout: with the keep-mask and without), and every floor and
    hypothesis reads it; in float64 on the CPU, PyTorch's answer is its float64 answer too."""
    q, k, v, dense, grad_out = x.q, x.k, x.v, x.torch_mask, x.grad_out
    fresh = _modifier(case, seed)
    mod64, ts64 = fresh(torch.float64, "cpu")  # the oracle differentiates the tensors made, listed or not
    args = (q, k, v, x.oracle_mask, case.is_causal, case.scale, case.gqa)
    ref, fwd = oracle.answer(*args, grad_out=grad_out, keep=keep, dropout_p=case.dropout_p, score_mod=mod64,
                             score_params=ts64, sinks=x.sinks)
    # PyTorch runs without dropout (its dropout draws other random numbers): its error is measured
    # against the oracle without dropout, the form's against the oracle with the form's keep-mask.
    ref0, fwd0 = (ref, fwd) if keep is None else oracle.answer(*args, grad_out=grad_out, score_mod=mod64,
                                                               score_params=ts64, sinks=x.sinks)
    named = dict(zip(mod_cases.PARAM_NAMES.get(case.mod, []), ts64, strict=False))  # the tensors judged, by name
    budget = rule.rounding_floor(*args, grad_out=grad_out, keep=keep, dropout_p=case.dropout_p, fwd=fwd,
                                 score_mod=mod64, params=named)
    theirs = _pytorch(case, seed, q, k, v, dense, grad_out, fresh, x.sinks)
    if DTYPES[case.dtype] == torch.float64 and q.device.type == "cpu":  # the float64 answer is that one
        ours64 = theirs
    else:
        cpu64 = [t.detach().cpu().double() for t in (q, k, v, grad_out)]
        case64 = Case(**{**case.__dict__, "dtype": "float64", "layout": None})
        ours64 = _pytorch(case64, seed, *cpu64[:3], oracle.cpu64(dense), cpu64[3],
                          lambda dtype=None, device=None: fresh(torch.float64),
                          None if x.sinks is None else x.sinks.detach().cpu().double())
    if keep is None and DTYPES[case.dtype] in (torch.float32, torch.float64):  # one roundoff: the floor is linear in it
        ratio = torch.finfo(torch.float64).eps / torch.finfo(DTYPES[case.dtype]).eps
        floor64 = {n: b * ratio for n, b in budget.items()}
    else:
        floor64 = rule.rounding_floor(*args, grad_out=grad_out, dtype=torch.float64, fwd=fwd0)
    exp = Expected(ref, ref0, budget, theirs, _cross(case, ours64, ref0, floor64), keep, fresh, fwd, ours64)
    if case.api:  # the API's quantities: out (and the gradients where it has a backward), then the log-sum-exp
        return replace(exp, **lse.extend(case, x, exp, len(quantities(case)) - 1))
    return exp


def in_float64(exp: Expected, case64: Case, seed: int) -> Expected:
    """What the float64 twin of a float32 case is judged by, from the float32 case's :class:`Expected`: the same
    inputs (:meth:`Case.seed`) give the same oracle, floors that scale with the dtype's epsilon, and PyTorch's
    float64 answer, already computed for the oracle's check. For cases without dropout or a score modifier."""
    ratio = torch.finfo(torch.float64).eps / torch.finfo(torch.float32).eps
    return Expected(exp.ref, exp.ref0, {n: b * ratio for n, b in exp.budget.items()}, exp.theirs64, exp.cross,
                    exp.keep, _modifier(case64, seed), exp.fwd, exp.theirs64)


def _pytorch(case: Case, seed: int, q, k, v, dense, grad_out, fresh, sinks=None):
    """PyTorch's answer and gradients: F.scaled_dot_product_attention, or with a score modifier its plain
    operations (the larger error of its two natural orders, and SDPA with the bias where it is additive); with
    sinks, SDPA on the problem a sink is (:func:`attnlab.judge.sink_cases.pytorch`: a sink case has no modifier)."""
    if sinks is not None:
        from attnlab.judge import sink_cases

        return run(sink_cases.pytorch, case, seed, q, k, v, dense, grad_out, fresh=fresh, layout=False,
                   sinks=sinks)[0]
    if not case.mod:
        got, _ = run(F.scaled_dot_product_attention, case, seed, q, k, v, dense, grad_out, fresh=fresh, layout=False)
        if case.is_causal and not all(torch.isfinite(t).all() for t in got if t is not None) and (
                torch.isfinite(q).all() and torch.isfinite(k).all() and torch.isfinite(v).all()):
            # PyTorch 2.13's CPU kernel answers NaN for is_causal with a negative scale: the mask spelled out
            spelled = Case(**{**case.__dict__, "is_causal": False})
            tril = torch.ones(case.L, case.S or case.L, dtype=torch.bool, device=q.device).tril()
            m = tril if dense is None else (dense & tril if dense.dtype == torch.bool else
                                            dense.masked_fill(~tril, -math.inf))
            got, _ = run(F.scaled_dot_product_attention, spelled, seed, q, k, v, m, grad_out, fresh=fresh,
                         layout=False)
        return got
    fns = [mod_cases.eager, mod_cases.eager_folded] + ([mod_cases.sdpa_bias] if case.mod in mod_cases.ADDITIVE else [])
    answers = [run(f, case, seed, q, k, v, dense, grad_out, fresh=fresh, layout=False)[0] for f in fns]
    return answers[0] if len(answers) == 1 else answers


def _cross(case: Case, ours64, ref0, floor64: dict) -> rule.Comparison:
    """PyTorch's float64 answer against the oracle, quantity by quantity: the worst, against CROSS_FACTOR
    times the float64 rounding floor. With a score modifier, every one of PyTorch's orders must agree."""
    answers = ours64 if isinstance(ours64, list) else [ours64]
    worst = None
    for ans in answers:
        for name, got, want in zip(sdpa_quantities(case), ans, ref0, strict=False):
            if got is None:
                continue
            err = rule.max_err(got, want)
            allowed = CROSS_FACTOR * (floor64.get(name, 0.0) + rule.floor(want, torch.float64))
            c = rule.Comparison(name, err, rule.mean_err(got, want), 0.0, allowed, bool(err <= allowed))
            if worst is None or c.err / c.allowed > worst.err / worst.allowed:
                worst = c
    return worst or rule.Comparison("out", 0.0, 0.0, 0.0, 1e-300, True)


PRECISE_ALREADY = ("max-subtraction",)  # causes whose own error is no rounding's


def _limit(comps) -> float:
    return next((c.allowed for c in comps if c.quantity == "out"), math.inf)


def _precision(case: Case, out, exp: Expected, comps) -> list[str]:
    """A precision cause whose error model holds the failing output's error (:mod:`attnlab.judge.precision`): the
    output as the function gave it, or with the semantic causes already named taken out."""
    if not isinstance(out, torch.Tensor) or out.shape != exp.ref[0].shape:
        return []
    if exp.keep is not None:  # dropout's draw: the roundings' models have none, a constant in the sum holds there too
        eps = precision.eps_in_sum(exp.fwd, out.detach().double().cpu(), exp.ref[0], _limit(comps))
        return ["eps-in-sum"] if eps is not None else []
    theirs = _theirs_out(exp)
    lse_ok = next((c.allowed for c in comps if c.quantity == "lse" and c.passed), None)  # an lse that passed
    key = precision.cause(DTYPES[case.dtype], exp.fwd, out, exp.ref[0], theirs, _limit(comps), lse_ok)
    return [key] if key else []


def _theirs_out(exp: Expected) -> torch.Tensor:
    """PyTorch's output in the case's dtype (the first of its answers where the case has several)."""
    return exp.theirs[0][0] if isinstance(exp.theirs, list) else exp.theirs[0]


FULL = (torch.float32, torch.float64)


def _under_rounding(case: Case, x, mine: tuple, exp: Expected, comps, learned: tuple) -> list[str]:
    """A full-precision output no wrong semantics fits and no rounding places, read again with a half rounding's room:
    one wrong semantics that it is up to a rounding (a page count off, and the scores in float16), named only where
    a rounding's model, run on that wrong semantics' own forward, places what is left -- both, or nothing."""
    room = max(precision.noise(dt, exp.fwd, exp.ref[0]) for dt in precision.HALF)
    if case.api:
        keys, _ = apis.hints(case, x, mine[0], exp, _limit(comps), learned, slack=room)
    else:
        keys, _ = hypotheses.matches(case, x, mine, exp, comps, learned, slack=room)
    keys = [h.lead for h in map(hint, keys) if not h.supporting and not h.tied and not h.has_variant]
    if len(keys) != 1 or precision.rounding(keys[0]) or H.measured(keys[0]):
        return []
    base, alts = (apis if case.api else hypotheses).questions(case, x, exp, learned)
    out = mine[0].detach().double().cpu()
    theirs = _theirs_out(exp)
    for a in alts:
        if a.change is None or a.key.split(apis.VARIANT)[0] != keys[0]:
            continue
        try:
            alt, f = explain.answer(a.change(dict(base)))
        except (TypeError, ValueError, RuntimeError, IndexError, KeyError):
            continue
        if alt.shape != out.shape or rule.max_err(out, alt) > _limit(comps) + room:
            continue
        # PyTorch's own error, carried onto the wrong question's answer: what a right computation of it would err
        rounded = precision.cause(DTYPES[case.dtype], f, out, alt, alt + (theirs.detach().double().cpu() - exp.ref[0]),
                                  _limit(comps))
        if rounded:
            return [keys[0], rounded]
    return []


def _backward_precision(case: Case, x, mine: tuple, exp: Expected, comps) -> list[str]:
    """The backward's step whose rounding the failing gradients show, the output right
    (:mod:`attnlab.judge.backward_precision`)."""
    names = quantities(case)
    if len(mine) < len(names):
        return []
    mod64, _ = exp.fresh(torch.float64, "cpu")
    mask = x.dense if case.api else x.oracle_mask  # (an API's case: its mask, window and alignment, spelt out)
    args = dict(query=x.q, key=x.k, value=x.v, attn_mask=mask, is_causal=case.is_causal, scale=case.scale,
                enable_gqa=case.gqa, score_mod=mod64)
    grads = backward_precision.GRADS
    return backward_precision.cause(DTYPES[case.dtype], args, x.grad_out,
                                    {n: mine[names.index(n)] for n in grads if n in names},
                                    {n: exp.ref[names.index(n)] for n in grads if n in names}, comps)


def _compare(case: Case, mine: tuple, exp: Expected, backward: bool, factor: float) -> list:
    """Each judged quantity of the grad path against the oracle by the rule (the log-sum-exp by its own)."""
    comps, theirs = [], exp.theirs
    every = quantities(case)  # the order of exp's tuples; mine holds the ones compared, in that order
    for i, qname in enumerate(quantities(case, backward)):
        j = every.index(qname)
        m_, r_, r0 = mine[i] if i < len(mine) else None, exp.ref[j], exp.ref0[j]
        t_ = (max((t[j] for t in theirs), key=lambda x, r=r0: rule.max_err(x, r)) if isinstance(theirs, list)
              else theirs[j])
        if qname == "lse":  # its own rows: either infinity where the oracle's is -inf
            comps.append(lse.compare(m_, t_, r_, case, exp.budget["lse"]))
            continue
        comps.append(rule.compare(qname, m_, t_, r_, DTYPES[case.dtype], exp.budget[qname], theirs_ref=r0,
                                  factor=factor))
    return comps


def _hints(case: Case, x, mine, exp: Expected, comps, problems: list[str], learned: tuple = ()) -> list[str]:
    """The causes a failing row's numbers show: the wrong semantics its output matches, its log-sum-exp's, and a
    precision cause in what is left (the output's, or where the output passes, the log-sum-exp's)."""
    if mine is None:
        return []
    hints, corrected = [], None
    failed = [c.quantity for c in comps if not c.passed]
    if case.api:  # an API's case: its own causes, then its lse's
        if "out" in failed:
            hints, corrected = apis.hints(case, x, mine[0], exp, _limit(comps), learned)
        if "lse" in failed:  # on the rows whose output is right, where the output's own causes are found
            right = None if not hints else rows_err(mine[0].detach().double().cpu(), exp.ref[0]) <= _limit(comps)
            hints = hints + [h for h in lse.hints(mine[-1], exp.ref[-1], exp.fwd, right) if h not in hints]
            hints = sink_causes.lse_explained(hints)
    else:
        hints, corrected = hypotheses.matches(case, x, mine, exp, comps, learned)
    if "dsinks" in failed and "out" not in failed:  # the forward right, the sinks' gradient not: its readings
        hints = hints + [h for h in sink_causes.gradient_hints(case, x, mine, exp, comps) if h not in hints]
    if case.sinks and "out" not in failed and set(failed) & {"dq", "dk", "dv"}:  # the backward's weights, no sink?
        hints = hints + [h for h in sink_causes.backward_hints(case, x, mine, exp, comps) if h not in hints]
    if case.sinks and "out" in failed and not sink_causes.said_of_the_sink(hints):  # held at the case's own limit
        hints = sink_causes.tight_readings(case, x, mine[0], exp, _limit(comps)) + hints
    if sink_causes.overflows(case, mine, exp) and "max-subtraction" not in hints:
        hints = ["max-subtraction", *hints]
    if set(problems) - set(SILENT):
        return hints
    if not any(h in PRECISE_ALREADY for h in hints) and (corrected is not None or not hints) and not (
            case.sinks and sink_causes.said_of_the_sink(hints)):  # (a sink reading's answer: no rounding's left)
        hints = hints + _precision(case, mine[0] if corrected is None else corrected, exp, comps)
    if not hints and "out" in failed and exp.keep is None and not case.sinks and DTYPES[case.dtype] in FULL:
        hints = _under_rounding(case, x, mine, exp, comps, learned)  # two bugs: a semantic one, rounded
    if not hints and failed and set(failed) <= set(backward_precision.GRADS) and exp.keep is None and not case.sinks:
        hints = _backward_precision(case, x, mine, exp, comps)  # the output right: a step of the backward rounded?
    if case.api and not hints and exp.keep is None and failed == ["lse"]:  # the output right, its lse off by a
        allowed = next(c.allowed for c in comps if c.quantity == "lse")  # rounding's size
        key = precision.lse_cause(DTYPES[case.dtype], exp.fwd, mine[-1], allowed, _limit(comps))
        hints = [key] if key else []
    if case.api and exp.keep is None and "lse" in failed and all(precision.rounding(h) for h in hints):
        allowed = next(c.allowed for c in comps if c.quantity == "lse")  # nothing, or a rounding's size: the lse
        hints = hints + apis.lse_hints(case, x, mine[-1], exp, allowed)  # as another question's, its rows a line's
    return hints  # support (where that line is named, a rounding read from the output is not: see diagnose)


def judge(name: str, fn, case: Case, seed: int, x: Inputs, exp: Expected, accepts_masks: bool,
          explain: bool = True, *, backward: bool = True, factor: float = rule.FACTOR, inference: bool = True,
          learned: tuple = ()) -> Row:
    """Run ``fn`` on the case and hold out, dq, dk, dv (and dmask, and a modifier's tensors) to the tolerance rule.
    ``accepts_masks``: ``fn`` is one of attnlab's forms, given mask functions as they are. ``explain``: on a
    failure, look for the wrong semantics it matches (a few float64 runs more). ``backward=False``: the output
    alone. ``factor``: the rule's multiple of PyTorch's error (see :data:`attnlab.judge.rule.FACTOR`).
    ``inference``: the output under ``torch.no_grad()`` and ``torch.inference_mode()`` too, held to the output's
    rule, and the inputs unchanged there (:mod:`attnlab.judge.inference`). ``learned``: what the function's probes
    measured so far, as rules a failing output is held to beside the alternatives
    (:mod:`attnlab.judge.probes.learned`)."""
    if not exp.cross.passed:
        return row(name, case, "error", f"the oracle and PyTorch disagree: max|PyTorch(float64) - oracle| = "
                   f"{exp.cross.err:.3g} on {exp.cross.quantity}, allowed {exp.cross.allowed:.3g} (float64 "
                   "rounding); this case judges nothing until they agree", cross=exp.cross, facts=Facts("oracle"))
    try:
        mine, problems = run(fn, case, seed, x.q, x.k, x.v, x.mask_for(accepts_masks), x.grad_out, case.dropout_p,
                             exp.fresh, backward=backward, inference=inference, sinks=x.sinks)
    except kernels.Unsupported as e:  # an input the form says it does not take: skipped, with the reason
        return row(name, case, "skipped", str(e), cross=exp.cross)
    except Exception as e:  # a function that cannot run a case fails it, with the reason
        exit_ = getattr(e, "info", {}).get("type") == "SystemExit"  # sys.exit() in another process
        return row(name, case, "error", described(e), cross=exp.cross, facts=raised(e, "exit" if exit_ else "raised"))
    except SystemExit as e:  # sys.exit() inside the function: a failure, never the process's exit code
        return row(name, case, "error", f"called sys.exit({e.code!r}) while running the case", cross=exp.cross,
                   facts=Facts("exit"))
    mine, problems = _with_numbers(mine, problems, case, backward, x.q.device)
    comps, modes = [], []
    if mine is not None:
        n = len(quantities(case, backward))
        mine, modes = tuple(mine[:n]), list(mine[n:])  # the grad path's quantities, then the inference path's outputs
        comps = _compare(case, mine, exp, backward, factor)
        theirs = exp.theirs
    if modes and comps:  # the inference path: its outputs against the output's rule (the first comparison)
        t_out = max((t[0] for t in theirs), key=lambda x: rule.max_err(x, exp.ref0[0])) if isinstance(theirs, list) \
            else theirs[0]
        more, said = compare_paths(modes, mine[0], comps[0], t_out, exp.ref[0], exp.ref0[0], DTYPES[case.dtype],
                                   exp.budget["out"], factor, {key for key, _ in problems})
        comps += more
        problems = problems + said
    ok = not problems and bool(comps) and all(c.passed for c in comps)
    hints = _hints(case, x, mine, exp, comps, [key for key, _ in problems], learned) if explain and not ok else []
    measured = [m.to_dict() for m in read(case, x, mine, exp, _limit(comps))] if case.probe and not ok and mine \
        else []
    measured += sink_causes.measured(case, x, mine, exp, comps) if case.sinks and not ok and mine else []
    if explain and not ok and not hints and not problems and not case.probe and comps and not comps[0].passed:
        measured += fitted.scale(case, x, mine, exp, _limit(comps))  # the scale its output was computed at
    measured += [{"kind": f"problem:{key}", "text": text, "map": [], "pattern": key} for key, text in problems
                 if key in apis.MEASURED_PROBLEMS]  # what an API's own check measured (the cache a call left)
    return row(name, case, "pass" if ok else "fail", "; ".join(text for _, text in problems), comparisons=comps,
               hints=hints, cross=exp.cross, facts=Facts(problems=[key for key, _ in problems]), measured=measured)
