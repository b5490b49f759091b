"""The lines of attnlab's own source that compute each step, read when the page is built.

The page shows code, not a retyped copy of it: each walkthrough step quotes the line of the matrix
form (:mod:`attnlab.kernels.matrix`) or of the attention module that computes it, with its file and
line number, and the module and the loops form appear whole. If a line moves or changes, the page
follows; if it disappears, building the page fails loudly instead of showing stale code.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from attnlab.kernels import loops, matrix
from attnlab.nn import attention

# step -> (module, the start of each line to quote, in order)
STEPS = {
    "qkv": (attention, ["parts = self.qkv(x)", "q = parts[0].view", "k = parts[1].view", "v = k if self.tie_kv"]),
    "scores": (matrix, ["scores = (q @ k.transpose(-2, -1)) * a.scale"]),
    "scale": (matrix, ["scores = (q @ k.transpose(-2, -1)) * a.scale"]),
    "mask": (matrix, ["scores = apply_mask(scores, a.dense_mask())", "return scores.masked_fill(~mask"]),
    "softmax": (matrix, ["weights = safe_softmax(scores)", "m = scores.amax(dim=-1", "e = torch.exp(scores - m)",
                         "s = e.sum(dim=-1", "return e / torch.where"]),
    "out": (matrix, ["out = weights @ v"]),
    "merge": (attention, ["y = y.transpose(1, 2).reshape(B, T, C)", "return self.resid_drop(self.proj(y))"]),
}


@dataclass
class Snippet:
    file: str  # relative to the package, e.g. "kernels/matrix.py"
    lines: list[int]  # 1-based line numbers
    code: list[str]


@dataclass
class Code:
    steps: dict[str, Snippet]
    module: Snippet  # MultiHeadAttention.project and forward: the module the lesson trains
    loops: Snippet  # the loops form, whole


def _file(mod) -> str:
    return mod.__name__.removeprefix("attnlab.").replace(".", "/") + ".py"


def quote(mod, starts: list[str]) -> Snippet:
    """The first line of ``mod``'s source that starts (after indentation) with each of ``starts``."""
    src = inspect.getsource(mod).splitlines()
    nums, code = [], []
    for s in starts:
        found = next((i for i, line in enumerate(src) if line.strip().startswith(s)), None)
        if found is None:
            raise RuntimeError(f"the lesson quotes a line starting {s!r} from {_file(mod)}, which no longer has it")
        nums.append(found + 1)
        code.append(src[found].strip())
    return Snippet(_file(mod), nums, code)


def _whole(mod, *objs) -> Snippet:
    lines, nums = [], []
    for obj in objs:
        body, first = inspect.getsourcelines(obj)
        if lines:
            lines.append("")
        lines += [x.rstrip("\n") for x in body]
        nums.append(first)
    return Snippet(_file(mod), nums, lines)


def collect() -> Code:
    mha = attention.MultiHeadAttention
    return Code({step: quote(mod, starts) for step, (mod, starts) in STEPS.items()},
                _whole(attention, mha.project, mha.forward, attention.CausalSelfAttention),
                _whole(loops, loops.attention))
