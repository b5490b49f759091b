"""What a row of verify knows about a failure, as values: the diagnoses read these, never the row's text.

A failing row says in words what went wrong (``Row.detail``, for people); beside the words it keeps
:class:`Facts`: what ended the case (an exception, a timeout, the process gone, the oracle's own
check, the dropout probe), the keys of the contract problems (:data:`PROBLEMS`), and an exception's
type and message. With the row's comparisons (which quantities failed, by how much, against what
limit) and its hints (the wrong semantics its output matched, :mod:`attnlab.judge.hypotheses`),
that is all :mod:`attnlab.judge.diagnose` reads, so rewording a message changes no diagnosis.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from attnlab.results import Result


@dataclass(frozen=True)
class Cause:
    """One cause a verdict can name (the table of them all is :func:`attnlab.judge.causes.table`)."""

    key: str  # a stable name (what results and tests hold)
    text: str  # the line; format fields: {n}, {case}, {type}, {message}, {worst}, {returned}, and a cause's own
    hints: tuple[str, ...] = ()  # hypotheses' keys said by this line
    tags: tuple[str, ...] = ()  # case tags read as this cause when nothing else explains their rows
    scope: tuple[str, ...] = ()  # the tags of the cases the cause speaks of


# "": the numbers and the contract decide; "busy": the machine held the function back past its time (never a cause)
KINDS = ("", "oracle", "raised", "exit", "timeout", "busy", "lost", "probe", "ratio")

# key -> how a row says it (format fields are the problem's values)
PROBLEMS = {
    "not-a-tensor": "returned {returned}, not a tensor",
    "dtype": "the output has dtype {got}; PyTorch returns the inputs' dtype {want}",
    "device": "the output is on {got}; PyTorch returns it on the inputs' device {want}",
    "in-place": "changed its input {name} in place (the caller's tensor is not what it passed)",
    "requires-grad": "changed {name}.requires_grad from {was} to {now}",
    "shape": "the output has shape {got}; PyTorch's is {want}",
    "no-grad": "the output does not require grad: no gradient reaches q, k or v (detached inputs?)",
    "no-lse": "returned no log-sum-exp, which the API returns when asked (return_attn_probs=True, return_lse=True, "
              "return_softmax_lse=True)",
}


def _inference_path(mode: str, key: str) -> dict:
    """The problems of the inference path (:mod:`attnlab.judge.inference`): the same call on inputs that do not
    require grad, under ``mode``."""
    return {f"{key}-output": f"under {mode} the output is off by {{err:.3g}}, over its limit {{limit:.3g}} (with "
                             "gradients: {grad_err:.3g})",
            f"{key}-in-place": f"changed its input {{name}} in place under {mode}",
            f"{key}-raises": f"raised {{type}} under {mode}: {{message}}"}


SILENT = ("no-lse",)  # problems that say nothing of the output: its own failures are still read for their causes

PROBLEMS |= _inference_path("torch.no_grad()", "no-grad") | _inference_path("torch.inference_mode()", "inference-mode")


@dataclass
class Facts(Result):
    kind: str = ""  # one of KINDS
    problems: list[str] = field(default_factory=list)  # keys of PROBLEMS
    raised_type: str = ""  # an exception's class name ("" when none)
    raised_message: str = ""

    def exception(self) -> tuple[str, str]:
        """The exception as one line of the diagnosis tells it from another: its type, and its message with the
        numbers in it aside (the same error on other sizes is the same line)."""
        return self.raised_type, re.sub(r"\d+", "#", self.raised_message)


def problem(key: str, **values) -> list[str]:
    """A contract problem as it travels: [key, the sentence a row shows]."""
    return [key, PROBLEMS[key].format(**values)]


def raised(e: BaseException, kind: str = "raised") -> Facts:
    """The facts of an exception the judged function raised (in this process, or another's, sent as values)."""
    info = getattr(e, "info", None)
    if isinstance(info, dict):
        return Facts(kind, raised_type=str(info.get("type", "")), raised_message=str(info.get("message", "")))
    from attnlab.judge.apart.remote import message

    return Facts(kind, raised_type=type(e).__name__, raised_message=message(e))
