"""Run the blind API corpus (tests/api_mutants.py) through verify and read what each kernel's lines say.

The corpus was written by someone who had not read the judge's causes, as kernel authors write kernels; each
kernel carries labels in the writer's words. :data:`KEYS` is the one table that reads a label as the cause
lines that state it for SDPA's, flash-attn's and flex's kernels (a label with no line of its own, such as a bug
nobody listed, maps to nothing: its kernel must fail and get no false line); the varlen and paged-decode kernels are
read by tests/kv_bugs.LABEL_KEYS and judged forward only (:func:`run_kv`: every bug there shows in the output and
the log-sum-exp; the gradients of the corpus's Python tile loops would take an hour more). Used by
tests/judge/test_api_corpus.py, tests/judge/test_api_corpus_kv.py and benchmarks/api_corpus.py (seeds 0-4).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from attnlab.judge import apis, diagnose, registry, verify
from tests import api_mutants, kv_bugs
from tests.helpers import named

DTYPES = ("float32", "float64", "bfloat16")
KV_APIS = ("flash-attn-varlen", "paged-decode")  # judged by run_kv
# The corpus's paged kernels write k=, v= into copies of the caches (tests/api_corpus/paged.py says so), where
# flash_attn_with_kvcache writes them into the caller's: each gets this line on the cases that append, truthfully.
# It is counted apart (set_aside): a right kernel fails with it alone, on those cases alone.
COPIES = "paged-cache-not-written"
KV_DTYPES = {"scores-low-precision": ("bfloat16",), "scale-folded-low-precision": ("bfloat16",)}
# the writer's label -> the diagnosis keys that state that bug (the first is the one expected first)
KEYS = {
    "window-swapped": ("flash-window-swapped",), "softcap-before-scale": ("flash-softcap-scale",),
    "softcap-after-mask": ("mod-after-mask",), "alibi-one-row": ("flash-alibi-one-row",),
    "lse-base2": ("lse-base2",), "lse-unscaled": ("lse-unscaled",), "lse-other": ("lse-shift",),
    "causal-top-left": ("api-top-left",), "dead-rows-mean": ("dead-rows",), "dead-rows-nan": ("dead-rows",),
    "flex-mod-after-mask": ("mod-after-mask",), "flex-block-size": ("flex-block-size",),
    "flex-partial-as-full": ("flex-partial-as-full",), "flex-mod-index": ("flex-mod-index",),
    "scores-low-precision": ("scores-rounded",), "scale-folded-low-precision": ("scale-folded",),
    "float32-in-float64": ("float32-in-float64",), "softmax-low-precision": ("softmax-half", "scores-rounded"),
    "new:gqa-heads-by-repeat": ("gqa",), "new:partial-blocks-skipped": ("flex-full-only",),
    "new:score-mod-given-kv-head": ("flex-mod-kv-head",), "new:zero-pad-keys-attended": ("pad-keys",),
    "new:last-partial-tile-dropped": ("tail-dropped",), "new:alibi-signed-distance": ("flash-alibi-signed",),
    "new:window-left-edge-off-by-one": ("flash-window-edge",),
}
# lines that may come beside a bug's own, truthfully (a fact of the same failure, said another way)
ALSO = {"scores-rounded": {"bfloat16"}, "scale-folded": {"bfloat16"}, "softmax-half": {"bfloat16"},
        "float32-in-float64": {"float64"}, "lse-base2": {"lse-only"}, "lse-unscaled": {"lse-only"},
        "lse-shift": {"lse-only"}, "dead-rows": {"lse-dead-rows"},
        # the rows its skipped blocks leave with no key hold the mean of V in bfloat16 (the reference's finite fill
        # there), where PyTorch's are zeros: the dead-rows line says so of those rows, truthfully
        "flex-full-only": {"dead-rows"}}
NOT_CAUSES = registry.NAMES_NOTHING  # what happened, or what the failing cases share: no cause
# Bugs this grid cannot see, each measured: their error is within the rule (2 x PyTorch's + the floor) on every case
WITHIN_THE_RULE = {
    "sdpa_softmax_input_dtype": "a softmax in bfloat16: its error is within twice PyTorch's own in bfloat16 on every "
                                "case, which the rule allows by design",
}


@dataclass
class Outcome:
    name: str
    api: str
    labels: tuple
    killed: bool
    keys: list[str]

    @property
    def wanted(self) -> list[tuple]:
        return [KEYS.get(label, ()) for label in self.labels]

    @property
    def first(self) -> bool:
        """One known bug: its line first; several: each among the lines."""
        known = [w for w in self.wanted if w]
        if len(self.labels) == 1 and known:
            return bool(self.keys) and self.keys[0] in known[0]
        return self.named

    @property
    def named(self) -> bool:
        return all(any(k in self.keys for k in w) for w in self.wanted if w)

    @property
    def false(self) -> list[str]:
        ok = {k for w in self.wanted for k in w} | {a for w in self.wanted for k in w for a in ALSO.get(k, ())}
        return [k for k in self.keys if k not in ok and k not in NOT_CAUSES]


def run(seed: int = 0, names=None, dtypes=DTYPES) -> dict[str, Outcome]:
    """{kernel: Outcome} over the quick grid of its API, in ``dtypes``, dropout left out (no kernel draws it)."""
    out = {}
    for name, (fn, api, labels) in api_mutants.CORPUS.items():
        if (names is not None and name not in names) or api in KV_APIS:
            continue
        target = fn if api == "sdpa" else apis.Adapted(fn, api)
        cases = [c for c in apis.cases(api, dtypes, long=False) if api == "sdpa" or not apis.skip_reason(c)]
        r = verify.verify({name: target}, cases, seed=seed, timeout=None, check_dropout=False)
        keys = named(diagnose.diagnose(r, name))
        out[name] = Outcome(name, api, tuple(labels), not r.passed, keys)
    return out


def table(outcomes: dict[str, Outcome]) -> str:
    lines = [f"{'KILLED' if o.killed else 'ALIVE '}  {o.name[:36]:36s} {o.api:18s} "
             f"want {'+'.join(o.labels) or '-':30s} got {', '.join(o.keys)}" + (f"  FALSE {o.false}" if o.false else "")
             for o in outcomes.values()]
    right = [o for o in outcomes.values() if not o.labels]
    single = [o for o in outcomes.values() if len(o.labels) == 1 and o.wanted[0]]
    multi = [o for o in outcomes.values() if len(o.labels) > 1]
    unknown = [o for o in outcomes.values() if len(o.labels) == 1 and not o.wanted[0]]
    lines.append(f"right kernels failed {sum(o.killed for o in right)} of {len(right)}; wrong ones killed "
                 f"{sum(o.killed for o in outcomes.values() if o.labels)} of {len(outcomes) - len(right)}; single "
                 f"bugs named first {sum(o.first for o in single)} of {len(single)}; two bugs all among the lines "
                 f"{sum(o.named for o in multi)} of {len(multi)}; bugs with no line of their own {len(unknown)}; "
                 f"false lines {sum(len(o.false) for o in outcomes.values())}")
    return "\n".join(lines)


def kv_kernels() -> dict:
    return {name: (fn, api, labels) for name, (fn, api, labels) in api_mutants.CORPUS.items() if api in KV_APIS}


def run_kv(seed: int = 0) -> list[kv_bugs.Outcome]:
    """The varlen and paged-decode kernels, forward only, in float32 (bfloat16 for a precision bug)."""
    out = []
    for name, (fn, api, labels) in kv_kernels().items():
        want = [kv_bugs.LABEL_KEYS[label] for label in labels]
        dtypes = next((KV_DTYPES[label] for label in labels if label in KV_DTYPES), ("float32",))
        out.append(kv_bugs.judge(f"{name} [seed {seed}]", fn, api, want, dtypes=dtypes, seed=seed, backward=False))
    return out


def set_aside(outcomes: list[kv_bugs.Outcome]) -> list[kv_bugs.Outcome]:
    """The outcomes without the :data:`COPIES` line (a right kernel with that line alone: passed)."""
    rest = [replace(o, keys=[k for k in o.keys if k != COPIES]) for o in outcomes]
    return [replace(o, counts={**o.counts, "fail": 0, "error": 0}) if not o.bugs and not o.keys else o for o in rest]
