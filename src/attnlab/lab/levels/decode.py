"""Level 6, decoding with a KV cache: ``decode_step(q, k, v, cache, pos)``, one token at a time, with RoPE.

A model that generates text sees one new token per step. Its query attends to every key so far, its
own included; the keys and values of the earlier tokens do not change, so they are kept -- here in
two tensors made once, (B, H, T_max, d), the token at position ``pos`` in slot ``pos`` -- and
positions enter as rotations (RoPE, :mod:`attnlab.nn.rope`): a key is turned once, at its own
position, when it enters the cache. The check feeds the learner's step a sequence token by token,
from an empty cache and from one that already holds a prompt (the offset case: the first new token
is at position P, and a step that turns it to any other position scores it wrongly against the
prompt's keys), and holds each step's output to the float64 oracle's full causal forward of the
rotated sequence under verify's rule (PyTorch's in the same dtype sets the limit). A failing case
says which step first goes wrong. Slips are named from the outputs (:mod:`.decoding` computes each):
``F.scaled_dot_product_attention(..., is_causal=True)`` for one query against the cache (aligned top
left, the token sees only key 0), a slot off by one, the cache read before the write, empty slots
attended, positions left out or off.
"""

from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F

from attnlab.judge import oracle, rule
from attnlab.nn import rope

from . import decoding, own, ways

CASES = (  # name, (batch, heads, T, d), dtype, prompt: tokens already in the cache
    ("from an empty cache", (1, 2, 20, 8), "float64", 0),
    ("float32, batch 2, d = 16, from an empty cache", (2, 1, 33, 16), "float32", 0),
    ("a prompt of 12 in the cache, then positions 12 .. 20", (1, 2, 21, 16), "float64", 12),
    ("float32, a prompt of 30, then positions 30 .. 39", (2, 2, 40, 8), "float32", 30),
    ("bfloat16, a prompt of 6, then positions 6 .. 17", (1, 2, 18, 16), "bfloat16", 6),
)
SPARE = 3  # empty slots after the last token (a step that reads them attends to zeros)
SEQS = (128, 256, 512)
MEASURES = "the time to decode T tokens and the peak memory at T = " + ", ".join(map(str, SEQS))


def inputs(i: int, seed: int):
    _, shape, dtype, _ = CASES[i]
    g = torch.Generator().manual_seed(seed * 100 + i)
    return tuple(torch.randn(*shape, generator=g, dtype=torch.float64).to(getattr(torch, dtype)) for _ in range(3))


def decode(fn, q, k, v, prompt: int = 0, spare: int = SPARE) -> torch.Tensor:
    """The learner's step run over positions prompt .. T - 1, the prompt's rotated keys and values already in the
    cache; the outputs side by side, (B, H, T - prompt, d). An error names the step."""
    B, H, T, d = q.shape
    k_cache, v_cache = q.new_zeros(B, H, T + spare, d), q.new_zeros(B, H, T + spare, d)
    k_cache[..., :prompt, :] = rope.apply(k[..., :prompt, :], torch.arange(prompt))
    v_cache[..., :prompt, :] = v[..., :prompt, :]
    outs = []
    for pos in range(prompt, T):
        one = slice(pos, pos + 1)
        try:
            out = fn(q[..., one, :], k[..., one, :], v[..., one, :], (k_cache, v_cache), pos)
        except Exception as e:
            e.position = pos  # which step raised, for its row
            raise
        outs.append(own.expect_like(out, q[..., one, :], f"the step at position {pos}", "(B, H, 1, d)"))
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
                out = decode(fn, *inputs(i, header["seed"]), CASES[i][3])
            cases.append({"values": {"out": own.pack(out)}, "dtypes": [str(out.dtype).removeprefix("torch.")]})
        except Exception as e:
            at = getattr(e, "position", None)
            cases.append({"error": (f"at position {at}: " if at is not None else "") + own.said(e)})
    return {"cases": cases}


def rotated(q, k, v):
    """q and k turned to their positions 0 .. T - 1, as the decoder sees them."""
    pos = torch.arange(q.shape[-2])
    return rope.apply(q, pos), rope.apply(k, pos), v


def judge(reply: dict, seed: int, name: str = "decode_step"):
    rows, got, right = [], [], []
    replies = reply.get("cases") or [{"error": reply.get("raised", "no answer")}] * len(CASES)
    for i, ((cname, _, dtype, P), r) in enumerate(zip(CASES, replies, strict=True)):
        q, k, v = rotated(*inputs(i, seed))
        ref = oracle.reference(q.double(), k.double(), v.double(), is_causal=True)[..., P:, :]
        right.append({"out": ref})
        if "returned dtype" in r.get("error", "") and "not the inputs' dtype" in r["error"]:  # a step's output in
            rows.append(own.row(name, cname, dtype, [], r["error"].removeprefix("TypeError: ")))  # another dtype:
            got.append(None)  # a failing case of its own (the step stopped there), not an exception of the code's
            continue
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
        theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)[..., P:, :]
        budget = rule.rounding_floor(q, k, v, is_causal=True)["out"]
        c = own.compare("out", mine, theirs, ref, q.dtype, budget)
        rows.append(own.row(name, cname, dtype, [c], _first_wrong(mine, ref, c.allowed, P)))
        if r["dtypes"][0] != dtype:
            rows[-1].status, rows[-1].detail = "fail", f"returned {r['dtypes'][0]} for {dtype} inputs"
    keys = own.named([g if c[2] != "bfloat16" else None for g, c in zip(got, CASES, strict=True)], right,
                     slip_list(seed), [c[2] for c in CASES], pairs=slip_list(seed, both=True)) if any(
        r.status != "pass" for r in rows) else []  # (read from the full-precision cases: a slip's answer in bfloat16,
    # its scores unscaled or turned, is not the learner's to the reading's tolerance; its case holds it to the rule)
    if any(r.status == "fail" and re.search(r"returned (dtype )?\w+ (on \w+, not the inputs' dtype|for \w+ inputs)",
                                             r.detail) for r in rows):
        keys.append("dtype")  # a fact of the reply, said beside any slip the values show
    full = [i for i, c in enumerate(CASES) if c[2] != "bfloat16"]  # the match is of the full-precision cases (a
    # bfloat16 answer is 1e-2 from the float64 one however it is computed; its case holds it to PyTorch's error)
    errs = [float((got[i]["out"].double() - right[i]["out"]).abs().max()) for i in full if got[i] is not None]
    err = max(errs) if len(errs) == len(full) else math.inf
    note = (f"{len(CASES)} sequences decoded token by token, two of them after a prompt already in the cache, against "
            "the full causal forward with RoPE (float64, float32, bfloat16)")
    return rows, own.lines(keys, TEXT, rows), err, note


def _first_wrong(mine, ref, allowed: float, prompt: int) -> str:
    """Which step first goes wrong, where one does: its position and its error."""
    per_step = (mine.double() - ref).abs().nan_to_num(nan=math.inf).amax(dim=(0, 1, 3))  # (steps,)
    bad = (per_step > allowed).nonzero()
    if not len(bad):
        return ""
    t = int(bad[0])
    return (f"the first step that goes wrong is step {t + 1} (position {prompt + t}): its output is "
            f"{float(per_step[t]):.2e} from the float64 answer, allowed {allowed:.2e}")


def slip_list(seed: int, both: bool = False):
    """(key, case index -> the slip's outputs): each one step of the decoder done wrong, run over the case (``both``:
    two at once, keyed by both keys)."""
    def at(slip):
        return lambda i: {"out": decoding.decode64(*(t.double() for t in inputs(i, seed)), CASES[i][3], SPARE, slip)}
    entries = [(key, decoding.Slip(**kw)) for key, kw in decoding.SLIPS]
    return [(key, at(s)) for key, s in entries] if not both else [(keys, at(s)) for keys, s in ways.pairs(entries)]


TEXT = {
    "dtype": "your step returns its output in another dtype than the inputs' (the detail of each case says which): "
             "compute in float32 if you like, but return q.dtype",
    "sdpa-causal": "your step calls F.scaled_dot_product_attention(..., is_causal=True) for one new query against "
                   "the cache: PyTorch aligns that mask at the top left, so the query sees key 0 alone. A decoding "
                   "step needs no mask: the cache holds only what came before, and the token itself",
    "before-write": "your step reads the cache before the new token's key and value are in it (or stops one slot "
                    "short): a token must see itself; write slot pos first, then attend to slots 0 .. pos",
    "slot-ahead": "your step reads an empty slot where the new token's key belongs: it writes the token one slot "
                  "too far on (slot pos + 1), or reads slots 0 .. pos before writing slot pos (the same scores); "
                  "write slot pos first, then attend to slots 0 .. pos",
    "slot-behind": "your step writes the new token one slot short (slot pos - 1), over the token before it: slot pos "
                   "is the token at position pos",
    "whole-buffer": "your step attends to every slot of the cache, the empty ones after pos too (zero keys score 0 "
                    "and still get weight): attend to slots 0 .. pos only",
    "cache-not-written": "your step never writes the cache: the next steps find zeros where this token's key and "
                         "value belong; write them into slot pos",
    "cache-dropped": "your step attends to the new token alone: the keys and values of the tokens before it, in "
                     "slots 0 .. pos - 1, must be read too",
    "no-rope": "your step gives q and k no position: turn both to the token's position, rotate(x, pos), before "
               "attending and before the key goes into the cache (turning them to 0 turns nothing, and turning every "
               "key to the new token's position when it is read cancels out in q·k)",
    "rope-q-only": "your step rotates the query but not the key it keeps: rotate k too, at pos, before it goes into "
                   "the cache",
    "rope-k-only": "your scores are those of a query that is not turned against keys turned once: rotate q at pos "
                   "(and turn each key once, when it goes into the cache -- turning the cached keys again by pos "
                   "when you read them undoes q's turn)",
    "rope-offset": "your step turns q and k to a position other than pos (one off?): among the new tokens that "
                   "cancels, but against the prompt already in the cache the distances are wrong; use rotate(x, pos)",
    "rope-v": "your step rotates v too: only q and k carry positions (their dot product is what RoPE changes); keep "
              "the values as they are",
    "softmax-dim": "your softmax runs over the wrong axis: the scores are (B, H, 1, t + 1), one row of the new query "
                   "against every key; normalise over the keys, dim=-1",
    "unscaled": "your scores are not scaled: divide each q·k by √d, d = q.shape[-1]",
    "scale-1/d": "your scores are divided by d, not by √d",
    "scale-length": "your scores are divided by the square root of the number of keys; divide by √d, the head width",
}


def measure(fn, header: dict) -> dict:
    """Time and extra peak memory of decoding T tokens one at a time (one head of width 64, float32)."""

    def call(q, k, v):
        with torch.no_grad():
            return decode(fn, q, k, v, 0, 0)

    return own.measure_lengths(SEQS, header["seed"], lambda T, g: [torch.randn(1, 1, T, 64, generator=g)
                                                                   for _ in range(3)], call,
                               "T tokens decoded one at a time into a cache of T slots, batch 1, one head of width "
                               "64, float32, no autograd")


def measured_ok(result) -> tuple[bool | None, str]:
    done = [t.seq for t in result.timings if t.time_s is not None]
    return (bool(done) or None), (f"decoded T = {', '.join(map(str, done))} tokens" if done else "not measured")


def check(learner, quick=False, seed=0, progress=None, on_stage=None, budget_s=20.0):
    from . import BY_NAME

    return own.check(BY_NAME["decode"], learner, own.asker(learner),
                     lambda reply, s: judge(reply, s, learner.name), seed=seed, on_stage=on_stage, budget_s=budget_s,
                     measured_in=lambda: own.fresh_asker(learner))  # its memory measured in a heap of its own
