"""Check a form of attention against a float64 oracle and PyTorch, forward and backward.

For every case of a grid (causal or not, bool / float / broadcast masks, L != S with both causal
alignments, GQA and MQA, head dims 40 and 59, lengths 1, 97 and 1025, float32 / float64 /
bfloat16, rows with every key masked) the form's output and its gradients dq, dk, dv are compared
with the float64 oracle under the tolerance rule of :mod:`attnlab.lab.oracle`: at most twice
PyTorch's own error on the same inputs, plus a rounding floor.

Any function with PyTorch's SDPA signature can be checked; :func:`load_function` loads one from
``package.module:function`` (the current directory is importable, as under ``python -m``). Its
dropout is checked too: with v = I the output *is* the weights after dropout, which says which
weights the function dropped under a seed; the oracle then applies that keep-mask (see
:func:`probe_keep`). Each case runs under a watchdog, so a function that hangs is a FAIL row.
"""

from __future__ import annotations

import functools
import importlib
import math
import os
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from attnlab import kernels
from attnlab.kernels import dropout
from attnlab.kernels import masks as M
from attnlab.kernels.dtypes import DTYPES as ALL_DTYPES

from . import mod_cases, oracle
from .machine import machine, versions
from .results import Result

DTYPES = {name: ALL_DTYPES[name] for name in ("float32", "float64", "bfloat16")}  # the dtypes verify checks


@dataclass(frozen=True)
class Case:
    """One problem: sizes, masking, dtype. ``mask`` names how the mask is made (see make_inputs)."""

    name: str
    batch: tuple[int, ...] = (2,)
    H: int = 4
    Hkv: int | None = None
    L: int = 64
    S: int | None = None
    E: int = 32
    Ev: int | None = None
    is_causal: bool = False
    mask: str | None = None  # bool | float | broadcast | padding | dead-rows | lower-right | <mask family>
    dtype: str = "float32"
    grad_mask: bool = False  # float mask that requires grad (a learnable bias)
    dropout_p: float = 0.0
    mod: str | None = None  # a score modifier family of attnlab.lab.mod_cases (score_mod=)
    scale: float | None = None  # None: 1/sqrt(E)

    @property
    def work(self) -> int:
        return math.prod(self.batch) * self.H * self.L * (self.S or self.L)

    @property
    def label(self) -> str:
        return f"{self.name} [{self.dtype}]"

    def shrunk(self, max_work: int) -> Case:
        """The same case at smaller lengths (ratio of L to S kept, L=1 kept), for slow forms."""
        if self.work <= max_work:
            return self
        batch = tuple(1 for _ in self.batch)
        S = self.S or self.L
        f = math.sqrt(max_work / (math.prod(batch) * self.H * self.L * S))
        L2 = 1 if self.L == 1 else max(2, int(self.L * f))
        S2 = max(2, int(S * f)) if self.L != 1 else max(2, int(max_work / (math.prod(batch) * self.H)))
        return Case(**{**self.__dict__, "batch": batch, "L": L2, "S": S2 if self.S else None,
                       "name": f"{self.name} (shrunk: L={L2}, S={S2})"})


def default_cases(dtypes: Iterable[str] = ("float32", "float64", "bfloat16"), long: bool = True) -> list[Case]:
    """The verification grid of the foundation: every case in every dtype."""
    base = [
        Case("basic"),
        Case("causal", is_causal=True),
        Case("no batch dims", batch=(), H=2, L=17, E=16),
        Case("two batch dims", batch=(2, 3), H=2, L=9, E=8),
        Case("head dim 40, L=97", batch=(1,), H=2, L=97, E=40, is_causal=True),
        Case("head dim 59, Ev=24", batch=(1,), H=2, L=33, S=47, E=59, Ev=24),
        Case("L=1", batch=(2,), H=2, L=1, S=65, E=32),
        Case("L<S causal upper-left", batch=(1,), H=2, L=33, S=97, E=32, is_causal=True),
        Case("L>S causal upper-left", batch=(1,), H=2, L=97, S=33, E=32, is_causal=True),
        Case("L<S causal lower-right", batch=(1,), H=2, L=33, S=97, E=32, mask="lower-right"),
        Case("L>S lower-right, dead rows", batch=(1,), H=2, L=97, S=33, E=32, mask="lower-right"),
        Case("L=1 decode lower-right", batch=(2,), H=2, L=1, S=65, E=32, mask="lower-right"),
        Case("bool mask", mask="bool"),
        Case("float mask", mask="float"),
        Case("broadcast mask (L, S)", mask="broadcast"),
        Case("padding mask (N,1,1,S)", mask="padding"),
        Case("fully masked rows", mask="dead-rows"),
        Case("GQA 6/2 causal", batch=(1,), H=6, Hkv=2, L=40, E=32, is_causal=True),
        Case("MQA 4/1 bool mask", batch=(1,), H=4, Hkv=1, L=40, E=32, mask="bool"),
    ]
    base += [Case(f"mask fn: {name}", batch=(2,), H=2, L=61, E=32, mask=name) for name in MASK_FAMILIES]
    base += [
        Case("float mask, learnable bias", mask="float", grad_mask=True),
        Case("float bias (H,1,S), learnable", mask="float-heads", grad_mask=True),
        Case("dropout 0.2", dropout_p=0.2),
        Case("dropout 0.5, GQA 6/2 causal", batch=(1,), H=6, Hkv=2, L=40, E=32, is_causal=True, dropout_p=0.5),
    ]
    base += [
        Case("score_mod softcap(2), causal", is_causal=True, mod="softcap"),
        Case("score_mod alibi, GQA 6/2 causal", batch=(1,), H=6, Hkv=2, L=40, E=32, is_causal=True, mod="alibi"),
        Case("score_mod relative_bias, learnable, L<S", batch=(1,), H=2, L=33, S=97, mod="relative_bias"),
        Case("score_mod alibi then softcap, sliding window", batch=(2,), H=2, L=61, mask="sliding_window",
             mod="alibi then softcap"),
        Case("score_mod hides whole rows", mod="hide rows"),
    ]
    if long:
        base.append(Case("L=1025 causal", batch=(1,), H=2, L=1025, E=64, is_causal=True))
    cases = [Case(**{**c.__dict__, "dtype": dt}) for dt in dtypes for c in base]
    if "float64" in dtypes:  # learnable ALiBi slopes: float64 only (see mod_cases.FLOAT64_ONLY)
        cases.append(Case("score_mod alibi slopes, learnable, padding", mask="padding", mod="alibi slopes",
                          dtype="float64"))
    return cases


def make_inputs(case: Case, seed: int):
    """Seeded inputs for a case: q, k, v, the mask argument for attnlab forms, its dense twin, grad_out."""
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[case.dtype]
    Hkv, S, Ev = case.Hkv or case.H, case.S or case.L, case.Ev or case.E
    q = torch.randn(*case.batch, case.H, case.L, case.E, generator=g).to(dt)
    k = torch.randn(*case.batch, Hkv, S, case.E, generator=g).to(dt)
    v = torch.randn(*case.batch, Hkv, S, Ev, generator=g).to(dt)
    grad_out = torch.randn(*case.batch, case.H, case.L, Ev, generator=g).to(dt)
    shape = (*case.batch, case.H, case.L, S)
    mask = None
    if case.mask == "bool":
        mask = torch.rand(shape, generator=g) > 0.3
        mask[..., 0] = True  # keep every row alive: dead rows are their own case
    elif case.mask == "float":
        mask = torch.randn(shape, generator=g).to(dt)
    elif case.mask == "float-heads":
        mask = torch.randn(case.H, 1, S, generator=g).to(dt)
    elif case.mask == "broadcast":
        mask = torch.rand(case.L, S, generator=g) > 0.5
        mask[:, -1] = True
    elif case.mask == "padding":
        n = math.prod(case.batch)
        lengths = torch.randint(1, S + 1, (n,), generator=g)
        mask = (torch.arange(S)[None] < lengths[:, None]).view(*case.batch, 1, 1, S)
    elif case.mask == "dead-rows":
        mask = torch.rand(shape, generator=g) > 0.3
        mask[..., ::5, :] = False  # every fifth query sees no key at all
    elif case.mask == "lower-right":
        mask = M.causal_lower_right()
    elif case.mask is not None:
        mask = mask_family(case.mask, case)
    if isinstance(mask, M.Mask):
        d = mask.dense(math.prod(case.batch), case.H, case.L, S)  # (Nb, Hb, L, S), Nb in {1, N}
        dense = d[0] if d.shape[0] == 1 else d.reshape(*case.batch, *d.shape[1:])
    else:
        dense = mask
    if case.grad_mask and mask is not None:
        mask = mask.clone().requires_grad_(True)
        dense = mask
    return q, k, v, mask, dense, grad_out


MASK_FAMILIES = {  # name -> (S -> mask): every mask function of attnlab.masks, sized for a case
    "causal": lambda S: M.from_spec("causal"),
    "causal_lower_right": lambda S: M.from_spec("causal_lower_right"),
    "sliding_window": lambda S: M.from_spec(f"sliding_window:{max(1, S // 5)}"),
    "prefix_lm": lambda S: M.from_spec(f"prefix_lm:{S // 4}"),
    "document & causal": lambda S: M.from_spec(f"document:{min(4, S)}", S) & M.from_spec("causal"),
    "sliding_window | prefix_lm": lambda S: M.from_spec("sliding_window:4") | M.from_spec("prefix_lm:3"),
}


MASK_KINDS = ("bool", "float", "float-heads", "broadcast", "padding", "dead-rows", "lower-right", *MASK_FAMILIES)


def random_cases(n: int, seed: int, dtypes=("float32", "float64"), max_len: int = 24, max_dim: int = 40,
                 max_batch: int = 3) -> list[Case]:
    """``n`` seeded random cases: 0-2 batch dims, GQA/MQA, L != S, E != Ev, odd sizes, every mask kind,
    causal, a learnable bias, any scale (negative too), dropout, in the given dtypes."""
    g = torch.Generator().manual_seed(seed)

    def pick(seq):
        return seq[int(torch.randint(len(seq), (), generator=g))]

    def num(lo, hi):
        return int(torch.randint(lo, hi + 1, (), generator=g))

    out = []
    for i in range(n):
        Hkv = num(1, 3)
        H = Hkv * pick((1, 1, 2, 3))
        L, S = num(1, max_len), pick((None, num(1, max_len)))
        mask = pick((None, None, *MASK_KINDS))
        causal = mask is None and num(0, 2) == 0
        S = None if mask == "document & causal" else S  # document ids index queries and keys alike
        scale = pick((None, None, None, round(float(torch.randn((), generator=g)), 3)))
        out.append(Case(f"random #{i}", batch=tuple(num(1, max_batch) for _ in range(num(0, 2))), H=H,
                        Hkv=Hkv if Hkv != H else None, L=L, S=S, E=num(1, max_dim), Ev=pick((None, num(1, max_dim))),
                        is_causal=causal, mask=mask, dtype=pick(dtypes),
                        grad_mask=mask in ("float", "float-heads") and num(0, 1) == 1,
                        dropout_p=pick((0.0,) * 7 + (0.3,)), scale=scale))
    return out


def mask_family(name: str, case: Case) -> M.Mask:
    """The mask functions of attnlab.masks, sized for a case."""
    return MASK_FAMILIES[name](case.S or case.L)


@dataclass
class Row(Result):
    form: str
    case: str
    dtype: str
    status: str  # pass | fail | skipped | error
    comparisons: list[oracle.Comparison] = field(default_factory=list)
    detail: str = ""

    @property
    def worst(self) -> oracle.Comparison | None:
        """The comparison closest to (or furthest past) its limit."""
        if not self.comparisons:
            return None
        return max(self.comparisons, key=lambda c: c.err / c.allowed if c.allowed > 0 else math.inf)


@dataclass
class VerifyResult(Result):
    rows: list[Row]
    machine: dict
    versions: dict

    @property
    def passed(self) -> bool:
        return all(r.status in ("pass", "skipped") for r in self.rows)

    def counts(self) -> dict:
        out = {"pass": 0, "fail": 0, "error": 0, "skipped": 0}
        for r in self.rows:
            out[r.status] += 1
        return out


def _call(fn: Callable, q, k, v, mask, case: Case, dropout_p: float = 0.0, score_mod=None):
    """Call a form passing only non-default keywords (user functions may not take them all)."""
    kw = {"dropout_p": dropout_p} if dropout_p > 0 else {}
    if score_mod is not None:
        kw["score_mod"] = score_mod
    if mask is not None:
        kw["attn_mask"] = mask
    if case.is_causal:
        kw["is_causal"] = True
    if case.Hkv is not None and case.Hkv != case.H:
        kw["enable_gqa"] = True
    if case.scale is not None:
        kw["scale"] = case.scale
    return fn(q, k, v, **kw)


def probe_keep(fn: Callable, case: Case, q, k, mask, dense, seed: int) -> tuple[torch.Tensor | None, str]:
    """Which weights ``fn`` drops for this case and seed: (keep (N, H, L, S) bool, "") or (None, why not).

    Called with v = I (Ev = S), attention returns its weights after dropout, Pd = keep * P / (1 - p).
    A weight counts as kept when Pd is over half of P (P from the oracle; whether the survivors were
    scaled is for the comparison that follows). The share dropped must be p within six standard
    deviations of a binomial draw, or the function is not doing dropout.
    """
    S, Hkv, p = case.S or case.L, case.Hkv or case.H, case.dropout_p
    eye = torch.eye(S).to(q.dtype).expand(*case.batch, Hkv, S, S).clone()
    torch.manual_seed(seed)
    with torch.no_grad():
        Pd = _call(fn, q, k, eye, mask, case, p)
    gqa = case.Hkv is not None and case.Hkv != case.H
    P = oracle.reference(q, k, eye, dense, case.is_causal, case.scale, gqa)
    n = math.prod(case.batch)
    P, Pd = P.reshape(n, case.H, case.L, S), Pd.detach().double().reshape(n, case.H, case.L, S)
    keep = (Pd.abs() > 0.5 * P) | (P == 0)
    live = P > 1e-12
    total = int(live.sum())
    dropped = int((live & ~keep).sum())
    sd = math.sqrt(p * (1 - p) / max(1, total))
    if total and abs(dropped / total - p) > 6 * sd + 1.0 / total:
        return None, (f"dropped {dropped / total:.1%} of the weights with dropout_p={p} (expected about {p:.0%}, "
                      f"within {6 * sd:.1%}); a function without dropout can say so with --no-dropout")
    return keep, ""


def check_case(name: str, fn: Callable, case: Case, seed: int, accepts_masks: bool,
               shared_dropout: bool = True) -> Row:
    """Run one case: oracle, PyTorch, the form; compare out, dq, dk, dv (and dmask).

    Dropout cases: the form draws its seed from ``torch.manual_seed(seed)`` and the oracle applies
    the keep-mask that seed gives: attnlab's counter-based dropout for attnlab's forms
    (``shared_dropout``), else the mask :func:`probe_keep` reads from the function itself. A form
    that ignores ``dropout_p``, drops the wrong share, or does not scale the survivors fails.
    PyTorch's dropout uses other random numbers, so its column shows its error on the same inputs
    without dropout, against the oracle without dropout.
    """
    q, k, v, mask, dense, grad_out = make_inputs(case, seed)
    keep = None
    if case.dropout_p > 0 and shared_dropout:
        torch.manual_seed(seed)
        n = math.prod(case.batch)
        keep = dropout.keep_mask(dropout.draw_seed(), case.dropout_p, n, case.H, torch.arange(case.L),
                                 torch.arange(case.S or case.L))
    elif case.dropout_p > 0:
        try:
            keep, why = probe_keep(fn, case, q, k, mask if accepts_masks else dense, dense, seed)
        except kernels.Unsupported as e:  # as below: an input the form says it does not take is skipped
            return Row(name, case.name, case.dtype, "skipped", [], str(e))
        except Exception as e:  # as below: a function that cannot run a case fails it, with the reason
            return Row(name, case.name, case.dtype, "error", [], f"{type(e).__name__}: {e}")
        if keep is None:
            return Row(name, case.name, case.dtype, "fail", [], why)
    expected = _expect(case, seed, (q, k, v, dense, grad_out), keep)
    return _judge(name, fn, case, seed, (q, k, v, mask if accepts_masks else dense, grad_out), expected)


def check_forms(fns: dict[str, Callable], case: Case, seed: int) -> list[Row]:
    """:func:`check_case` for several of attnlab's forms at once, sharing the oracle and PyTorch's run."""
    q, k, v, mask, dense, grad_out = make_inputs(case, seed)
    keep = None
    if case.dropout_p > 0:
        torch.manual_seed(seed)
        keep = dropout.keep_mask(dropout.draw_seed(), case.dropout_p, math.prod(case.batch), case.H,
                                 torch.arange(case.L), torch.arange(case.S or case.L))
    expected = _expect(case, seed, (q, k, v, dense, grad_out), keep)
    return [_judge(name, fn, case, seed, (q, k, v, mask, grad_out), expected) for name, fn in fns.items()]


def _modifier(case: Case, seed: int) -> Callable:
    """The case's score modifier: ``fresh(dtype=None) -> (Mod or None, the tensors it holds)``, each call
    on its own copies of those tensors (leaves whose gradients are compared like dq, dk, dv)."""
    tensors, build = mod_cases.make(case.mod, case.H, seed, DTYPES[case.dtype]) if case.mod else ([], None)

    def fresh(dtype=None):
        if build is None:
            return None, []
        ts = [t.detach().clone().to(dtype or t.dtype).requires_grad_(True) for t in tensors]
        return build(ts), ts

    return fresh


def _run(f: Callable, case: Case, seed: int, q, k, v, m, grad_out, p: float = 0.0, fresh=None):
    """Call ``f`` on fresh leaves after ``torch.manual_seed(seed)``; returns (out, dq, dk, dv[, dmask][, dparams])."""
    qq, kk, vv = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    mm = m.detach().clone().requires_grad_(True) if case.grad_mask and m is not None else m
    mod, ts = fresh() if fresh is not None else (None, [])
    torch.manual_seed(seed)
    out = _call(f, qq, kk, vv, mm, case, p, mod)
    wrt = [qq, kk, vv] + ([mm] if case.grad_mask else []) + ts
    grads = torch.autograd.grad(out, wrt, grad_out, allow_unused=True)
    return (out, *grads)


def _expect(case: Case, seed: int, inputs, keep):
    """What a form is judged by: the oracle (with the keep-mask), the oracle without dropout, the
    rounding floors, PyTorch's answer (without dropout) and the case's score modifier maker."""
    q, k, v, dense, grad_out = inputs
    gqa = case.Hkv is not None and case.Hkv != case.H
    fresh = _modifier(case, seed)
    mod64, _ = fresh(torch.float64)
    ref = oracle.reference(q, k, v, dense, case.is_causal, case.scale, gqa, grad_out=grad_out, keep=keep,
                           dropout_p=case.dropout_p, score_mod=mod64)
    # PyTorch runs without dropout (its dropout draws other random numbers): its error is measured
    # against the oracle without dropout, the form's against the oracle with the form's keep-mask.
    ref0 = ref if keep is None else oracle.reference(q, k, v, dense, case.is_causal, case.scale, gqa,
                                                     grad_out=grad_out, score_mod=mod64)
    budget = oracle.rounding_floor(q, k, v, dense, case.is_causal, case.scale, gqa, grad_out=grad_out, keep=keep,
                                   dropout_p=case.dropout_p, score_mod=mod64)
    theirs = _run(mod_cases.eager if case.mod else F.scaled_dot_product_attention, case, seed, q, k, v, dense,
                  grad_out, fresh=fresh)
    if case.mod:  # PyTorch's error: the larger of its natural orders, per quantity (see mod_cases)
        others = [_run(mod_cases.eager_folded, case, seed, q, k, v, dense, grad_out, fresh=fresh)]
        if case.mod in mod_cases.ADDITIVE:
            others.append(_run(mod_cases.sdpa_bias, case, seed, q, k, v, dense, grad_out, fresh=fresh))
        theirs = [max(ts, key=lambda x, r=r: oracle.max_err(x, r))
                  for *ts, r in zip(theirs, *others, ref, strict=True)]
    return ref, ref0, budget, theirs, fresh


def _judge(name: str, fn: Callable, case: Case, seed: int, inputs, expected) -> Row:
    """Run ``fn`` on the case and hold out, dq, dk, dv (and dmask, and a modifier's tensors) to the tolerance rule."""
    ref, ref0, budget, theirs, fresh = expected
    q, k, v, m, grad_out = inputs
    try:
        mine = _run(fn, case, seed, q, k, v, m, grad_out, case.dropout_p, fresh=fresh)
    except kernels.Unsupported as e:  # an input the form says it does not take: skipped, with the reason
        return Row(name, case.name, case.dtype, "skipped", [], str(e))
    except Exception as e:  # a form that cannot run a case fails it, with the reason
        return Row(name, case.name, case.dtype, "error", [], f"{type(e).__name__}: {e}")
    quantities = ["out", "dq", "dk", "dv"] + (["dmask"] if case.grad_mask else [])
    quantities += mod_cases.PARAM_NAMES.get(case.mod, [])
    comps = []
    for qname, m_, t_, r_, r0 in zip(quantities, mine, theirs, ref, ref0, strict=False):
        if m_ is None:
            comps.append(oracle.Comparison(qname, math.inf, math.inf, 0.0, 0.0, False))
            continue
        comps.append(oracle.compare(qname, m_, t_, r_, DTYPES[case.dtype], budget.get(qname, 0.0),
                                    theirs_ref=r0))
    ok = all(c.passed for c in comps)
    return Row(name, case.name, case.dtype, "pass" if ok else "fail", comps)


def case_limit(case: Case, timeout: float) -> float:
    """Seconds one case may take: ``timeout`` for the basic case's size (N*H*L*S = 32768), more in proportion."""
    return timeout * max(1.0, case.work / Case("basic").work)


def _watched(run: Callable[[], Row], limit: float) -> Row | None:
    """``run()`` in a daemon thread; its Row, or None when it has not returned after ``limit`` seconds.

    A hung Python call cannot be stopped from outside, so the thread is left behind (a daemon: it
    does not keep the process alive) and the caller runs nothing more of that function.
    """
    box: dict = {}

    def work():
        try:
            box["row"] = run()
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    t = threading.Thread(target=work, name="attnlab-verify-case", daemon=True)
    t.start()
    t.join(limit)
    if t.is_alive():
        return None
    if "error" in box:
        raise box["error"]
    return box["row"]


def verify(targets: dict[str, Callable], cases: list[Case] | None = None, *, seed: int = 0,
           progress: Callable[[str], None] | None = None, check_dropout: bool = True,
           timeout: float | None = 10.0) -> VerifyResult:
    """Check each named function over the cases. ``targets`` maps a label to a function.

    ``check_dropout=False`` skips the dropout cases (for functions without dropout). ``timeout``:
    seconds per case at the basic case's size (:func:`case_limit`) for functions that are not
    attnlab's registered forms; a case past it is a FAIL row and the function's remaining cases are
    not run. ``None``: no watchdog.
    """
    cases = default_cases() if cases is None else cases
    registered = kernels.forms(device=None)
    rows: dict[str, list[Row]] = {name: [] for name in targets}
    hung: dict[str, str | None] = {name: None for name in targets}
    for i, case in enumerate(cases):
        shared: dict[Case, dict[str, Callable]] = {}  # attnlab's forms on one case share the oracle's work
        for name, fn in targets.items():
            form = registered.get(name)
            why = _skip_reason(fn, form, case, check_dropout, hung[name])
            if why is not None:
                rows[name].append(Row(name, case.name, case.dtype, "skipped", [], why))
                continue
            c = case.shrunk(form.max_work) if form is not None and form.max_work is not None else case
            if progress:
                progress(f"{name}: {c.label}")
            is_ours = form is not None and form.fn is fn
            if is_ours and form.shared_dropout:
                shared.setdefault(c, {})[name] = fn
                continue
            run = functools.partial(check_case, name, fn, c, seed + i, is_ours, False)
            if timeout is None or form is not None:  # attnlab's own forms run without a watchdog
                rows[name].append(run())
                continue
            row, timed_out = _watched_row(run, name, c, timeout)
            if timed_out:
                hung[name] = f"case {c.label!r}"
            rows[name].append(row)
        for c, fns in shared.items():
            for row in check_forms(fns, c, seed + i):
                rows[row.form].append(row)
    rows = [row for name in targets for row in rows[name]]
    return VerifyResult(rows, machine(), versions())


def _skip_reason(fn: Callable, form, case: Case, check_dropout: bool, hung: str | None) -> str | None:
    """Why ``fn`` (registered as ``form``, or None for the user's own) does not run ``case``; None: it runs it."""
    if case.dropout_p > 0 and not check_dropout:
        return "dropout not checked (--no-dropout)"
    if hung is not None:
        return f"not run: {hung} timed out"
    if case.mod and not (form.score_mod if form is not None else mod_cases.takes_score_mod(fn)):
        return "takes no score_mod= keyword"
    return None


def _watched_row(run: Callable[[], Row], name: str, c: Case, timeout: float) -> tuple[Row, bool]:
    """``run()`` under the watchdog: (its row, False), or (a FAIL row, True) when it gave no answer within the
    case's limit."""
    limit = case_limit(c, timeout)
    row = _watched(run, limit)
    if row is not None:
        return row, False
    return Row(name, c.name, c.dtype, "fail", [], f"timed out: no answer after {limit:.1f} s (--timeout "
               f"{timeout:g} s at the basic case's size); the function's remaining cases were not run"), True


class LoadError(ValueError):
    """A ``--impl`` value that names nothing usable."""


def load_function(spec: str) -> tuple[str, Callable]:
    """``package.module:function`` -> (spec, function); a registered form name -> (name, form)."""
    if ":" not in spec:
        try:
            form = kernels.get(spec)
        except ValueError as e:
            raise LoadError(f"{e}; or give your own function as package.module:function") from None
        if form.distributed:
            raise LoadError(f"form {spec!r} runs only across the ranks of a torch.distributed process group; "
                            f"check it with `attnlab ring`, which holds it to the same tolerance rule")
        why = form.why_not("cpu")  # the oracle's cases are CPU tensors
        if why is not None:
            raise LoadError(f"form {spec!r} cannot be checked here: {why}")
        return spec, form.fn
    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise LoadError(f"--impl {spec!r} must look like package.module:function")
    if os.getcwd() not in sys.path and "" not in sys.path:  # as `python -m` does: the current directory first
        sys.path.insert(0, os.getcwd())
    try:
        mod = importlib.import_module(mod_name)
    except Exception as e:
        raise LoadError(f"cannot import module {mod_name!r} for --impl {spec!r}: {type(e).__name__}: {e}") from None
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise LoadError(f"module {mod_name!r} has no attribute {attr!r} (from --impl {spec!r})")
        obj = getattr(obj, part)
    if not callable(obj):
        raise LoadError(f"--impl {spec!r} names a {type(obj).__name__}, not a function")
    return spec, obj
