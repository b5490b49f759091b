"""Check forms of attention -- attnlab's or anyone's -- against a float64 oracle and PyTorch, forward and backward.

For every case of the grid (:mod:`attnlab.lab.check.cases`) the function's output and its gradients dq,
dk, dv are compared with the float64 oracle (:mod:`attnlab.lab.check.oracle`) under the tolerance rule
(:mod:`attnlab.lab.check.rule`): at most twice PyTorch's own error on the same inputs, on the same
device and in the same dtype, plus a rounding floor. What each case is judged by is computed once
and shared by every function checked on it (:mod:`attnlab.lab.check.judge`).

Any function with PyTorch's SDPA signature can be checked. Its dropout is checked too: with v = I
the output *is* the weights after dropout, which says which weights the function dropped under a
seed; the oracle then applies that keep-mask (see :func:`probe_keep`). Each case of a function that
is not attnlab's runs under a watchdog (:mod:`attnlab.lab.check.watchdog`), so one that hangs is a FAIL
row. :func:`attnlab.lab.check.diagnose.diagnose` reads a result's failures as likely causes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from attnlab import kernels
from attnlab.kernels import dropout
from attnlab.lab.check import judge, mod_cases, oracle
from attnlab.lab.check.cases import (  # noqa: F401 -- the grid's names, read through verify by callers
    DTYPES,
    MASK_FAMILIES,
    MASK_KINDS,
    Case,
    default_cases,
    make_inputs,
    random_cases,
)
from attnlab.lab.check.diagnose import Diagnosis, diagnose
from attnlab.lab.check.facts import Facts, raised
from attnlab.lab.check.judge import Inputs, Row
from attnlab.lab.check.remote import QUIET_SECONDS, Remote, described
from attnlab.lab.check.watchdog import case_limit, watched
from attnlab.lab.machine import machine, versions
from attnlab.lab.results import Result

EXPLAINED = 400  # failing rows per function held against wrong semantics (hypotheses): every row of the grid


@dataclass
class VerifyResult(Result):
    rows: list[Row]
    machine: dict
    versions: dict
    device: str = "cpu"
    diagnoses: dict[str, list[Diagnosis]] = field(default_factory=dict)  # per function that failed

    @classmethod
    def of(cls, rows: list[Row], device="cpu") -> VerifyResult:
        """The result of these rows, with the machine, the versions and each failing function's diagnoses."""
        r = cls(rows, machine(), versions(), str(torch.device(device)))
        r.diagnoses = {f: diagnose(r, f) for f in dict.fromkeys(x.form for x in rows)
                       if any(x.form == f and x.status in ("fail", "error") for x in rows)}
        return r

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(r.status in ("pass", "skipped") for r in self.rows) and any(
            r.status == "pass" for r in self.rows)

    def counts(self) -> dict:
        out = {"pass": 0, "fail": 0, "error": 0, "skipped": 0}
        for r in self.rows:
            out[r.status] += 1
        return out

    def worst_cross(self) -> judge.rule.Comparison | None:
        """The largest float64 disagreement between PyTorch and the oracle over the cases (relative to its limit)."""
        crosses = [r.cross for r in self.rows if r.cross is not None]
        return max(crosses, key=lambda c: c.err / c.allowed if c.allowed > 0 else math.inf, default=None)


def inputs(case: Case, seed: int, device="cpu") -> Inputs:
    return Inputs(*make_inputs(case, seed, device))


def shared_keep(case: Case, seed: int, device="cpu") -> torch.Tensor | None:
    """The keep-mask attnlab's counter-based dropout draws after ``torch.manual_seed(seed)`` (None: no dropout)."""
    if case.dropout_p <= 0:
        return None
    torch.manual_seed(seed)
    return dropout.keep_mask(dropout.draw_seed(), case.dropout_p, math.prod(case.batch), case.H,
                             torch.arange(case.L), torch.arange(case.S or case.L), device).cpu()


def probe_keep(fn: Callable, case: Case, x: Inputs, seed: int, accepts_masks: bool) -> tuple[torch.Tensor | None, str]:
    """Which weights ``fn`` drops for this case and seed: (keep (N, H, L, S) bool, "") or (None, why not).

    Called with v = I (Ev = S), attention returns its weights after dropout, Pd = keep * P / (1 - p).
    A weight counts as kept when Pd is over half of P (P from the oracle; whether the survivors were
    scaled is for the comparison that follows). The share dropped must be p within six standard
    deviations of a binomial draw, or the function is not doing dropout.
    """
    S, Hkv, p = case.S or case.L, case.Hkv or case.H, case.dropout_p
    eye = torch.eye(S, device=x.q.device).to(x.q.dtype).expand(*case.batch, Hkv, S, S).clone()
    torch.manual_seed(seed)
    with torch.no_grad():
        Pd = judge.call(fn, x.q, x.k, eye, x.mask_for(accepts_masks), case, p)
    P = oracle.reference(x.q, x.k, eye, x.oracle_mask, case.is_causal, case.scale, case.gqa)
    n = math.prod(case.batch)
    P, Pd = P.reshape(n, case.H, case.L, S), Pd.detach().double().cpu().reshape(n, case.H, case.L, S)
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
               shared_dropout: bool = True, device="cpu") -> Row:
    """Run one case on one function: oracle, PyTorch, the function; compare out, dq, dk, dv (and dmask).

    Dropout cases: the function draws its seed from ``torch.manual_seed(seed)`` and the oracle applies
    the keep-mask that seed gives: attnlab's counter-based dropout for attnlab's forms
    (``shared_dropout``), else the mask :func:`probe_keep` reads from the function itself. A function
    that ignores ``dropout_p``, drops the wrong share, or does not scale the survivors fails.
    PyTorch's dropout uses other random numbers, so its column shows its error on the same inputs
    without dropout, against the oracle without dropout.
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
    return judge.judge(name, fn, case, seed, x, judge.expect(case, seed, x, keep), accepts_masks)


def check_forms(fns: dict[str, Callable], case: Case, seed: int, device="cpu") -> list[Row]:
    """:func:`check_case` for several of attnlab's forms at once, sharing the oracle and PyTorch's run."""
    x = inputs(case, seed, device)
    exp = judge.expect(case, seed, x, shared_keep(case, seed, device))
    return [judge.judge(name, fn, case, seed, x, exp, True) for name, fn in fns.items()]


def verify(targets: dict[str, Callable], cases: list[Case] | None = None, *, seed: int = 0,
           progress: Callable[[str], None] | None = None, check_dropout: bool = True,
           timeout: float | None = 10.0, device="cpu", report: Callable[[Row], None] | None = None) -> VerifyResult:
    """Check each named function over the cases on ``device``. ``targets`` maps a label to a function.

    ``check_dropout=False`` skips the dropout cases (for functions without dropout). ``timeout``:
    seconds per case at the basic case's size (:func:`attnlab.lab.check.watchdog.case_limit`) for functions
    that are not attnlab's registered forms; a case past it is a FAIL row and the function's remaining
    cases are not run. ``None``: no watchdog. Inputs are made on ``device`` (any torch device), the
    oracle runs on the CPU in float64, PyTorch on ``device`` in each case's dtype. ``report`` hears each
    row as soon as it is judged.
    """
    cases = default_cases() if cases is None else cases
    registered = kernels.forms(device=None)
    rows: dict[str, list[Row]] = {name: [] for name in targets}
    hung: dict[str, str | None] = dict.fromkeys(targets)  # a function whose case timed out runs no more
    explained = dict.fromkeys(targets, 0)  # failures read for wrong semantics (diagnose needs a few, not all)
    for i, case in enumerate(cases):
        shared: dict[Case, tuple] = {}  # one oracle and PyTorch run per case (and per size, for slow forms)
        for name, fn in targets.items():
            form = registered.get(name)
            why = _skip_reason(fn, form, case, check_dropout, hung[name])
            if why is not None:
                row = judge.row(name, case, "skipped", why)
            else:
                c = case.shrunk(form.max_work) if form is not None and form.max_work is not None else case
                if progress:
                    progress(f"{name}: {c.label}")
                row = _run_case(name, fn, form, c, seed + i, shared, device, explained[name] < EXPLAINED, timeout)
                if row.facts.kind == "timeout":
                    hung[name] = f"not run: case {c.label!r} timed out"
                elif isinstance(fn, Remote) and fn.lost is not None:
                    hung[name] = f"not run: the process ended during case {c.label!r}"
                explained[name] += row.status == "fail"
            rows[name].append(row)
            if report:
                report(row)
    return VerifyResult.of([r for name in targets for r in rows[name]], device)


def _run_case(name: str, fn: Callable, form, c: Case, seed: int, shared: dict, device, explain: bool,
              timeout: float | None) -> Row:
    """One function on one case: the shared oracle where it can be (not a function's own dropout), under the
    watchdog when it is not one of attnlab's forms."""
    ours = form is not None and form.fn is fn
    if c.dropout_p > 0 and not (ours and form.shared_dropout):
        run = functools.partial(check_case, name, fn, c, seed, ours, False, device)
    else:
        if c not in shared:
            x = inputs(c, seed, device)
            shared[c] = (x, judge.expect(c, seed, x, shared_keep(c, seed, device)))
        run = functools.partial(judge.judge, name, fn, c, seed, *shared[c], ours, explain)
    if isinstance(fn, Remote):  # a process of its own: killed when it is past the limit
        fn.deadline = None if timeout is None else case_limit(c, timeout)
        row = run()
        if fn.timed_out:
            return judge.row(name, c, "fail", timed_out(fn.deadline or QUIET_SECONDS, timeout or QUIET_SECONDS),
                             facts=Facts("timeout"))
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


def timed_out(limit: float, timeout: float) -> str:
    return (f"timed out: no answer after {limit:.1f} s (--timeout {timeout:g} s at the basic case's size); the "
            "function's remaining cases were not run")


def _skip_reason(fn: Callable, form, case: Case, check_dropout: bool, hung: str | None) -> str | None:
    """Why ``fn`` (registered as ``form``, or None for the user's own) does not run ``case``; None: it runs it."""
    if case.dropout_p > 0 and not check_dropout:
        return "dropout not checked (--no-dropout)"
    if hung is not None:
        return hung
    if isinstance(fn, Remote) and fn.lost is not None:
        return f"not run: {fn.lost}"
    takes = form.score_mod if form is not None else (fn.takes_score_mod if isinstance(fn, Remote) else
                                                      mod_cases.takes_score_mod(fn))
    if case.mod and not takes:
        return "takes no score_mod= keyword"
    return None
