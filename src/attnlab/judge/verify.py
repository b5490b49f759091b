"""Check forms of attention -- attnlab's or anyone's -- against a float64 oracle and PyTorch, forward and backward.

For every case of the grid (:mod:`attnlab.judge.cases`) the function's output and its gradients dq,
dk, dv are compared with the float64 oracle (:mod:`attnlab.judge.oracle`) under the tolerance rule
(:mod:`attnlab.judge.rule`): at most twice PyTorch's own error on the same inputs, on the same
device and in the same dtype, plus a rounding floor. What each case is judged by is computed once
and shared by every function checked on it (:mod:`attnlab.judge.judge`).

Any function with PyTorch's SDPA signature can be checked. Its dropout is checked too: with v = columns
of the identity the output *is* the weights after dropout, which says which weights the function dropped
under a seed; the oracle then applies that keep-mask (see :func:`probe_keep`). A function that refuses an
argument by raising :class:`attnlab.Unsupported` has that case SKIPPED with its message; one without a
backward is judged on its forward (``backward=False``). Each case of a function that
is not attnlab's runs under a watchdog (:mod:`attnlab.judge.apart.watchdog`), so one that hangs is a FAIL
row. :func:`attnlab.judge.diagnose.diagnose` reads a result's failures as likely causes.
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from attnlab import kernels
from attnlab.judge import apis, confirm, judge, mod_cases, oracle, sink_cases, sink_causes
from attnlab.judge.apart.remote import QUIET_SECONDS, Remote, described
from attnlab.judge.apart.watchdog import case_limit, watched
from attnlab.judge.cases import (  # noqa: F401 -- the grid's names, read through verify by callers
    DTYPES,
    MASK_FAMILIES,
    MASK_KINDS,
    Case,
    default_cases,
    default_dtypes,
    make_inputs,
    random_cases,
)
from attnlab.judge.diagnose import Diagnosis, diagnose
from attnlab.judge.facts import Facts, raised
from attnlab.judge.judge import Inputs, Row
from attnlab.judge.probes import design
from attnlab.judge.probes.learned import key as measured_key
from attnlab.kernels import dropout
from attnlab.results import Result
from attnlab.results.host import machine, versions

EXPLAINED = 400  # failing rows per function held against wrong semantics (hypotheses): every row of the grid
JUDGE_THREADS = 1  # torch's threads while the judge works (see one_thread), in its process and the judged one's


@dataclass
class VerifyResult(Result):
    rows: list[Row]
    machine: dict
    versions: dict
    device: str = "cpu"
    diagnoses: dict[str, list[Diagnosis]] = field(default_factory=dict)  # per function that failed
    factor: float = judge.rule.FACTOR  # the rule's multiple of PyTorch's error the rows were held to
    backward: bool = True  # the gradients were judged (False: --forward-only)

    @classmethod
    def of(cls, rows: list[Row], device="cpu", factor: float = judge.rule.FACTOR,
           backward: bool = True) -> VerifyResult:
        """The result of these rows, with the machine, the versions and each failing function's diagnoses."""
        r = cls(rows, machine(), versions(), str(torch.device(device)), factor=factor, backward=backward)
        r.diagnoses = {f: diagnose(r, f) for f in dict.fromkeys(x.form for x in rows)
                       if any(x.form == f and x.status in ("fail", "error") for x in rows)}
        return r

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(r.status in ("pass", "skipped") for r in self.rows) and any(
            r.status == "pass" for r in self.rows) and not self.vacuous()

    def vacuous(self) -> list[judge.rule.Comparison]:
        """The quantities a factor above the rule's 2 left unjudged: their limit exceeds the answer's own size."""
        return [c for r in self.rows for c in r.comparisons if c.vacuous]

    def judging_factor(self) -> float:
        """The largest factor at which every quantity of these rows still judges something."""
        return min((c.judging_factor(self.factor) for r in self.rows for c in r.comparisons), default=math.inf)

    def counts(self) -> dict:
        out = {"pass": 0, "fail": 0, "error": 0, "skipped": 0}
        for r in self.rows:
            out[r.status] += 1
        return out

    def ratios(self, form: str) -> dict[str, dict]:
        """Per dtype, ``form``'s error as a multiple of PyTorch's on the same cases: each judged case's worst
        quantity's ratio err / PyTorch's err, their median and their worst (with its quantity and case). The probes
        and the cases where PyTorch's own error is zero (nothing to be a multiple of) are left out."""
        return ratios([r for r in self.rows if r.form == form])

    def worst_cross(self) -> judge.rule.Comparison | None:
        """The largest float64 disagreement between PyTorch and the oracle over the cases (relative to its limit)."""
        crosses = [r.cross for r in self.rows if r.cross is not None]
        return max(crosses, key=lambda c: c.err / c.allowed if c.allowed > 0 else math.inf, default=None)


def ratios(rows: list[Row]) -> dict[str, dict]:
    """:meth:`VerifyResult.ratios` of these rows."""
    per: dict[str, list[tuple[float, str, str]]] = {}
    for r in rows:
        if r.status not in ("pass", "fail") or "probe" in r.tags:
            continue
        worst = None
        for c in r.comparisons:
            if c.quantity == "lse" or not (math.isfinite(c.torch_err) and c.torch_err > 0):
                continue  # (the lse has PyTorch's logsumexp beside it, not its kernel: not a multiple of its error)
            x = c.err / c.torch_err if math.isfinite(c.err) else math.inf
            if worst is None or x > worst[0]:
                worst = (x, c.quantity, r.case)
        if worst is not None:
            per.setdefault(r.dtype, []).append(worst)
    out = {}
    for dtype, xs in per.items():
        xs.sort()
        top = xs[-1]
        out[dtype] = {"median": xs[len(xs) // 2][0], "worst": top[0], "quantity": top[1], "case": top[2],
                      "cases": len(xs)}
    return out


def held_to_ratio(rows: list[Row], max_ratio: float, factor: float) -> list[Row]:
    """The rows with each quantity's limit lowered to ``max_ratio`` times PyTorch's error (never below twice the error
    of storing the answer in the dtype): a passing row past it fails, said as such (``Facts("ratio")``)."""
    out = []
    for r in rows:
        if r.status != "pass":
            out.append(r)
            continue
        comps, over = [], []
        stored = torch.finfo(DTYPES[r.dtype]).eps  # twice storing the answer in the dtype: the least any error is
        for c in r.comparisons:
            floor = stored * c.ref_max
            limit = min(c.allowed, max(max_ratio * c.torch_err, floor)) if math.isfinite(c.torch_err) else c.allowed
            if c.passed and c.err > limit:
                over.append(f"{c.quantity}: {c.err / c.torch_err:.3g}x PyTorch's error")
                c = replace(c, allowed=limit, passed=False)
            comps.append(c)
        out.append(replace(r, status="fail", comparisons=comps, facts=Facts("ratio"),
                           detail=f"over --max-ratio {max_ratio:g}: " + "; ".join(over)) if over else r)
    return out


def inputs(case: Case, seed: int, device="cpu") -> Inputs:
    """A case's tensors; a probe's designed ones (:mod:`attnlab.judge.probes`) in place of the drawn ones; a sink
    case's sinks (:func:`attnlab.judge.sink_cases.values`), placed against the scores of the q and k given."""
    drawn = apis.inputs(case, seed, device) if case.api else make_inputs(case, seed, device)
    q, k, v, mask, dense, grad_out = design.designed(case, *drawn) if case.probe else drawn
    sinks = sink_cases.values(case, q, k, seed)
    return Inputs(q, k, v, mask, dense, grad_out, None if sinks is None else sinks.to(q.device, q.dtype))


def shared_keep(case: Case, seed: int, device="cpu") -> torch.Tensor | None:
    """The keep-mask attnlab's counter-based dropout draws after ``torch.manual_seed(seed)`` (None: no dropout)."""
    if case.dropout_p <= 0:
        return None
    torch.manual_seed(seed)
    return dropout.keep_mask(dropout.draw_seed(), case.dropout_p, math.prod(case.batch), case.H,
                             torch.arange(case.L), torch.arange(case.S or case.L), device).cpu()


def probe_keep(fn: Callable, case: Case, x: Inputs, seed: int, accepts_masks: bool) -> tuple[torch.Tensor | None, str]:
    """Which weights ``fn`` drops for this case and seed: (keep (N, H, L, S) bool, "") or (None, why not).

    Called with v = Ev columns of the identity, attention returns those columns of its weights after dropout,
    Pd = keep * P / (1 - p); ceil(S / Ev) calls, each after the same ``torch.manual_seed(seed)`` on inputs of the
    case's own shapes, read them all. A weight counts as dropped where the function's is exactly 0 and the oracle's
    is not (the scale of the rest is for the comparison that follows), so a function whose weights are wrong for
    another reason (no scale, the wrong key heads) still has its keep-mask read, and that bug is named on the
    dropout cases too. The share dropped must be p within six standard deviations of a binomial draw, or the
    function is not doing dropout.
    """
    S, Hkv, Ev, p = case.S or case.L, case.Hkv or case.H, case.Ev or case.E, case.dropout_p
    eye = torch.eye(S, math.ceil(S / Ev) * Ev, device=x.q.device).to(x.q.dtype)  # (S, S rounded up to Ev)
    n = math.prod(case.batch)
    cols = []
    for j in range(0, S, Ev):
        v = eye[:, j:j + Ev].expand(*case.batch, Hkv, S, Ev).clone()
        torch.manual_seed(seed)
        with torch.no_grad():
            cols.append(judge.call(fn, x.q, x.k, v, x.mask_for(accepts_masks), case, p).detach().double().cpu()
                        .reshape(n, case.H, case.L, Ev))
    Pd = torch.cat(cols, dim=-1)[..., :S]
    P = oracle.answer(x.q, x.k, x.v, x.oracle_mask, case.is_causal, case.scale, case.gqa)[1].P
    keep = (Pd != 0) | (P == 0)  # a dropped weight is exactly 0, whatever else the function gets wrong
    live = P > 1e-5  # weights no dtype's rounding makes 0
    total = int(live.sum())
    dropped = int((live & ~keep).sum())
    sd = math.sqrt(p * (1 - p) / max(1, total))
    if total and abs(dropped / total - p) > 6 * sd + 1.0 / total:
        return None, (f"dropped {dropped / total:.1%} of the weights with dropout_p={p} (expected about {p:.0%}, "
                      f"within {6 * sd:.1%}); a function without dropout can say so with --no-dropout")
    return keep, ""


def check_case(name: str, fn: Callable, case: Case, seed: int, accepts_masks: bool,
               shared_dropout: bool = True, device="cpu", *, backward: bool = True,
               factor: float = judge.rule.FACTOR, explain: bool = True, learned: tuple = ()) -> Row:
    """Run one case on one function: oracle, PyTorch, the function; compare out, dq, dk, dv (and dmask).

    Dropout cases: the function draws its seed from ``torch.manual_seed(seed)`` and the oracle applies
    the keep-mask that seed gives: attnlab's counter-based dropout for attnlab's forms
    (``shared_dropout``), else the mask :func:`probe_keep` reads from the function itself. A function
    that ignores ``dropout_p``, drops the wrong share, or does not scale the survivors fails.
    PyTorch's dropout uses other random numbers, so its column shows its error on the same inputs
    without dropout, against the oracle without dropout. ``backward``, ``factor``: as in :func:`verify`;
    ``explain``: as in :func:`attnlab.judge.judge.judge`.
    """
    x = inputs(case, seed, device)
    keep = shared_keep(case, seed, device) if shared_dropout else None
    if case.dropout_p > 0 and not shared_dropout:
        try:
            keep, why = probe_keep(fn, case, x, seed, accepts_masks)
        except kernels.Unsupported as e:  # as in judge: an input the form says it does not take is skipped
            return judge.row(name, case, "skipped", str(e))
        except Exception as e:  # as in judge: a function that cannot run a case fails it, with the reason
            exit_ = getattr(e, "info", {}).get("type") == "SystemExit"
            return judge.row(name, case, "error", described(e), facts=raised(e, "exit" if exit_ else "raised"))
        except SystemExit as e:
            return judge.row(name, case, "error", f"called sys.exit({e.code!r}) while running the case",
                             facts=Facts("exit"))
        if keep is None:
            return judge.row(name, case, "fail", why, facts=Facts("probe"))
    return judge.judge(name, fn, case, seed, x, judge.expect(case, seed, x, keep), accepts_masks, explain,
                       backward=backward, factor=factor, learned=learned)


def check_forms(fns: dict[str, Callable], case: Case, seed: int, device="cpu") -> list[Row]:
    """:func:`check_case` for several of attnlab's forms at once, sharing the oracle and PyTorch's run."""
    x = inputs(case, seed, device)
    exp = judge.expect(case, seed, x, shared_keep(case, seed, device))
    return [judge.judge(name, fn, case, seed, x, exp, True) for name, fn in fns.items()]


def verify(targets: dict[str, Callable], cases: list[Case] | None = None, *, seed: int = 0,
           progress: Callable[[str], None] | None = None, check_dropout: bool = True,
           timeout: float | None = 10.0, device="cpu", report: Callable[[Row], None] | None = None,
           backward: bool = True, factor: float = judge.rule.FACTOR, max_ratio: float | None = None
           ) -> VerifyResult:
    """Check each named function over the cases on ``device``. ``targets`` maps a label to a function.

    ``check_dropout=False`` skips the dropout cases (for functions without dropout). ``timeout``:
    seconds per case at the basic case's size (:func:`attnlab.judge.apart.watchdog.case_limit`) for functions
    that are not attnlab's registered forms; a case past it is a FAIL row and the function's remaining
    cases are not run. ``None``: no watchdog. Inputs are made on ``device`` (any torch device), the
    oracle runs on the CPU in float64, PyTorch on ``device`` in each case's dtype. ``report`` hears each
    row as soon as it is judged. ``backward=False`` judges the output alone, for a function without a backward
    (called on inputs that do not require grad). ``factor``: the rule's multiple of PyTorch's error (2 unless a
    kernel is knowingly less precise; the result records it). ``max_ratio``: a case whose error is more than this
    many times PyTorch's own fails, though the rule passes it (:func:`held_to_ratio`).
    """
    with one_thread():
        return _verify(targets, default_cases() if cases is None else cases, seed, progress, check_dropout, timeout,
                       device, report, backward, factor, max_ratio)


@contextlib.contextmanager
def one_thread():
    """torch on one thread while the judge works, as before it afterwards. A case's tensors are small: with two
    threads on two cores, each small operation waits for the other thread -- for as long as another process holds
    the core it needs, and the judged function runs in another process (at load 15, the grid's oracles took 30 s of
    CPU time with two threads and 2 s with one)."""
    before = torch.get_num_threads()
    if before != JUDGE_THREADS:
        torch.set_num_threads(JUDGE_THREADS)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def _verify(targets, cases, seed, progress, check_dropout, timeout, device, report, backward, factor,
            max_ratio=None) -> VerifyResult:
    registered = kernels.forms(device=None)
    rows: dict[str, list[Row]] = {name: [] for name in targets}
    hung: dict[str, str | None] = dict.fromkeys(targets)  # a function whose case timed out runs no more
    explained = dict.fromkeys(targets, 0)  # failures read for wrong semantics (diagnose needs a few, not all)
    learned: dict[str, dict] = {name: {} for name in targets}  # what each function's probes measured, as rules
    twins = _twins(cases, device)  # float32 cases whose float64 twin takes their oracle
    sinkless = {name: not _takes_sinks(fn, registered.get(name)) for name, fn in targets.items()}
    only_sinks = all(c.sinks for c in cases)  # nothing but sink cases: a function without them is told why
    for case in cases:
        shared: dict[Case, tuple] = {}  # one oracle and PyTorch run per case (and per size, for slow forms)
        for name, fn in targets.items():
            form = registered.get(name)
            if case.sinks and sinkless[name] and not only_sinks:  # not its cases: no row (see _takes_sinks)
                continue
            why = _skip_reason(fn, form, case, check_dropout, hung[name])
            if why is not None:
                row = judge.row(name, case, "skipped", why)
            else:
                c = case.shrunk(form.max_work) if form is not None and form.max_work is not None else case
                if progress:
                    progress(f"{name}: {c.label}")
                row = _run_case(name, fn, form, c, case.seed(seed), shared, device, explained[name] < EXPLAINED,
                                timeout, {"backward": backward, "factor": factor,
                                          "learned": tuple(learned[name].values())}, twins)
                learned[name].update({measured_key(m): m for m in row.measured if m.get("rule")})
                if row.facts.kind in ("timeout", "busy"):
                    hung[name] = f"not run: case {c.label!r} timed out"
                elif isinstance(fn, Remote) and fn.lost is not None:
                    hung[name] = f"not run: the process ended during case {c.label!r}"
                explained[name] += row.status == "fail"
            rows[name].append(row)
            if report:
                report(row)
    by_name = {(c.name, c.dtype): c for c in cases}
    if max_ratio is not None:
        rows = {name: held_to_ratio(rs, max_ratio, factor) for name, rs in rows.items()}
    checked = [r for name in targets for r in _checked(rows[name], by_name, seed, device)]
    return VerifyResult.of(checked, device, factor, backward)


def _checked(rows: list[Row], cases: dict, seed: int, device) -> list[Row]:
    """A function's rows with the causes its passing cases refute taken out of its failing rows' hints (each such
    row keeps them in ``refuted``): :mod:`attnlab.judge.confirm`."""
    keys = confirm.named(rows)
    if not keys:
        return rows
    passing = [(cases[(r.case, r.dtype)], next((c.allowed for c in r.comparisons if c.quantity == "out"), math.nan))
               for r in rows if r.status == "pass" and (r.case, r.dtype) in cases]
    def at(c, s):
        return inputs(c, s, device)

    gone = confirm.refuted(set(keys), passing, seed, at, keys, confirm.support(rows))
    failing = [(cases[(r.case, r.dtype)], next((c.allowed for c in r.comparisons if c.quantity == "out"), math.nan),
                [frozenset(h.keys) for h in r.hints])
               for r in rows if r.status == "fail" and (r.case, r.dtype) in cases and r.dtype == _first_dtype(rows)]
    gone |= confirm.uncovered({k: v for k, v in keys.items() if k not in gone and not precision_key(k)}, failing, seed,
                              at)
    gone |= sink_causes.refuted(set(keys) - gone, rows, cases, seed, at)  # the lse's and the sinks' gradient's
    gone |= confirm.blurred(rows) & set(keys)  # fitting only where a half dtype's wide rule lets it
    return [confirm.without(r, gone) for r in rows] if gone else rows


def _first_dtype(rows: list[Row]) -> str:
    """The full-precision dtype the semantics are read in (float32 where it ran): one dtype's failing cases are
    enough to say which readings fit them, and half precision's rounding blurs them."""
    dts = {r.dtype for r in rows}
    return next((d for d in ("float32", "float64", "bfloat16", "float16") if d in dts), "float32")


def precision_key(k: str) -> bool:
    from attnlab.judge.precision import rounding

    return rounding(k)


def _twins(cases: list[Case], device) -> dict:
    """{float32 case: None} for each float32 case on the CPU whose float64 twin is among ``cases`` (no dropout, no
    score modifier, not an API's case): the twin is judged by the float32 case's oracle
    (:func:`attnlab.judge.judge.in_float64`)."""
    if torch.device(device).type != "cpu":
        return {}
    wanted = {replace(c, dtype="float32") for c in cases if c.dtype == "float64" and c.mod is None and not c.dropout_p
              and not c.api}
    return {c: None for c in cases if c in wanted}


def _expected(c: Case, seed: int, device, twins: dict) -> tuple:
    """(inputs, what the case is judged by), from the float32 twin where there is one (see :func:`_twins`)."""
    x = inputs(c, seed, device)
    f32 = replace(c, dtype="float32")
    if c.dtype == "float64" and twins.get(f32) is not None:
        return x, judge.in_float64(twins.pop(f32), c, seed)
    exp = judge.expect(c, seed, x, shared_keep(c, seed, device))
    if c in twins:
        twins[c] = exp
    return x, exp


def _run_case(name: str, fn: Callable, form, c: Case, seed: int, shared: dict, device, explain: bool,
              timeout: float | None, held: dict, twins: dict) -> Row:
    """One function on one case: the shared oracle where it can be (not a function's own dropout), under the
    watchdog when it is not one of attnlab's forms."""
    ours = form is not None and form.fn is fn
    if c.dropout_p > 0 and not (ours and form.shared_dropout):
        run = functools.partial(check_case, name, fn, c, seed, ours, False, device, **held)
    else:
        if c not in shared:
            shared[c] = _expected(c, seed, device, twins)
        run = functools.partial(judge.judge, name, fn, c, seed, *shared[c], ours, explain, **held)
    if isinstance(fn, Remote):  # a process of its own: killed when it is past the limit
        fn.deadline = None if timeout is None else case_limit(c, timeout)
        fn.basis = "" if timeout is None else limit_basis(c, timeout)
        row = run()
        if fn.busy:  # held back by the machine, twice (Remote.request asks again once): the machine's, not a cause
            return judge.row(name, c, "fail", busy_words(fn.spent), facts=Facts("busy"))
        if fn.timed_out:
            return judge.row(name, c, "fail", timed_out(fn.deadline or QUIET_SECONDS, timeout or QUIET_SECONDS,
                                                        fn.spent), facts=Facts("timeout"))
        if fn.lost is not None:
            return judge.row(name, c, "error", f"{fn.lost} while running this case: the function, or something it "
                             "called, ended it (sys.exit, os._exit, a kill, a crash, out of memory)",
                             facts=Facts("lost"))
        return row
    if timeout is None or form is not None:  # attnlab's own forms run without a watchdog
        return run()
    limit = case_limit(c, timeout)
    row = watched(run, limit)
    return row if row is not None else judge.row(name, c, "fail", timed_out(limit, timeout), facts=Facts("timeout"))


def timed_out(limit: float, timeout: float, spent=None) -> str:
    """A case's row when the function ran out of its own time (``spent``: how, where its process was timed), twice."""
    how = f", twice ({spent.words()})" if spent is not None else ""
    return (f"timed out: no answer after {limit:.1f} s (--timeout {timeout:g} s at the basic case's size){how}; the "
            "function's remaining cases were not run")


def limit_basis(c: Case, timeout: float) -> str:
    """How a case's limit (:func:`case_limit`) was set, in words said with it."""
    times = case_limit(c, timeout) / timeout
    return f"{timeout:g} s at the basic case's size" + (f", {times:.3g} times that for this case's work" if times > 1
                                                        else "")


def busy_words(spent) -> str:
    """A case's row when the machine held the function back past its time, twice: the load, and what the function
    itself had -- never a cause in the function."""
    return (f"not decided: {spent.words()}, twice -- run it again on a quieter machine, or allow more time "
            "(lab check --max-seconds N, verify --timeout N); the function's remaining cases were not run")


def _skip_reason(fn: Callable, form, case: Case, check_dropout: bool, hung: str | None) -> str | None:
    """Why ``fn`` (registered as ``form``, or None for the user's own) does not run ``case``; None: it runs it."""
    if case.dropout_p > 0 and not check_dropout:
        return "dropout not checked (--no-dropout)"
    if hung is not None:
        return hung
    if case.api and (why := apis.skip_reason(case)):  # a case the API cannot express
        return why
    if isinstance(fn, Remote) and fn.lost is not None:
        return f"not run: {fn.lost}"
    takes = form.score_mod if form is not None else (fn.takes_score_mod if isinstance(fn, Remote) else
                                                      mod_cases.takes_score_mod(fn))
    if case.mod and not takes and not case.api:  # (an API's modifiers are its own arguments)
        return "takes no score_mod= keyword"
    if case.sinks and not _takes_sinks(fn, form):
        return "takes no sinks= keyword (learnable_sink= in FlashAttention's APIs)"
    return None


def _takes_sinks(fn: Callable, form) -> bool:
    """Whether ``fn`` is given the sink cases: one of attnlab's forms that takes sinks, or a function whose signature
    names the keyword (:func:`attnlab.judge.sink_cases.takes_sinks`, read in its own process for a :class:`Remote`).
    A function without it gets no rows for them where it has other cases (the grid is the one it always had); run on
    sink cases alone, each is a skipped row that says why."""
    if form is not None:
        return bool(form.sinks)
    return fn.takes_sinks if isinstance(fn, Remote) else sink_cases.takes_sinks(fn)


class _Callable(types.ModuleType):
    """This module, callable as its :func:`verify`: ``attnlab.judge.verify`` is this module (a package's attribute
    is its submodule once that is imported) and, at the judge's front door, the function -- ``from attnlab.judge
    import verify`` then ``verify(targets, cases)`` -- whichever was imported first. The call reads ``verify``
    here each time, so a patched ``verify.verify`` is the one called."""

    def __call__(self, *args, **kwargs):
        return verify(*args, **kwargs)


sys.modules[__name__].__class__ = _Callable
