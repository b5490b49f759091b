"""The lab's levels: from attention in loops to FlashAttention's backward and a KV cache, each written by the learner.

A level is one small module here: its starter (a file ``attnlab lab start --level NAME`` writes, with
the signature, the docstring and TODOs), how it is graded, the slips it names (each compared, case by
case, with what the learner's function returned), what it measures, and its item on the lesson page.

    1 loops     attention_by_hand(q, k, v)         one query and one key at a time
    2 matrix    attention_matrix(q, k, v)          the same in four tensor lines; memory grows like T²
    3 module    CausalSelfAttention(d_model, H)    projections, heads, causal attention, merge; trained
    4 flash     flash_forward(q, k, v, is_causal)  tiles of queries and keys, a running max and sum; (out, lse);
                                                   memory like T, about half the work under the causal mask
    5 backward  flash_backward(q, k, v, out, lse, dout, is_causal)   dq, dk, dv from level 4's log-sum-exp
    6 decode    decode_step(q, k, v, cache, pos)   one token at a time, keys and values kept, rotary positions
    7 triton    flash_attention(q, k, v, is_causal)   level 4's loop as a Triton kernel (its body the learner's)

:func:`find` names a level (one line naming them all when there is no such level); :func:`of_function`
finds it from the function's name, the way ``attnlab lab check FILE:FUNCTION`` does when no
``--level`` is given (a name of the learner's own is level 1's kind: attention in (q, k, v)).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class Growth:
    """How a level's extra peak memory must grow with T: as T^power, the exponent between ``low`` and ``high``
    (None: not bounded on that side). ``power`` is also the guide the lesson page draws beside the learner's curve."""

    power: float
    low: float | None = None
    high: float | None = None

    def holds(self, p: float) -> bool:
        return (self.low is None or p >= self.low) and (self.high is None or p <= self.high)

    def asked(self) -> str:
        """What the level asks, in words: "T², within 0.25", "at most T^1.2"."""
        if self.low is not None and self.high is not None:
            return f"T^{self.power:g}, within {self.high - self.power:g}"
        if self.high is not None:
            return f"at most T^{self.high:g}"
        return f"like T^{self.power:g}"


@dataclass(frozen=True)
class Level:
    number: int
    name: str
    title: str  # what the learner writes, in a few words
    function: str  # the function (or class) the starter asks for
    filename: str  # what `attnlab lab start --level NAME` writes
    item: str  # the level's line on the lesson page's path
    kind: str  # "attention": graded on verify's grid as (q, k, v); "own": graded by the level's own cases
    resource: str  # the starter's file in this package
    growth: Growth | None = None  # how its memory must grow with T (None: the level asks nothing of it)
    also: tuple[str, ...] = ()  # other functions of the starter the learner writes in (level 7's kernel)

    def starter_text(self) -> str:
        if self.resource == "starter.py":
            return resources.files("attnlab.lab").joinpath("starter.py").read_text(encoding="utf-8")
        return resources.files(__name__).joinpath("starters", self.resource).read_text(encoding="utf-8")

    def given(self, source: str, name: str) -> bool:
        """Is ``name`` in this source the starter's code as it came -- it and every function the learner writes in
        beside it (:attr:`also`), their syntax trees unchanged (comments aside)?"""
        from attnlab.lab import files

        return all(files.given_text(source, n) or files.given_text(source, n, self.starter_text())
                   for n in (name, *self.also))

    def with_todos(self) -> list[str]:
        """The functions (or classes) of the starter whose lines hold its TODOs, in the file's order: where the
        learner writes (level 7's are in its kernel, attention_kernel; the wrapper, flash_attention, is given)."""
        import ast

        text = self.starter_text()
        lines = text.splitlines()
        return [node.name for node in ast.parse(text).body if isinstance(node, (ast.FunctionDef, ast.ClassDef))
                and any("TODO" in line for line in lines[node.lineno - 1:node.end_lineno])]

    def module(self):
        """The level's own module (its grading, slips and measurement)."""
        import importlib

        return importlib.import_module(f"{__name__}.{self.name}")


LEVELS = (
    Level(1, "loops", "attention with loops", "attention_by_hand", "attention_lab.py",
          "Level 1: attention with loops matches the oracle", "attention", "starter.py"),
    Level(2, "matrix", "attention in four tensor lines", "attention_matrix", "lab_matrix.py",
          "Level 2: the matrix form matches, its memory grows like T²", "attention", "matrix.py",
          Growth(2.0, 1.75, 2.25)),
    Level(3, "module", "the multi-head module, trained", "CausalSelfAttention", "lab_module.py",
          "Level 3: your CausalSelfAttention matches the library's and trains like it", "own", "module.py"),
    Level(4, "flash", "the online softmax, tiled (flash forward)", "flash_forward", "lab_flash.py",
          "Level 4: your tiled forward and its lse match, the causal one does half the work, its memory grows like T",
          "attention", "flash.py", Growth(1.0, None, 1.2)),
    Level(5, "backward", "flash backward from the log-sum-exp", "flash_backward", "lab_backward.py",
          "Level 5: your backward's dq, dk, dv match the oracle's, without autograd", "own", "backward.py",
          Growth(1.0, None, 1.2)),
    Level(6, "decode", "decoding with a KV cache", "decode_step", "lab_decode.py",
          "Level 6: your decoder, one token at a time, matches the full causal forward", "own", "decode.py",
          Growth(1.0)),
    Level(7, "triton", "FlashAttention-2's forward as a Triton kernel", "flash_attention", "lab_triton.py",
          "Level 7: your Triton kernel's out and lse match, compiled on a GPU or in Triton's interpreter",
          "attention", "kernel.py", also=("attention_kernel",)),
)
BY_NAME = {lv.name: lv for lv in LEVELS}
DEFAULT = BY_NAME["loops"]


class NoSuchLevel(ValueError):
    """A level name that is not one of :data:`LEVELS` (the message names them all)."""


def names() -> str:
    return ", ".join(f"{lv.number} {lv.name}" for lv in LEVELS)


def find(name: str) -> Level:
    """The level called ``name`` (or numbered so); :class:`NoSuchLevel` naming every level when there is none."""
    key = name.strip().lower()
    for lv in LEVELS:
        if key in (lv.name, str(lv.number)):
            return lv
    raise NoSuchLevel(f"no level {name!r}; the levels are {names()}")


def of_function(function: str) -> Level:
    """The level whose starter asks for ``function``; level 1 for a name of the learner's own."""
    return next((lv for lv in LEVELS if lv.function == function), DEFAULT)


def of_result(result) -> Level:
    """The level a kept check is of: as it says, or (an older check) from its function's name."""
    name = getattr(result, "level", "") or ""
    return BY_NAME.get(name) or of_function(result.function)


def of_file(path, have, default: Level) -> Level:
    """The level a file given without ``:FUNCTION`` is checked as: the level whose starter has this file's name
    (lab_backward.py is level 5 even when the learner pasted their flash_forward into it), else the one level whose
    function the file defines (``have``: the functions it defines); with several and no name to choose by, a
    LoadError naming each FILE:FUNCTION."""
    from attnlab.judge import LoadError

    by_name = next((lv for lv in LEVELS if lv.filename == path.name and lv.function in have), None)
    if by_name is not None:
        return by_name
    found = [lv for lv in LEVELS if lv.function in have]
    if len(found) > 1:
        raise LoadError(f"{path} defines the functions of {len(found)} levels; say which to check: "
                        + " or ".join(f"{path}:{lv.function}" for lv in found))
    return found[0] if found else default


def start_and_check(level: Level, beside: str = "") -> tuple[str, str, str]:
    """The two commands that begin ``level`` in the folder of the file ``beside`` (the file a check was run on),
    ``attnlab lab start [DIR] --level NAME`` and ``attnlab lab check [DIR/]FILE``, and the file they write and check
    -- so a learner working in mylab/ is sent to mylab/lab_matrix.py, not to a new file in the current folder."""
    from pathlib import PurePath

    folder = PurePath(beside).parent.as_posix() if beside else "."
    where = "" if folder == "." else f" {folder}"
    path = level.filename if folder == "." else f"{folder}/{level.filename}"
    return f"attnlab lab start{where} --level {level.name}", f"attnlab lab check {path}", path
