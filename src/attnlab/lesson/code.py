"""The lines of the lesson's own code that compute each step, read when the page is built.

The page shows code, not a retyped copy of it: each walkthrough step quotes the line of the
lesson's module (:class:`attnlab.nn.causal.CausalSelfAttention`, about twenty lines, tested equal
to the library's MultiHeadAttention) that computes it, and the line of the lab's starter
(:mod:`attnlab.lab.starter`) where the learner writes the same step with loops; both appear
whole too. The production code (GQA, RoPE, a KV cache, every kernel) stays a link for the curious.
If a line moves or changes, the page follows; if it disappears, building the page fails loudly
instead of showing stale code.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

from attnlab.kernels import loops, matrix
from attnlab.lab import starter
from attnlab.nn import attention, causal

# step -> the start of each line of the lesson's module to quote, in order
STEPS = {
    "qkv": ["q, k, v = self.qkv(x).split", "q = q.view", "k = k.view", "v = v.view"],
    "scores": ["scores = q @ k.transpose(-2, -1)"],
    "scale": ["scores = scores * self.scale"],
    "mask": ["future = torch.ones(T, T", "scores = scores.masked_fill(future"],
    "softmax": ["weights = torch.softmax(scores"],
    "out": ["y = self.attn_drop(weights) @ v"],
    "merge": ["y = y.transpose(1, 2).reshape(B, T, C)", "return self.resid_drop(self.proj(y))"],
}
# step -> the lines of the lab's starter where the learner writes the same step, one query and one key at a time
LAB_STEPS = {
    "qkv": ["q, k, v = (t.reshape(-1, *t.shape[-2:]).to(work)"],
    "scores": ["score = (q[n, i] * k[n, j]).sum()"],
    "scale": ["# TODO 1 (scale)"],
    "mask": ["# TODO 2 (mask)"],
    "softmax": ["# TODO 3 (softmax)", "e = torch.exp(scores)", "weights = e / e.sum()"],
    "out": ["out = torch.zeros(Ev, dtype=work)", "out = out + weights[j] * v[n, j]", "return out  # TODO 4"],
}
STARTER_FILE = "attention_lab.py"  # what `attnlab lab start` names the learner's copy


@dataclass
class Snippet:
    file: str  # relative to the package, e.g. "kernels/matrix.py"
    lines: list[int]  # 1-based line numbers
    code: list[str]


@dataclass
class Code:
    steps: dict[str, Snippet]  # from the lesson's module
    lab_steps: dict[str, Snippet]  # from the lab's starter
    module: Snippet  # CausalSelfAttention, whole
    starter: Snippet  # attention_by_hand, as `attnlab lab start` writes it
    links: dict[str, str]  # the production code for the curious: name -> file URI of the installed source


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


def _whole(mod, *objs, file: str | None = None) -> Snippet:
    """The source of ``objs``, one after another, each line with its own number (a gap where they are apart)."""
    lines, nums = [], []
    for obj in objs:
        body, first = inspect.getsourcelines(obj)
        lines += [x.rstrip("\n") for x in body]
        nums += range(first, first + len(body))
    return Snippet(file or _file(mod), nums, lines)


def collect() -> Code:
    links = {f"attnlab/{_file(m)}": Path(m.__file__).resolve().as_uri() for m in (attention, matrix, loops)}
    return Code({step: quote(causal, starts) for step, starts in STEPS.items()},
                {step: _named(quote(starter, starts)) for step, starts in LAB_STEPS.items()},
                _whole(causal, causal.CausalSelfAttention),
                _whole(starter, starter.attention_by_hand, file=STARTER_FILE), links)


def _named(s: Snippet) -> Snippet:
    return Snippet(STARTER_FILE, s.lines, s.code)
