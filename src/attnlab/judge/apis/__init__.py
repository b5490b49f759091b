"""The APIs kernel authors implement, judged by the one oracle: SDPA's, FlashAttention's (dense and varlen),
FlexAttention's, and decode over a paged KV cache.

A case of the grid is one problem in the oracle's terms (:class:`attnlab.judge.cases.Case`: sizes, a mask,
a scale, a score modifier). An API case is such a problem with ``Case.api`` saying how it is put to the API, in
words: ``"flash-attn causal window=8,0 softcap"``, ``"flash-attn-varlen q=5,17,1 k=5,17,30 causal"``. Each API's
module says once what its arguments mean in the oracle's terms (a dense mask, a score modifier), and how to call
the function: it builds the API's arguments from the judge's (N, H, L, E) tensors, calls, and reads the output
and the log-sum-exp back into the oracle's layout. The judge then holds them to the same rule as ever
(:mod:`attnlab.judge.judge`); the log-sum-exp's own oracle and rule are in :mod:`.lse`.

Cases of the grid an API cannot express (a bool mask for ``flash_attn_func``, dropout for FlexAttention) stay in
the grid as skipped rows that say why (:func:`skip_reason`).
"""

from __future__ import annotations

import importlib
import math
from dataclasses import replace

from attnlab.judge import hint as H
from attnlab.judge.cases import Case, default_cases, make_inputs
from attnlab.judge.facts import Cause

NAMES = ("sdpa", "flash-attn", "flash-attn-varlen", "flex", "paged-decode")
_MODULES = {"flash-attn": "flash", "flash-attn-varlen": "varlen", "flex": "flex", "paged-decode": "paged"}
UNEXPRESSED = "unexpressed"
# the problems an API's own check finds whose sentence holds what it measured (where a call wrote into the cache)
MEASURED_PROBLEMS = ("paged-cache-not-written", "paged-cache-wrong-slots", "paged-cache-touched",
                     "paged-cache-written", "paged-page-id-off", "paged-table-index-off", "paged-table-ignored",
                     "paged-new-kv-wrong-slot")  # the word an API case carries when the API cannot put the grid's case


CAUSES = (  # what every API's hints can say (each module adds its own)
    Cause('api-mask-ignored', "the API's mask is ignored: the output matches attention with no mask (causal=, "
                              "window_size=, block_mask=, the sequences' packing or cache_seqlens left out)"),
)


def causes() -> list:
    """The causes the APIs add to the judge's table (:func:`attnlab.judge.causes.table`): these, the log-sum-exp's
    and each API module's ``CAUSES``."""
    from attnlab.judge.apis import lse

    return [*CAUSES, *lse.CAUSES, *(c for name in _MODULES for c in getattr(module(name), "CAUSES", ()))]


def module(name: str):
    """The module of an API (not sdpa's, which is the judge's own)."""
    if name not in _MODULES:
        raise ValueError(f"no such API {name!r}; choose from {', '.join(NAMES)}")
    return importlib.import_module(f"attnlab.judge.apis.{_MODULES[name]}")


def parse(text: str) -> tuple[str, dict]:
    """``"flash-attn causal window=8,0"`` -> ("flash-attn", {"causal": True, "window": (8, 0)}): a word alone is a
    flag, ``key=a,b`` a tuple of numbers, ``key=a`` one number."""
    name, *words = text.split()
    args: dict = {}
    for w in words:
        key, _, value = w.partition("=")
        if not value:
            args[key] = True
            continue
        nums = tuple(_number(x) for x in value.split(",") if x)
        args[key] = nums if "," in value else nums[0]
    return name, args


def _number(x: str):
    try:
        return int(x)
    except ValueError:
        return float(x)


def words(name: str, **args) -> str:
    """The inverse of :func:`parse` (flags that are False, and None values, left out)."""
    out = [name]
    for key, value in args.items():
        if value is True:
            out.append(key)
        elif isinstance(value, tuple):
            out.append(f"{key}={','.join(str(x) for x in value)}" + ("," if len(value) == 1 else ""))
        elif value not in (None, False):
            out.append(f"{key}={value}")
    return " ".join(out)


def cases(api: str, dtypes=("float32", "float64", "bfloat16"), long: bool = True, probes: bool = True,
          sinks: bool = True) -> list[Case]:
    """The grid put to ``api``: the API's probes (``probes``; :mod:`attnlab.judge.probes`: designed inputs that
    measure its semantics), every case of verify's grid the API can express, the ones it cannot as skipped rows, then
    the API's own cases (windows, ALiBi, packed lengths, page tables), then (``sinks``) its sink cases
    (:mod:`attnlab.judge.sink_cases`), which only a function that takes sinks is given (verify leaves them out of
    any other's rows)."""
    from attnlab.judge import sink_cases
    from attnlab.judge.probes import cases as probe_cases

    grid = default_cases(list(dtypes), long=long)
    measured = probe_cases.for_dtypes(api, dtypes, sinks) if probes else []  # first: what they measure, the grid is
    sunk = [replace(c, dtype=dt) for dt in dtypes for c in sink_cases.cases(api)] if sinks else []  # held to
    if api == "sdpa":
        return measured + grid + sunk
    m = module(api)
    out = []
    for c in grid:
        e = m.express(c)
        out.append(e if isinstance(e, Case) else replace(c, api=f"{api} {UNEXPRESSED}"))
    return measured + out + [replace(c, dtype=dt) for dt in dtypes for c in m.extra()] + sunk


def skip_reason(case: Case) -> str | None:
    """Why the API cannot run this case (None: it can)."""
    name, args = parse(case.api)
    if not args.get(UNEXPRESSED):
        return None
    why = module(name).express(replace(case, api=None))
    return why if isinstance(why, str) else None


def backward(case: Case) -> bool:
    return module(parse(case.api)[0]).BACKWARD


def quantities(case: Case) -> list[str]:
    """What is judged on an API case: the output, the gradients where the API has a backward, the log-sum-exp."""
    from attnlab.judge import mod_cases

    grads = ["dq", "dk", "dv", *mod_cases.PARAM_NAMES.get(case.mod, []), *(["dsinks"] if case.sinks else [])] \
        if backward(case) else []
    return ["out", *grads, "lse"]


def inputs(case: Case, seed: int, device="cpu"):
    """A case's tensors as :func:`attnlab.judge.cases.make_inputs` gives them, the mask being the API's
    arguments in the oracle's terms (:func:`visible` of the API's module) where the API has its own."""
    name, args = parse(case.api)
    m = module(name)
    if not hasattr(m, "visible"):
        return make_inputs(case, seed, device)
    q, k, v, _, _, grad_out = make_inputs(replace(case, mask=None, api=None), seed, device)
    dense = m.visible(case, args)
    dense = None if dense is None else dense.to(device)
    return q, k, v, dense, dense, grad_out


def modifier(case: Case):
    """The score modifier the API's arguments mean (softcap, ALiBi), as the judge's ``fresh``; None: the case's
    own (:mod:`attnlab.judge.mod_cases`)."""
    name, args = parse(case.api)
    build = getattr(module(name), "score_mod", None)
    mod = build(case, args) if build is not None else None
    if mod is None:
        return None
    return lambda dtype=None, device=None: (mod, [])


def hints(case: Case, x, out, exp, limit: float, learned: tuple = (), slack: float | None = None
          ) -> tuple[list[str], object]:
    """The wrong semantics a failing API case's output matches (keys of :func:`attnlab.judge.causes.table`), row by
    row (:mod:`attnlab.judge.explain`): the API's mask ignored, the scale, the key heads, the dead rows, and the API
    module's own (``alternatives(case, args)``: a window swapped, causal aligned top-left, a sequence's keys
    leaking into the next ...); and the output with those causes taken out. ``slack``: how far past the limit an
    output may sit from an alternative's answer and still be it (default: a rounding's in the inputs' dtype)."""
    import torch

    from attnlab.judge import explain, hypotheses, precision

    if not isinstance(out, torch.Tensor) or out.shape != exp.ref[0].shape or not math.isfinite(limit):
        return [], None
    base, alts = questions(case, x, exp, learned)
    ex = explain.explain(out, exp.ref[0], limit, base, alts, hypotheses.mean_of_v(exp), hypotheses.dead_rows(exp),
                         slack=precision.noise(x.q.dtype, exp.fwd, exp.ref[0]) if slack is None else slack)
    keys = list(dict.fromkeys(_unnumbered(k) for k in ex.keys))
    if case.magnitude > 1:  # scores in the hundreds: the softmax picks one key, and readings of the mask that differ
        # in the others agree: they only join what others name (a key explain marked so already stays as it is)
        return [H.as_support(k) for k in keys], None
    return keys, ex.corrected


def questions(case: Case, x, exp, learned: tuple = ()) -> tuple[dict, list]:
    """:func:`_questions`, with a probe's measured rules among the alternatives."""
    base, alts = _questions(case, x, exp)
    if learned:
        from attnlab.judge.probes import learned as measured

        alts = alts + measured.alternatives(list(learned))
    return base, alts


def _questions(case: Case, x, exp) -> tuple[dict, list]:
    """The oracle's arguments for the case, and the API's alternatives to them (each key once: see _numbered)."""
    import torch

    from attnlab.judge import oracle

    name, args = parse(case.api)
    mod64, _ = exp.fresh(torch.float64, "cpu")
    q, k, v = (t.detach().double().cpu() for t in (x.q, x.k, x.v))
    base = dict(query=q, key=k, value=v, attn_mask=oracle.cpu64(x.dense), is_causal=case.is_causal, scale=case.scale,
                enable_gqa=case.gqa, score_mod=mod64, sinks=x.sinks)
    own = getattr(module(name), "alternatives", None)
    return base, _numbered([*_common(case, x), *(own(case, args) if own is not None else ())])


def lse_hints(case: Case, x, lse, exp, limit: float) -> list[str]:
    """Where the log-sum-exp alone fails (the output within its rule): the alternatives whose own log-sum-exp the
    function's is on every failing row, marked as support (``~key``): they join a line the function's other cases
    name -- a bfloat16 row whose output hides a dropped key within its rule shows it in its float32 lse -- and say
    nothing alone."""
    import torch

    from attnlab.judge import oracle

    ref = exp.fwd.lse
    if not isinstance(lse, torch.Tensor) or lse.numel() != ref.numel() or not math.isfinite(limit):
        return []
    mine = lse.detach().double().cpu().reshape(ref.shape)

    def near(a, b, tol):
        return ((a - b).abs() <= tol) | (torch.isinf(a) & torch.isinf(b) & (a.sign() == b.sign()))

    bad = ~near(mine, ref, limit) & ~(torch.isneginf(ref) & torch.isinf(mine))  # (either infinity passes a row
    if not bad.any():  # that sees no key, as lse.compare rules)
        return []
    base, alts = _questions(case, x, exp)
    found = []
    for a in alts:
        try:
            alt = None if a.change is None else oracle.answer(**a.change(dict(base)))[1].lse
        except (TypeError, ValueError, RuntimeError, IndexError, KeyError):  # a change these arguments do not take
            continue
        if alt is not None and alt.shape == ref.shape and bool(near(mine, alt, limit)[bad].all()) \
                and bool((~near(alt, ref, 2 * limit))[bad].all()):
            found.append(H.as_support(_unnumbered(a.key)))
    return list(dict.fromkeys(found))


def telling(groups):
    """(key, what) for each wrong answer an API's alternatives give -- ``groups`` maps an answer to (the set of keys
    that give it, what to compute it with). Where several causes give it alike, each is yielded (explain ties them
    and the diagnosis settles the tie from the function's other cases), but a cause with another on top ("a+b")
    is not where a single cause gives the same (a bug, and one that changes nothing on this case)."""
    for keys, what in groups:
        single = sorted(k for k in keys if "+" not in k)
        least = sorted(k for k in keys if all(set(k.split("+")) <= set(o.split("+")) for o in keys))
        for k in single or least[:1]:
            yield k, what


def tied(groups) -> set:
    """The answers (keys of ``groups``, as :func:`telling` reads them) that several causes give alike: a change made
    on top of one of them would name one of those causes at random, so none is."""
    return {sig for sig, (keys, _) in groups.items() if len([k for k in keys if "+" not in k]) > 1}


VARIANT = "#"  # "key#2": the second way a cause can read (its edges, its alignment), told apart while explaining


def _unnumbered(hint: str) -> str:
    """A hint without its variants' numbers ("a#2|b" -> "a|b"; "a|a#2" -> "a")."""
    return H.tie(dict.fromkeys(k.split(VARIANT)[0] for k in H.readings(hint)), H.supporting(hint))


def _numbered(alts: list) -> list:
    """The alternatives with each key once: a cause's further variants numbered (explain tells its candidates
    apart by key), the number dropped again from what explain finds."""
    seen: dict[str, int] = {}
    out = []
    for a in alts:
        n = seen[a.key] = seen.get(a.key, 0) + 1
        out.append(a if n == 1 else replace(a, key=f"{a.key}{VARIANT}{n}"))
    return out


def _common(case: Case, x=None):
    """What any API's kernel can get wrong as SDPA's can: its mask left out, the scale, the key heads, the sinks."""
    from attnlab.judge import explain, hypotheses, sink_causes

    yield from sink_causes.alternatives(case, x)
    A = explain.Alternative
    yield A("api-mask-ignored", lambda kw: {**kw, "attn_mask": None, "is_causal": False})
    if case.scale is not None:
        yield A("scale-ignored", lambda kw: {**kw, "scale": None})
    yield A("unscaled", lambda kw: {**kw, "scale": 1.0})
    if case.gqa:
        yield A("gqa-repeat", hypotheses.repeated(case.H // (case.Hkv or case.H)))
    if case.mod is not None:
        yield A("mod-after-mask", hypotheses.modified_after_mask)
        yield from hypotheses.modified_after_mask_tiled(case.L, case.S or case.L)
    if case.dropout_p == 0:
        pages = parse(case.api)[1].get("block") if case.api else None
        yield from hypotheses.not_rescaled(case.S or case.L, (pages,) if isinstance(pages, int) else ())


def writes(api: str) -> tuple[int, ...]:
    """The positions of the arguments an API's call writes in place by design (paged-decode's k_cache, v_cache),
    which its module checks itself; every other tensor it is given must come back unchanged."""
    return getattr(module(api), "WRITES", ())


class Adapted:
    """A function written to an API, called by the judge as it calls SDPA's: :meth:`call_case` builds the API's
    arguments for the case from the (N, H, L, E) tensors and returns (out in the oracle's layout, the log-sum-exp
    (N, H, L) or None, the problems the API's own checks found)."""

    def __init__(self, fn, api: str):
        if api not in _MODULES:
            raise ValueError(f"no such API {api!r}; choose from {', '.join(NAMES)}")
        self.fn, self.api = fn, api
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)

    def __repr__(self) -> str:
        return f"Adapted({self.__qualname__}, {self.api!r})"

    def call_case(self, q, k, v, case: Case, dropout_p: float = 0.0, score_mod=None, sinks=None):
        """(out, lse, problems): ``problems`` ([key, sentence] each) what the API's own checks found wrong beyond the
        output -- a KV cache written in the wrong slots, an argument changed in place. ``sinks``: a sink case's (H,),
        passed as the API's ``learnable_sink=``."""
        name, args = parse(case.api or self.api)
        if name != self.api:
            raise ValueError(f"a {name} case given to a {self.api} function")
        extra = {} if sinks is None else {"sinks": sinks}  # (an API without sinks is never given a sink case)
        out, lse, *problems = module(name).call(self.fn, q, k, v, case, args, dropout_p, score_mod, **extra)
        return out, lse, (problems[0] if problems else [])
