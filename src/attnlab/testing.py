"""attnlab's judge inside your own test suite: the checks of ``attnlab verify``, as pytest assertions.

For kernel authors who want every test run to hold their attention to the float64 oracle::

    import attnlab.testing
    from mykernels import my_attention        # F.scaled_dot_product_attention's signature

    def test_my_attention_matches():          # the whole quick grid, one test
        attnlab.testing.assert_attention_matches(my_attention, device="cuda")

    @pytest.mark.parametrize("case", attnlab.testing.cases(dtypes=["float16", "bfloat16"]))
    def test_case(case):                      # one test per case, with readable ids
        attnlab.testing.assert_case(my_attention, case, device="cuda")

A failure raises ``AssertionError`` whose message is verify's table of the failing rows (the
function's error, PyTorch's own error on the same device and dtype, the limit) and the diagnoses:
what the pattern of failures points to. The rule is verify's: ``max|yours - oracle| <= 2 x
max|PyTorch - oracle| + floor`` for the output and every gradient. See ``examples/test_my_attention.py``.

The function never runs in the test runner's process: it runs in a process of its own (loaded from its pickle, or
a fork of the runner for a function defined inside a test), and the judge in another. A function that exits, kills
its process or hangs fails its test with a line that says so, within ``timeout`` seconds a case (10 at the basic
case's size, as ``attnlab verify``), and the run goes on. Every argument is checked first, by verify's rules: a
``TypeError`` or ``ValueError`` naming it; selecting nothing (``dtypes=[]``, an ``only=`` that matches no case) is
an error, not a pass, and a device that is not here raises :class:`NoDevice` -- skip a GPU test on purpose with
``@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")``.

A function refuses an argument it does not take by raising ``attnlab.Unsupported`` (the case is skipped, with
its message); any other exception fails the case. A check in which no case passed fails: a function that refuses
everything was judged on nothing. ``backward=False`` judges a kernel without a backward on its
forward; ``factor=`` holds a kernel that is knowingly less precise to more than 2x PyTorch's error (the
failure message says so); ``name=`` names the function in ids and messages.

``api=`` judges a function written to another API than SDPA's, each case put in that API's layout and arguments
and its log-sum-exp judged too: ``"flash-attn"`` (``flash_attn_func``), ``"flash-attn-varlen"``, ``"flex"``
(``flex_attention``) or ``"paged-decode"``; see docs/verify.md::

    def test_my_flash_kernel():
        attnlab.testing.assert_attention_matches(my_flash_attn_func, api="flash-attn", check_dropout=False)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from attnlab.judge import APIS, Case, NoDevice
from attnlab.judge import apis as _apis
from attnlab.judge import arguments as _arguments
from attnlab.judge import cases as _cases
from attnlab.judge.apart import isolate
from attnlab.report import plain

__all__ = ["Case", "NoDevice", "assert_attention_matches", "assert_case", "cases"]

DTYPES = _cases.CPU_DTYPES  # the default dtypes on the CPU; on a GPU float16 and bfloat16 (cases.default_dtypes)


def cases(dtypes: Iterable | None = None, *, quick: bool = True, only: str | Iterable[str] | None = None,
          name: str | None = None, api: str = "sdpa", device="cpu") -> list:
    """verify's grid, for ``pytest.mark.parametrize``: one ``pytest.param`` per case with the case's label as its
    id, after ``name`` where given (``"mine: basic [float32]"``, for several functions in one test file); plain
    :class:`Case` objects where pytest is not installed. ``dtypes``: None for the ``device``'s own (float32,
    float64 and bfloat16 on the CPU; float16 and bfloat16 on a GPU). ``only``: case names containing these words
    (none matching is a ValueError). ``api``: the grid put to that API (the cases it cannot express are there, and
    skip with the reason)."""
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name={name!r}: give a string, or None")
    grid = [c for c in _grid(api, dtypes, quick, device) if not (c.api and _apis.skip_reason(c))]  # the API's own
    picked = _arguments.picked(grid, _arguments.only(only), only)
    try:
        import pytest
    except ModuleNotFoundError:
        return picked
    return [pytest.param(c, id=f"{name}: {c.label}" if name else c.label) for c in picked]


def assert_case(fn: Callable, case: Case, *, device="cpu", seed: int = 0, check_dropout: bool = True,
                timeout: float = _arguments.TIMEOUT, backward: bool = True, factor: float = 2.0,
                name: str | None = None, max_ratio: float | None = None) -> None:
    """Hold ``fn`` to the rule on one case (see :func:`cases`); AssertionError with the row and its diagnosis. A
    case of ``cases(api=...)`` calls ``fn`` through that API."""
    __tracebackhide__ = True
    if not isinstance(case, Case):
        inner = getattr(case, "values", None)
        hint = (" -- the test's parameter, not the pytest.param: parametrize over cases() and take the argument"
                if inner is not None else " (cases(only=...) picks them by name)")
        raise TypeError(f"case={case!r:.80}: give one Case of attnlab.testing.cases(){hint}")
    api = _apis.parse(case.api)[0] if case.api else "sdpa"
    _check(fn, [case], device=device, seed=seed, check_dropout=check_dropout, timeout=timeout, backward=backward,
           factor=factor, name=name, api=api, single=True, max_ratio=max_ratio)


def assert_attention_matches(fn: Callable, *, device="cpu", dtypes: Iterable | None = None, quick: bool = True,
                             seed: int = 0, check_dropout: bool = True, timeout: float = _arguments.TIMEOUT,
                             backward: bool = True, factor: float = 2.0, name: str | None = None,
                             api: str = "sdpa", max_ratio: float | None = None) -> None:
    """Hold ``fn`` to the rule on every case of the grid (``quick``: without the long cases) in ``dtypes`` (names
    or ``torch.dtype``; None: the device's own, float32, float64 and bfloat16 on the CPU, float16 and bfloat16 on a
    GPU) on ``device`` (a string or ``torch.device``). ``check_dropout=False`` skips the dropout
    cases, for a function without dropout. ``timeout``: seconds a case may take at the basic case's size.
    ``backward=False``: the output alone, for a kernel without a backward. ``factor``: the rule's multiple of
    PyTorch's error (default 2). ``api``: the API ``fn`` is written to (see the module's notes). ``max_ratio``: fail a
    case whose error is more than this many times PyTorch's own, though the rule passes it (verify's --max-ratio)."""
    __tracebackhide__ = True
    _check(fn, _grid(api, dtypes, quick, device), device=device, seed=seed, check_dropout=check_dropout,
           timeout=timeout, backward=backward, factor=factor, name=name, api=api, max_ratio=max_ratio)


def _grid(api: str, dtypes, quick: bool, device) -> list:
    if not isinstance(api, str) or api not in APIS:
        raise ValueError(f"api={api!r}: choose from {', '.join(map(repr, APIS))}")
    if not isinstance(quick, bool):
        raise TypeError(f"quick={quick!r}: give True or False")
    if dtypes is None:  # the device's own: its type is enough (cases are made before any device is asked for)
        dtypes = _cases.default_dtypes(_device_type(device))
    return _apis.cases(api, _arguments.dtypes(dtypes), long=not quick)


def _device_type(device) -> str:
    """``device``'s type ('cuda' for 'cuda:1'), or 'cpu' for what is not a device (refused later, by its rule)."""
    import torch

    try:
        return torch.device(device).type
    except (TypeError, RuntimeError, ValueError):
        return "cpu"


def _function(fn, name) -> str:
    """The name to judge ``fn`` by; TypeError for what is not a function."""
    if isinstance(fn, str):
        raise TypeError(f"fn={fn!r}: a string, not a function; give the attention function itself (a form of "
                        f"attnlab's: attnlab.kernels.get({fn!r}).fn)")
    if isinstance(fn, type):  # callable, but a call makes one of its objects: torch.Tensor(q, k, v) is no attention
        raise TypeError(f"fn={fn.__module__}.{fn.__qualname__}: a class, not a function (calling it makes a "
                        f"{fn.__name__}); give the attention function to judge, or an object of the class whose "
                        "call computes attention, e.g. MyAttention()")
    if not callable(fn):
        raise TypeError(f"fn={fn!r:.60}: not a function; give the attention function to judge, with "
                        "F.scaled_dot_product_attention's signature (or the API's named by api=)")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name={name!r}: give a string, or None")
    return name or getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _check(fn, picked, *, device, seed, check_dropout, timeout, backward, factor, name, api="sdpa", single=False,
           max_ratio=None):
    __tracebackhide__ = True  # pytest shows the table and the causes, not this module's frames
    name = _function(fn, name)
    for flag, value in (("check_dropout", check_dropout), ("backward", backward)):
        if not isinstance(value, bool):
            raise TypeError(f"{flag}={value!r}: give True or False")
    kw = {"seed": _arguments.seed(seed), "timeout": _arguments.timeout(timeout), "factor": _arguments.factor(factor),
          "device": _arguments.device(device), "check_dropout": check_dropout, "backward": backward,
          "max_ratio": _arguments.ratio(max_ratio)}
    r = isolate.judge_apart(fn, name, picked, api=api, **kw)
    if single and r.rows[0].status == "skipped":  # e.g. a score-modifier case for a function without score_mod=
        import pytest

        pytest.skip(r.rows[0].detail)
    if not r.passed:  # a failure, a factor that judged nothing, or every case refused: nothing passed is no pass
        raise AssertionError(message(r, name, single))
    return r


def message(result, name: str, single: bool = False) -> str:
    """The failing rows as a plain table (each failing quantity), then what they point to and the counts; for one
    case (``single``), only what is true of that case."""
    from attnlab.report.terminal import diagnosis_lines, untested_lines, verify_summary, verify_table

    lines = verify_table(result, "failures", table=plain.Table).lines()
    lines += [plain.strip(x) for x in diagnosis_lines(result)]
    if not single and not any(r.status == "pass" for r in result.rows):
        lines.append(f"no case passed: {name} was judged on nothing")
        lines += [plain.strip(x) for x in untested_lines(result)]
    lines.append(plain.strip(verify_summary(result, [name])))
    return "\n".join(lines)
