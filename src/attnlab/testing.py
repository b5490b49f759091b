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

A function refuses an argument it does not take by raising ``attnlab.Unsupported`` (the case is skipped, with
its message); any other exception fails the case. ``backward=False`` judges a kernel without a backward on its
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

from attnlab.judge import apis as _apis
from attnlab.judge import isolate
from attnlab.judge.cases import Case
from attnlab.report import plain

__all__ = ["Case", "assert_attention_matches", "assert_case", "cases"]


def cases(dtypes: Iterable[str] = ("float32", "float64", "bfloat16"), *, quick: bool = True,
          only: str | Iterable[str] | None = None, name: str | None = None, api: str = "sdpa") -> list:
    """verify's grid, for ``pytest.mark.parametrize``: one ``pytest.param`` per case with the case's label as its
    id, after ``name`` where given (``"mine: basic [float32]"``, for several functions in one test file); plain
    :class:`Case` objects where pytest is not installed. ``only``: case names containing these words. ``api``: the
    grid put to that API (the cases it cannot express are there, and skip with the reason)."""
    picked = _grid(api, dtypes, quick)
    if only is not None:
        words = [only] if isinstance(only, str) else list(only)
        picked = [c for c in picked if any(w.lower() in c.name.lower() for w in words)]
    try:
        import pytest
    except ModuleNotFoundError:
        return picked
    return [pytest.param(c, id=f"{name}: {c.label}" if name else c.label) for c in picked]


def assert_case(fn: Callable, case: Case, *, device="cpu", seed: int = 0, check_dropout: bool = True,
                timeout: float | None = None, backward: bool = True, factor: float = 2.0,
                name: str | None = None) -> None:
    """Hold ``fn`` to the rule on one case (see :func:`cases`); AssertionError with the row and its diagnosis. A
    case of ``cases(api=...)`` calls ``fn`` through that API."""
    api = _apis.parse(case.api)[0] if case.api else "sdpa"
    _check(fn, [case], device=device, seed=seed, check_dropout=check_dropout, timeout=timeout, backward=backward,
           factor=factor, name=name, api=api, single=True)


def assert_attention_matches(fn: Callable, *, device="cpu", dtypes: Iterable[str] = ("float32", "float64", "bfloat16"),
                             quick: bool = True, seed: int = 0, check_dropout: bool = True,
                             timeout: float | None = None, backward: bool = True, factor: float = 2.0,
                             name: str | None = None, api: str = "sdpa") -> None:
    """Hold ``fn`` to the rule on every case of the grid (``quick``: without the long cases) in ``dtypes`` on
    ``device``. ``check_dropout=False`` skips the dropout cases, for a function without dropout. ``timeout``:
    seconds a case may take at the basic case's size (None: no limit). ``backward=False``: the output alone, for a
    kernel without a backward. ``factor``: the rule's multiple of PyTorch's error (default 2). ``api``: the API
    ``fn`` is written to (see the module's notes)."""
    _check(fn, _grid(api, dtypes, quick), device=device, seed=seed, check_dropout=check_dropout, timeout=timeout,
           backward=backward, factor=factor, name=name, api=api)


def _grid(api: str, dtypes, quick: bool) -> list:
    if api not in _apis.NAMES:
        raise ValueError(f"api={api!r}: choose from {', '.join(map(repr, _apis.NAMES))}")
    return _apis.cases(api, list(dtypes), long=not quick)


def _check(fn, picked, *, device, seed, check_dropout, timeout, backward, factor, name, api="sdpa", single=False):
    __tracebackhide__ = True  # pytest shows the table and the causes, not this module's frames
    factor = _factor(factor)
    name = name or getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    if api != "sdpa":
        fn = _apis.Adapted(fn, api)
    r = isolate.judge_apart(fn, name, picked, seed=seed, check_dropout=check_dropout, timeout=timeout, device=device,
                            backward=backward, factor=factor)
    if single and r.rows[0].status == "skipped":  # e.g. a score-modifier case for a function without score_mod=
        import pytest

        pytest.skip(r.rows[0].detail)
    if not r.passed:  # a failure, a factor that judged nothing, or every case refused: nothing passed is no pass
        raise AssertionError(message(r, name))
    return r


def _factor(factor) -> float:
    """``factor=`` by the command line's rule: a finite number of at least 1 (never less than PyTorch's own error)."""
    import math

    if isinstance(factor, bool) or not isinstance(factor, (int, float)):
        raise TypeError(f"factor={factor!r}: give a number >= 1 (default 2)")
    if not (math.isfinite(factor) and factor >= 1):
        raise ValueError(f"factor={factor!r}: give a number >= 1 (default 2): the rule never asks less of a kernel "
                         "than PyTorch's own error")
    return float(factor)


def message(result, name: str) -> str:
    """The failing rows as a plain table, then what they point to and the counts."""
    from attnlab.report.terminal import diagnosis_lines, untested_lines, verify_summary, verify_table

    lines = verify_table(result, "failures", table=plain.Table).lines()
    lines += [plain.strip(x) for x in diagnosis_lines(result)]
    if not any(r.status == "pass" for r in result.rows):
        lines.append(f"no case passed: {name} was judged on nothing")
        lines += [plain.strip(x) for x in untested_lines(result)]
    lines.append(plain.strip(verify_summary(result, [name])))
    return "\n".join(lines)
