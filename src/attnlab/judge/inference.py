"""The inference path: the same function called as a model calls it when nothing is trained.

Kernels often take a faster road when no gradient is wanted -- they check ``torch.is_grad_enabled()``,
``torch.is_inference_mode_enabled()`` or ``q.requires_grad`` -- and that road is where a wrong result or an
input changed in place hides: a judge that always calls with gradients never takes it. So every judged
function is called twice more on each case, forward only, on fresh inputs that do not require grad:

* under ``torch.no_grad()``, and
* under ``torch.inference_mode()``,

each laid out as the case says, after the same ``torch.manual_seed`` (dropout draws the same weights). What
the function received is compared with what it was given, every tensor argument (an API's packed tensors,
page tables and lengths too), and its output is held to the case's rule like the output with gradients
(:func:`compare`): the judge knows it fails, and says it differs from the grad path's when the grad path's
own output was right or differs from it by more than the limit -- so one bug on both paths is one line,
and a wrong fast path is a line of its own.
"""

from __future__ import annotations

import inspect

import torch

from attnlab.judge import rule
from attnlab.judge.apart.remote import message
from attnlab.judge.facts import problem

# (name, the key its problems start with, its context manager)
MODES = (("no_grad", "no-grad", torch.no_grad), ("inference_mode", "inference-mode", torch.inference_mode))
QUANTITY = "out ({})"  # how a mode's output is named among a row's comparisons


def quantity(mode: str) -> str:
    return QUANTITY.format(mode)


class Snapshot:
    """Copies of tensors taken before a call, to tell afterwards which of them the call changed in place."""

    def __init__(self, named: list[tuple[str, torch.Tensor]]):
        self.named = named
        with torch.inference_mode(False), torch.no_grad():
            self.before = [(t.detach().clone(), t.requires_grad) for _, t in named]

    def changed(self) -> list[str]:
        """The names of the tensors whose values are no longer what they were."""
        with torch.no_grad():
            return [name for (name, t), (was, _) in zip(self.named, self.before, strict=True)
                    if not _same(t.detach(), was)]

    def regraded(self) -> list[tuple[str, bool, bool]]:
        """(name, was, now) for each tensor whose ``requires_grad`` the call changed."""
        return [(name, grad, t.requires_grad) for (name, t), (_, grad) in zip(self.named, self.before, strict=True)
                if t.requires_grad != grad]


def _same(t: torch.Tensor, was: torch.Tensor) -> bool:
    return t.shape == was.shape and t.dtype == was.dtype and bool(torch.equal(t, was))


class Watched:
    """A function that remembers the tensors it is called with (named by its own parameters, where they bind), so
    that the judge can tell which of them it changed in place: for an API's function, whose arguments (packed
    sequences, a page cache, a block table) the judge builds itself."""

    def __init__(self, fn, writes: tuple[int, ...] = ()):
        self.fn, self.writes = fn, writes  # writes: the positions of arguments the API writes in place itself
        self.snapshot: Snapshot | None = None
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)

    def __call__(self, *args, **kwargs):
        self.snapshot = Snapshot(_named(self.fn, [None if i in self.writes else a for i, a in enumerate(args)],
                                        kwargs))
        return self.fn(*args, **kwargs)

    def changed(self) -> list[str]:
        return self.snapshot.changed() if self.snapshot is not None else []


def _named(fn, args, kwargs) -> list[tuple[str, torch.Tensor]]:
    """The tensor arguments of a call, named as ``fn``'s signature names them (else by position or keyword)."""
    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):  # no signature to read, or one the call does not fit: the call says the rest
        bound = {**{f"argument {i + 1}": a for i, a in enumerate(args)}, **kwargs}
    out = []
    for name, value in bound.items():
        if isinstance(value, torch.Tensor):
            out.append((name, value))
        elif isinstance(value, dict):  # **kwargs
            out += [(k, t) for k, t in value.items() if isinstance(t, torch.Tensor)]
        elif isinstance(value, tuple):  # *args
            out += [(f"{name}[{i}]", t) for i, t in enumerate(value) if isinstance(t, torch.Tensor)]
    return out


def paths(forward, said=()) -> tuple[list, list]:
    """The function's output under each of :data:`MODES` and what went wrong there: ``forward()`` calls it once
    (inside the mode this sets) on fresh inputs and returns (output, the names of the inputs it changed in place).
    Returns (outputs -- a detached tensor or None per mode --, contract problems). An input the grad path changed
    too (``said``: the grad path's problems) is that path's line already: one bug on both paths is one line."""
    before = {text for key, text in said if key == "in-place"}
    outs, problems = [], []
    for _, key, context in MODES:
        try:
            with context():
                out, changed = forward()
        except Exception as e:  # noqa: BLE001 -- whatever it raises there is said as a problem of that path
            outs.append(None)
            text = message(e).strip()
            msg = text.splitlines()[0][:200] if text else ""
            problems.append(problem(f"{key}-raises", type=type(e).__name__, message=msg or "(no message)"))
            continue
        problems += [problem(f"{key}-in-place", name=name) for name in changed
                     if problem("in-place", name=name)[1] not in before]
        outs.append(out.detach() if isinstance(out, torch.Tensor) else None)
    return outs, problems


def compare(outs, grad_out, grad_comp: rule.Comparison, theirs, ref, ref0, dtype, budget: float,
            factor: float, said=()) -> tuple[list[rule.Comparison], list[list[str]]]:
    """Each mode's output held to the rule of the output with gradients (``grad_comp``: that output's comparison;
    ``theirs``, ``ref``, ``ref0``, ``budget``: its PyTorch answer, oracle, undropped oracle and floor). A mode that
    fails is a problem of its own (``no-grad-output``, ``inference-mode-output``) when the grad path's output
    passed, or when the two outputs differ by more than the limit: a different bug, not the same one twice.
    ``said``: the keys of the problems already found (a mode that raised is said so, not as an output off by inf)."""
    comps, problems = [], []
    for (mode, key, _), out in zip(MODES, outs, strict=False):
        c = rule.compare(quantity(mode), out, theirs, ref, dtype, budget, theirs_ref=ref0, factor=factor)
        comps.append(c)
        if c.passed or f"{key}-raises" in said:
            continue
        if grad_comp.passed or not _apart(out, grad_out) <= c.allowed:
            problems.append(problem(f"{key}-output", err=c.err, grad_err=grad_comp.err, limit=c.allowed))
    return comps, problems


def _apart(a, b) -> float:
    """max|a - b|, where NaN and NaN (or the same infinity) in the same place are the same answer: the grad path's
    failure again, not another one. inf when either is not a tensor or they differ in shape."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
        return float("inf")
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    alike = (a == b) | (torch.isnan(a) & torch.isnan(b))
    d = torch.where(alike, 0.0, (a - b).abs().nan_to_num(nan=float("inf")))
    return float(d.max()) if d.numel() else 0.0
