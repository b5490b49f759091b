"""What a pattern of failures points to: one line each, most likely cause first.

``verify`` says which cases fail and by how much; a person wants to know *why*. Three kinds of
evidence, in order of how much they say:

1. the contract: an output of another dtype, inputs changed in place, an exception, a hang;
2. wrong semantics the output matched (:mod:`attnlab.lab.check.hypotheses`): "your output is attention
   without the 1/sqrt(E) scale", "... with the causal mask off the diagonal";
3. the cases that fail, by what they exercise (:attr:`attnlab.lab.check.cases.Case.tags`): when every
   failing case passes ``scale=``, the scale argument is the suspect; when only gradients fail,
   the backward is.

:func:`diagnose` returns :class:`Diagnosis` lines for one function of a verify result.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from attnlab.lab.results import Result


@dataclass(frozen=True)
class Diagnosis(Result):
    key: str  # a stable name for the cause (see TEXT)
    text: str  # one line in plain words


TEXT = {
    "oracle": "the oracle and PyTorch disagree on {n} case(s): those cases judge nothing (report it: it is the "
              "judge's bug, not yours)",
    "exit": "calls sys.exit: a function must return its answer, never end the process",
    "ended": "ended the process during case {case!r} (os._exit, or a crash): a function must return its answer",
    "hangs": "a case timed out: is there an endless loop, or a loop over every element in Python?",
    "raises": "raises on {n} of {total} failing case(s), e.g. {example}",
    "not-a-tensor": "returns something that is not a tensor",
    "shape": "the output's shape is not PyTorch's (..., H, L, Ev)",
    "dtype": "the output's dtype is not the inputs' dtype: compute in higher precision if you like, but return "
             "q.dtype",
    "device": "the output is not on the inputs' device",
    "in-place": "changes the caller's tensors in place: work on new tensors (no masked_fill_, mul_, div_ on inputs)",
    "requires-grad": "changes the inputs' requires_grad",
    "no-grad": "no gradient flows back to q, k, v: is something detached, or computed under torch.no_grad()?",
    "unscaled": "the output is attention without the scale: multiply the scores by 1/sqrt(E) (or by scale=)",
    "scale-1/d": "the output is attention scaled by 1/E: the default scale is 1/sqrt(E)",
    "scale": "fails only where scale= is passed: is the scale argument used (1/sqrt(E) only when it is None)?",
    "scale-tensor": "fails only where scale is a 0-d tensor: PyTorch accepts one (use float(scale))",
    "dead-rows": "rows that see no key differ: PyTorch returns zeros there (and zero gradients), not NaN",
    "max-subtraction": "large scores overflow: subtract each row's max before exp (exp overflows float32 near 88)",
    "causal-ignored": "is_causal=True is ignored: the output matches attention with no causal mask",
    "diagonal": "the causal mask hides the diagonal: query i sees keys j <= i, itself included",
    "causal-reversed": "the causal mask is turned round: query i sees itself and the keys after it (j >= i), not "
                       "the keys up to it; hide the keys after each query (j > i) instead",
    "mask-zero": "the masked scores are set to 0, not -inf: a future key still gets weight exp(0) (use -inf)",
    "causal-alignment": "only L != S causal cases fail: is_causal is aligned upper-left (query i sees keys j <= i)",
    "lower-right": "only the lower-right causal masks fail (query i sees keys j <= i + S - L, as in KV-cache "
                   "decoding)",
    "mask-ignored": "attn_mask is ignored: the output matches attention with no mask",
    "mask-inverted": "the bool mask is read backwards: True means the key takes part",
    "causal+mask": "fails only where is_causal=True comes with attn_mask: PyTorch keeps the keys both allow",
    "gqa": "only GQA cases fail: query head h uses key head h // (H / Hkv) (repeat_interleave, not repeat)",
    "dropout-scale": "dropout rows: kept weights must be divided by 1 - p",
    "dropout": "only dropout cases fail: drop each weight with probability p and scale the rest by 1/(1 - p)",
    "softmax-dim": "the softmax is taken over the wrong dim: each query's weights over the keys (dim=-1) sum to 1",
    "noncontig": "fails only on non-contiguous inputs (transposed, expanded or sliced views, as transformers "
                 "passes them): use reshape or .contiguous(), not view",
    "float-mask": "only float masks fail: a float attn_mask is added to the scores",
    "bool-mask": "only bool masks fail: False hides a key (-inf before the softmax), True keeps it",
    "broadcast-mask": "only masks that broadcast fail: an (L, S), (N, 1, 1, S) or (H, 1, S) mask broadcasts to "
                      "(N, H, L, S)",
    "mask-fn": "only attnlab's mask functions fail",
    "mod": "only score-modifier cases fail: score_mod(score, b, h, q_idx, kv_idx) changes the scaled score "
           "before the mask",
    "grad-mask": "only cases with a learnable float mask fail: its gradient is dS summed over broadcast dims",
    "batch-dims": "only inputs with no batch dim, or several, fail: take any leading dims (..., H, L, E)",
    "Ev!=E": "only cases where value's last dim Ev differs from E fail",
    "L=1": "only single-query cases (L = 1) fail",
    "L!=S": "only cases with L != S fail: queries and keys may differ in number",
    "bfloat16": "fails only in bfloat16: keep the softmax's max, sums and accumulator in float32",
    "float64": "fails only in float64: is something computed in float32 (a constant, a cast)?",
    "float32": "fails only in float32",
    "precision": "fails in float32 and float64 but passes in bfloat16: something is rounded through half "
                 "precision (the scores, the weights)",
    "gradients-only": "only gradients fail: the output is right; check the backward (a custom autograd.Function?)",
    "unclear": "fails on {n} of {total} cases with no single pattern; the first is {example}",
}
HINTS = {"scale-ignored": "scale", "lower-right-for-upper-left": "causal-alignment",
         "upper-left-for-lower-right": "lower-right", "mask-dropped-with-causal": "causal+mask",
         "causal-dropped-with-mask": "causal+mask", "gqa-repeat": "gqa", "dropout-unscaled": "dropout-scale"}
TAGS = {"scale": "scale", "scale-tensor": "scale-tensor", "upper-left L!=S": "causal-alignment",
        "lower-right": "lower-right", "gqa": "gqa", "dropout": "dropout", "large-logits": "max-subtraction",
        "causal+mask": "causal+mask", "dead-rows": "dead-rows", "noncontig": "noncontig", "transposed": "noncontig",
        "expanded": "noncontig", "sliced": "noncontig", "float-mask": "float-mask", "bool-mask": "bool-mask",
        "broadcast-mask": "broadcast-mask", "mask-fn": "mask-fn", "mod": "mod", "grad-mask": "grad-mask",
        "batch-dims": "batch-dims", "Ev!=E": "Ev!=E", "L=1": "L=1", "L!=S": "L!=S", "bfloat16": "bfloat16",
        "float64": "float64", "float32": "float32"}
SCOPE = {"scale": "scale", "causal-ignored": "causal", "diagonal": "causal", "causal-reversed": "causal",
         "mask-zero": "causal", "causal-alignment": "upper-left L!=S",
         "lower-right": "lower-right", "mask-inverted": "bool-mask", "causal+mask": "causal+mask", "gqa": "gqa",
         "dropout-scale": "dropout", "dead-rows": "dead-rows", "max-subtraction": "large-logits"}  # a hint's cases
CONTRACT = (("returned ", "not-a-tensor"), ("output has shape", "shape"), ("output has dtype", "dtype"),
            ("output is on", "device"), ("in place", "in-place"), ("requires_grad from", "requires-grad"),
            ("does not require grad", "no-grad"))


def diagnose(result, form: str) -> list[Diagnosis]:
    """The likely causes of ``form``'s failures in a verify result, most likely first (empty when it passed)."""
    rows = [r for r in result.rows if r.form == form and r.status != "skipped"]
    bad = [r for r in rows if r.status in ("fail", "error")]
    keys: list[tuple[str, dict]] = []
    oracle = [r for r in bad if r.detail.startswith("the oracle and PyTorch disagree")]
    if oracle:
        keys.append(("oracle", {"n": len(oracle)}))
    bad = [r for r in bad if r not in oracle]
    if not bad:
        return _lines(keys)
    keys += _contract(bad)
    bad = [r for r in bad if not r.detail.startswith(("timed out", "the process ended"))]  # they say nothing more
    # nor do rows whose every number passed: the contract alone failed them (a float32 answer to bfloat16 inputs)
    bad = [r for r in bad if not (r.status == "fail" and r.comparisons and all(c.passed for c in r.comparisons)
                                  and any(word in r.detail for word, _ in CONTRACT))]
    if not bad:
        return _lines(keys)
    hints = [k for k, _ in Counter(HINTS.get(h, h) for r in bad for h in r.hints).most_common()]
    pattern, support = _pattern(rows, bad)
    if _precision(rows, bad):
        pattern = [("precision", {})]
    # A pattern that fits the failures exactly, on fewer cases than the top hint speaks of, says more
    # ("fails only where scale is a 0-d tensor" before "scale= is ignored"): it goes first.
    scope = _support(rows, SCOPE.get(hints[0])) if hints else len(rows)
    exact = support == len(bad) and support < scope
    keys += (pattern if exact else []) + [(k, {}) for k in hints] + ([] if exact else pattern)
    raised = [r for r in bad if r.status == "error" and not r.detail.startswith("called sys.exit")]
    if raised:
        keys.append(("raises", {"n": len(raised), "total": len(bad), "example": f"{raised[0].case}: "
                                f"{raised[0].detail.splitlines()[0][:160]}"}))
    if all(r.status == "fail" and r.comparisons and r.comparisons[0].quantity == "out" and r.comparisons[0].passed
           for r in bad) and not any(k == "no-grad" for k, _ in keys):
        keys.append(("gradients-only", {}))
    if not keys:
        w = bad[0].worst
        example = f"{bad[0].case} [{bad[0].dtype}]" + (f" ({w.quantity}: {w.err:.3g} > {w.allowed:.3g})" if w else "")
        keys.append(("unclear", {"n": len(bad), "total": len(rows), "example": example}))
    return _lines(keys)


def _contract(bad) -> list[tuple[str, dict]]:
    """What the rows' details say broke: exit, hangs, PyTorch's contract."""
    keys = []
    if any(r.detail.startswith("called sys.exit") for r in bad):
        keys.append(("exit", {}))
    ended = [r for r in bad if r.detail.startswith("the process ended")]
    if ended:
        keys.append(("ended", {"case": ended[0].case}))
    if any(r.detail.startswith("timed out") for r in bad):
        keys.append(("hangs", {}))
    keys += [(key, {}) for word, key in CONTRACT if any(word in r.detail for r in bad if r.status == "fail")]
    return keys


def _pattern(rows, bad) -> tuple[list[tuple[str, dict]], int]:
    """The most specific case tags that every failing row has (and not every row): what the failures share,
    and on how many cases those tags are."""
    shared = set.intersection(*(set(r.tags) for r in bad))
    support = {t: _support(rows, t) for t in shared if t in TAGS}
    narrow = [t for t in support if support[t] < len(rows)]
    if not narrow:
        return [], len(rows)
    best = min(support[t] for t in narrow)
    return [(TAGS[t], {}) for t in sorted(narrow) if support[t] == best], best


def _support(rows, tag: str | None) -> int:
    """On how many of the rows the case has ``tag`` (None: every row)."""
    return len(rows) if tag is None else sum(tag in r.tags for r in rows)


def _precision(rows, bad) -> bool:
    """Most float32 and float64 cases fail while the bfloat16 ones pass: precision is lost somewhere."""
    half = [r for r in rows if r.dtype == "bfloat16"]
    full = [r for r in rows if r.dtype in ("float32", "float64")]
    if not half or not full:
        return False
    half_bad = sum(r in bad for r in half) / len(half)
    full_bad = sum(r in bad for r in full) / len(full)
    return half_bad < 0.25 and full_bad > 0.75


def _lines(keys) -> list[Diagnosis]:
    out, seen = [], set()
    for key, fill in keys:
        if key not in seen:
            seen.add(key)
            out.append(Diagnosis(key, TEXT[key].format(**fill)))
    return out
