"""Level 6, decoding with a KV cache: ``decode_step(q, k, v, cache)``, one token at a time.

A model that generates text sees one new token per step. Its query attends to every key so far, its
own included; the keys and values of the earlier tokens do not change, so they are kept (the cache)
and each step appends one. The check feeds the learner's function a sequence token by token --
``decode_step(q_t, k_t, v_t, cache)`` with (B, H, 1, d) tensors and the cache it returned the step
before (None at first) -- and holds the outputs, stacked, to the float64 oracle's full causal forward
under verify's rule (PyTorch's causal forward in the same dtype sets the limit). Slips named: the
cache read before the new key is appended (a token that does not see itself), the cache dropped
(a token that sees only itself), and attention's own (:mod:`.slips`). Measured: the time to decode
T tokens and the extra peak memory, which the cache makes grow like T.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnlab.judge import oracle, rule

from . import own, slips

CASES = (("basic", (1, 2, 20, 8), "float64"), ("float32, batch 2, d = 16", (2, 1, 33, 16), "float32"))
SEQS = (128, 256, 512)
MEASURES = "the time to decode T tokens and the peak memory at T = " + ", ".join(map(str, SEQS))


def inputs(i: int, seed: int):
    _, shape, dtype = CASES[i]
    g = torch.Generator().manual_seed(seed * 100 + i)
    return tuple(torch.randn(*shape, generator=g, dtype=torch.float64).to(getattr(torch, dtype)) for _ in range(3))


def decode(fn, q, k, v) -> torch.Tensor:
    """The learner's step run over the sequence, token by token; the outputs side by side (B, H, T, d)."""
    cache, outs = None, []
    for t in range(q.shape[-2]):
        out, cache = fn(q[..., t:t + 1, :], k[..., t:t + 1, :], v[..., t:t + 1, :], cache)
        outs.append(own.expect_like(out, q[..., t:t + 1, :], f"step {t}", "(B, H, 1, d)"))
    return torch.cat(outs, dim=-2)


def run(fn, header: dict) -> dict:
    if header.get("what") == "measure":
        return measure(fn, header)
    if header.get("what") == "extra":
        return {}
    cases = []
    for i in own.indices(header, len(CASES)):
        try:
            with torch.no_grad():
                out = decode(fn, *inputs(i, header["seed"]))
            cases.append({"values": {"out": own.pack(out)}, "dtypes": [str(out.dtype).removeprefix("torch.")]})
        except Exception as e:
            cases.append({"error": own.said(e)})
    return {"cases": cases}


def judge(reply: dict, seed: int, name: str = "decode_step"):
    rows, got, right = [], [], []
    replies = reply.get("cases") or [{"error": reply.get("raised", "no answer")}] * len(CASES)
    for i, ((cname, _, dtype), r) in enumerate(zip(CASES, replies, strict=True)):
        q, k, v = inputs(i, seed)
        ref = oracle.reference(q, k, v, is_causal=True)
        right.append({"out": ref})
        if (gone := own.answered(r, name, cname, dtype)) is not None:
            rows.append(gone)
            got.append(None)
            continue
        mine = own.unpack(r["values"]["out"])
        if (bad := own.wrong_shape({"out": mine}, {"out": ref})) is not None:
            rows.append(own.row(name, cname, dtype, [], error=f"returned {bad}"))
            got.append(None)
            continue
        got.append({"out": mine})
        theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        budget = rule.rounding_floor(q, k, v, is_causal=True)["out"]
        rows.append(own.row(name, cname, dtype, [own.compare("out", mine, theirs, ref, q.dtype, budget)]))
        if r["dtypes"][0] != dtype:
            rows[-1].status, rows[-1].detail = "fail", f"returned {r['dtypes'][0]} for {dtype} inputs"
    keys = own.named(got, right, slip_list(seed)) if any(r.status != "pass" for r in rows) else []
    errs = [float((m["out"].double() - right[i]["out"]).abs().max()) for i, m in enumerate(got) if m is not None]
    err = max(errs) if len(errs) == len(CASES) else math.inf
    note = f"{len(CASES)} sequences decoded token by token against the full causal forward (float64, float32)"
    return rows, own.lines(keys, TEXT), err, note


def slip_list(seed: int):
    def of(f):
        return lambda i: {"out": f(*(t.double() for t in inputs(i, seed)))}
    def before_append(first_sees_itself: bool):
        def f(q, k, v):
            seen = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(-1)
            seen[0, 0] = first_sees_itself  # the first step: nothing cached, so the new key is all there is
            return slips._plain(q, k, v, visible=seen)
        return of(f)

    # the cache read before the append, the first step attending to nothing (zeros) or to the new token alone
    before = [("cache-before-append", before_append(False)), ("cache-before-append-first", before_append(True))]
    return before + [("cache-dropped", of(lambda q, k, v: v))] + [(key, of(f)) for key, f in slips.common()]


TEXT = {
    "cache-before-append": "your step reads the cache before the new token's key and value are in it: a token must "
                           "see itself; append k and v first, then attend",
    "cache-before-append-first": "your step reads the cache before the new token's key and value are in it: after "
                                 "the first step a token never sees itself; append k and v first, then attend",
    "cache-dropped": "your step attends to the new token alone: the keys and values of the tokens before it are not "
                     "kept, or not read (append them to the cache and attend to all of it)",
    **slips.TEXT,
}


def measure(fn, header: dict) -> dict:
    """Time and extra peak memory of decoding T tokens one at a time (one head of width 64, float32)."""

    def call(q, k, v):
        with torch.no_grad():
            return decode(fn, q, k, v)

    return own.measure_lengths(SEQS, header["seed"], lambda T, g: [torch.randn(1, 1, T, 64, generator=g)
                                                                   for _ in range(3)], call,
                               "T tokens decoded one at a time, batch 1, one head of width 64, float32, no autograd")


def measured_ok(result) -> tuple[bool | None, str]:
    done = [t.seq for t in result.timings if t.time_s is not None]
    return (bool(done) or None), (f"decoded T = {', '.join(map(str, done))} tokens" if done else "not measured")


def check(learner, quick=False, seed=0, progress=None, on_stage=None, budget_s=20.0):
    from . import BY_NAME

    return own.check(BY_NAME["decode"], learner, lambda h, seconds: learner.fn.ask("level", seconds=seconds, **h),
                     lambda reply, s: judge(reply, s, learner.name), seed=seed, on_stage=on_stage, budget_s=budget_s)
