"""Level 3, the multi-head module: the lesson's ``CausalSelfAttention(d_model, n_head)``, written by the learner.

The learner's class gets the library's weights (:class:`attnlab.nn.causal.CausalSelfAttention`, whose
parameters are named ``qkv`` and ``proj`` as the starter's are) and is graded on four inputs (:data:`CASES`: one with
a single head, one in float64): its output and every parameter's gradient against the library's module in float64
under verify's rule (the library's module in the case's dtype sets the limit). Then it is trained: a tiny GPT with
the learner's module in its block, beside the same GPT with the library's, from the same weights on the same tokens,
and the two loss curves compared step by step. Each quantity is held to verify's rule, its rounding floor the
attention's own (:func:`attnlab.judge.rule.rounding_floor`) carried through the two linear layers (:func:`budget`).
Slips named from the output: the heads split or merged along the wrong axis, the
output projection skipped, q, k, v taken from the wrong thirds, the scale, the mask.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from torch import nn

from attnlab.judge import oracle, rule

from . import own, ways

# (name, d_model, heads, (B, T), dtype): the module as the lesson trains it, in float32; one head alone (where a split
# or merge along the wrong axis is no slip, so the others show beside it); and in float64 (module.double(): a step
# computed in float32 there is lost precision)
CASES = (("d_model = 32, 4 heads, T = 12", 32, 4, (2, 12), "float32"),
         ("d_model = 48, 6 heads, T = 17", 48, 6, (1, 17), "float32"),
         ("d_model = 16, 1 head, T = 9", 16, 1, (2, 9), "float32"),
         ("d_model = 32, 4 heads, T = 12, float64", 32, 4, (1, 12), "float64"))
DTYPES = {"float32": torch.float32, "float64": torch.float64}
STEPS = 20  # training steps, beside the library's
LOSS_TOL = 1e-3  # the most the two loss curves may differ at any step
SEQS = ()
MEASURES = f"its loss over {STEPS} training steps in a tiny GPT, beside the library module's"


def _library(C: int, H: int, seed: int):
    from attnlab.nn.causal import CausalSelfAttention

    torch.manual_seed(seed)
    return CausalSelfAttention(C, H)


def _inputs(i: int, seed: int):
    _, C, _, (B, T), dt = CASES[i]
    g = torch.Generator().manual_seed(seed * 100 + i)
    return torch.randn(B, T, C, generator=g).to(DTYPES[dt]), torch.randn(B, T, C, generator=g).to(DTYPES[dt])


def _outputs(module, x, gout) -> dict[str, torch.Tensor]:
    out = own.expect_like(module(x), x, "forward", "(B, T, C)")
    (out * gout).sum().backward()
    return {"out": out.detach(), **{n: p.grad for n, p in module.named_parameters() if p.grad is not None}}


class _Plugged(nn.Module):
    """A module of (B, T, C) -> (B, T, C) in the place of the GPT block's attention (which is also given a cache)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x, cache=None, shard=None):
        return self.inner(x)


@functools.lru_cache(maxsize=4)  # graded, then shown: one run of each
def train(cls, seed: int) -> tuple[float, ...]:
    """The loss of a tiny GPT with ``cls`` as its attention, step by step, from seeded weights and tokens."""
    from attnlab.nn.gpt import GPT, GPTConfig

    cfg = GPTConfig(vocab_size=16, block_size=16, n_layer=1, n_head=2, d_model=32)
    torch.manual_seed(seed)
    model = GPT(cfg)
    for block in model.blocks:
        mine = cls(cfg.d_model, cfg.n_head)
        mine.load_state_dict(block.attn.state_dict())
        block.attn = _Plugged(mine)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(STEPS):
        idx = torch.randint(0, cfg.vocab_size, (8, cfg.block_size + 1), generator=g)
        _, loss = model(idx[:, :-1], idx[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return tuple(losses)


def run(cls, header: dict) -> dict:
    """In the learner's process: the class built and given the library's weights, run on each case, trained."""
    seed = header["seed"]
    if header.get("what") == "measure":
        return {"timings": [], "exponents": {"time": None, "memory": None}, "curve": {"yours": list(train(cls, seed))},
                "note": f"a tiny GPT (1 layer, d_model 32, 2 heads) trained {STEPS} steps on seeded random tokens"}
    if header.get("what") == "extra":  # the training beside the library's, once the cases are answered
        try:
            return {"losses": list(train(cls, seed))}
        except Exception as e:
            return {"losses": own.said(e)}
    cases = []
    for i in own.indices(header, len(CASES)):
        _, C, H, _, dt = CASES[i]
        try:
            mine = cls(C, H).to(DTYPES[dt])
            try:
                mine.load_state_dict(_library(C, H, seed + i).state_dict())
            except (RuntimeError, KeyError) as e:
                raise ValueError("its parameters are not the library's qkv and proj (keep the starter's __init__): "
                                 + str(e).splitlines()[0]) from None
            got = _outputs(mine, *_inputs(i, seed))
            cases.append({"values": {n: own.pack(t) for n, t in got.items()}})
        except Exception as e:
            cases.append({"error": own.said(e)})
    return {"cases": cases}


@dataclass(frozen=True)
class Slip:
    """Each step of the module, right or as a learner slips in it."""

    order: str = "qkv"  # which thirds of self.qkv(x) become q, k, v: "kqv", "qvk", "vkq", "qkk", "qkq"
    heads: str = "right"  # "view": a plain view to (B, H, T, d); "interleaved": a view as (B, T, d, H)
    scale: str = "right"  # "none", "C" (1/√C), "1/d"
    mask: str = "right"  # "diagonal", "ahead", "reversed", "reversed-strict", "none", "zero", "after"
    softmax: int = -1  # the dim of the softmax
    merge: str = "right"  # "view": (B, H, T, d) straight to (B, T, C); "permute": through (B, T, d, H)
    proj: bool = True


def _heads(t, B, T, H, d, how: str):
    """(B, T, C) -> (B, H, T, d): a view as (B, T, H, d), then the head axis moved forward."""
    if how == "view":
        return t.reshape(B, H, T, d)  # a plain view: tokens and heads mixed
    if how == "interleaved":
        return t.reshape(B, T, d, H).permute(0, 3, 1, 2)  # every H-th feature to a head
    return t.view(B, T, H, d).transpose(1, 2)


def forward64(lib, x, slip: Slip = Slip()):
    """The library module's computation in float64 with its weights, each step switchable: the slips' answers."""
    lib = lib.double()
    x = x.double()
    B, T, C = x.shape
    H, d = lib.n_head, lib.head_dim
    thirds = dict(zip("qkv", lib.qkv(x).split(C, dim=-1), strict=True))
    q, k, v = (_heads(thirds[c], B, T, H, d, slip.heads) for c in slip.order)
    s = q @ k.transpose(-2, -1) * {"none": 1.0, "C": 1 / math.sqrt(C), "1/d": 1 / d}.get(slip.scale, 1 / math.sqrt(d))
    ones = torch.ones(T, T, dtype=torch.bool)
    hidden = {"diagonal": ones.triu(0), "ahead": ones.triu(2), "reversed": ones.tril(-1), "reversed-strict":
              ones.tril(0), "none": ~ones}.get(slip.mask, ones.triu(1))
    if slip.mask == "after":
        w = torch.softmax(s, dim=-1).masked_fill(hidden, 0.0)
    else:
        w = torch.softmax(s.masked_fill(hidden, 0.0 if slip.mask == "zero" else -math.inf), dim=slip.softmax)
    y = w @ v  # (B, H, T, d)
    y = {"view": lambda: y.reshape(B, T, C), "permute": lambda: y.permute(0, 2, 3, 1).reshape(B, T, C)
         }.get(slip.merge, lambda: y.transpose(1, 2).reshape(B, T, C))()
    return lib.proj(y) if slip.proj else y


def budget(lib, x, gout, dtype: torch.dtype = torch.float32) -> dict[str, float]:
    """The rounding in ``dtype`` the rule allows each judged quantity of the module: the attention's own floor
    (:func:`attnlab.judge.rule.rounding_floor`, on the module's q, k, v and the gradient that reaches them), carried
    through the two linear layers to first order, each sum of n products allowed u·√n·Σ|products| as the rule allows
    its own. The projection to q, k, v is ``self.qkv`` in the learner's module and the library's alike (the starter
    keeps it), so its rounding is in PyTorch's own error, which the rule allows twice."""
    u = torch.finfo(dtype).eps
    lib, x, gout = lib.double(), x.double(), gout.double()
    B, T, C = x.shape
    H, d, n = lib.n_head, lib.head_dim, B * T
    Wo = lib.proj.weight.detach()  # (C, C)
    with torch.no_grad():
        q, k, v = (t.view(B, T, H, d).transpose(1, 2) for t in lib.qkv(x).split(C, dim=-1))
        dy = (gout @ Wo).view(B, T, H, d).transpose(1, 2)  # the gradient that reaches the attention's output
        fl = rule.rounding_floor(q, k, v, is_causal=True, grad_out=dy, dtype=dtype)
        y = oracle.reference(q, k, v, is_causal=True).transpose(1, 2).reshape(n, C)
        y_err = fl["out"]  # one element of y (q, k, v come from self.qkv in both: their rounding is PyTorch's own)
        d_err = max(fl["dq"], fl["dk"], fl["dv"]) + u * math.sqrt(C) * float((gout.abs() @ Wo.abs()).max())
        g, xs = gout.abs().reshape(n, C), x.abs().reshape(n, C)
        out = u * math.sqrt(C) * float((y.abs() @ Wo.abs().T).max())  # the output projection's own rounding
        return {"out": float(Wo.abs().sum(dim=1).max()) * y_err + out,
                "proj.weight": float(g.sum(0).max()) * y_err + u * math.sqrt(n) * float((g.T @ y.abs()).max()),
                "proj.bias": u * math.sqrt(n) * float(g.sum(0).max()),
                "qkv.weight": float(xs.sum(0).max()) * d_err + u * math.sqrt(n) * float(
                    (g @ Wo.abs()).sum(0).max() * xs.max()),
                "qkv.bias": n * d_err}


def judge(reply: dict, seed: int, name: str = "CausalSelfAttention"):
    rows, got, right = [], [], []
    replies = reply.get("cases") or [{"error": reply.get("raised", "no answer")}] * len(CASES)
    for i, ((cname, C, H, _, dt), r) in enumerate(zip(CASES, replies, strict=True)):
        x, gout = _inputs(i, seed)
        theirs = _outputs(_library(C, H, seed + i).to(DTYPES[dt]), x, gout)  # the library's, in the case's dtype
        ref = _outputs(_library(C, H, seed + i).double(), x.double(), gout.double())
        right.append({"out": ref["out"]})
        if (gone := own.answered(r, name, cname, dt)) is not None:
            rows.append(gone)
            got.append(None)
            continue
        mine = {n: own.unpack(t) for n, t in r["values"].items()}
        if (bad := own.wrong_shape(mine, ref)) is not None:
            rows.append(own.row(name, cname, dt, [], error=f"returned {bad}"))
            got.append(None)
            continue
        got.append(mine)
        room = budget(_library(C, H, seed + i), x, gout, DTYPES[dt])
        comps = [own.compare(n, mine.get(n, torch.full((0,), math.nan)), theirs[n], ref[n], DTYPES[dt], room[n])
                 for n in ref]
        rows.append(own.row(name, cname, dt, comps))
    losses = reply.get("losses")
    mine_curve = losses if isinstance(losses, list) else None
    library = library_curve(seed)
    if mine_curve is None:
        rows.append(own.row(name, f"trained {STEPS} steps beside the library's", "float32", [],
                            error=str(losses or reply.get("raised") or "not trained")))
    else:
        from attnlab.judge.rule import Comparison

        gap = max(abs(a - b) for a, b in zip(mine_curve, library, strict=True))
        ok = bool(gap <= LOSS_TOL) and all(math.isfinite(a) for a in mine_curve)
        rows.append(own.row(name, f"trained {STEPS} steps beside the library's", "float32",
                            [Comparison("loss", gap, gap, 0.0, LOSS_TOL, ok)]))
    keys = own.named(got, right, slip_list(seed), [c[4] for c in CASES], pairs=slip_list(seed, both=True)) if any(
        r.status != "pass" for r in rows) else []
    ran = [m["out"] for m in got if m is not None]
    if not keys and ran and all(bool(torch.isnan(y).all()) for y in ran):  # measured: NaN in every value
        keys = ["nan-everywhere"]
    errs = [float((m["out"].double() - right[i]["out"]).abs().max()) for i, m in enumerate(got) if m is not None]
    err = max(errs) if len(errs) == len(CASES) else math.inf
    note = (f"{len(CASES)} inputs (output and every parameter's gradient against the library's module), then "
            f"{STEPS} training steps beside it (losses within {LOSS_TOL:g})")
    return rows, own.lines(keys, TEXT, rows), err, note


def library_curve(seed: int) -> list[float]:
    from attnlab.nn.causal import CausalSelfAttention

    return list(train(CausalSelfAttention, seed))


def slip_list(seed: int, both: bool = False):
    """(key, case index -> the slip's output): each step of the module done wrong (``both``: two at once)."""
    def of(slip):
        return lambda i: {"out": forward64(_library(*CASES[i][1:3], seed + i), _inputs(i, seed)[0], slip).detach()}
    return [(key, of(s)) for key, s in SLIPS] if not both else [(keys, of(s)) for keys, s in ways.pairs(SLIPS)]


SLIPS = [  # (key, one step of the module done wrong)
    ("heads-split", Slip(heads="view")), ("heads-split", Slip(heads="interleaved")),
    # the split through (B, T, d, H) merged back through the same layout: each head takes every H-th feature and
    # gives it back to its place -- one wrong split, not a split and a merge (the merge is the split's inverse)
    ("heads-split", Slip(heads="interleaved", merge="permute")),
    # ... and so is a plain view to (B, H, T, d) merged back by a plain view of (B, H, T, d) to (B, T, C)
    ("heads-split", Slip(heads="view", merge="view")), ("merge-view", Slip(merge="view")),
    ("merge-view", Slip(merge="permute")), ("no-proj", Slip(proj=False)), ("mask-after-softmax", Slip(mask="after")),
    # (q and k swapped, in the split or in the product: k @ qᵀ -- the same scores, so one key that says both)
    ("scores-transposed", Slip(order="kqv")),
    *[("qkv-order", Slip(order=o)) for o in ("qvk", "vkq", "qkk", "qkq")], ("unscaled", Slip(scale="none")),
    ("scale-C", Slip(scale="C")), ("scale-1/d", Slip(scale="1/d")), ("causal-ignored", Slip(mask="none")),
    ("diagonal", Slip(mask="diagonal")), ("peeks-ahead", Slip(mask="ahead")),
    ("causal-reversed", Slip(mask="reversed")), ("causal-reversed", Slip(mask="reversed-strict")),
    ("mask-zero", Slip(mask="zero")),
    ("softmax-dim", Slip(softmax=-2)),
]
TEXT = {
    "heads-split": "your heads are split wrongly: view (B, T, C) as (B, T, H, d) -- H heads of d features each -- "
                   "then transpose to (B, H, T, d); a plain view to (B, H, T, d) mixes tokens and heads, and a view as "
                   "(B, T, d, H) gives a head every H-th feature",
    "merge-view": "your heads are merged back in the wrong order: y is (B, H, T, d); y.transpose(1, 2) makes it "
                  "(B, T, H, d), and only then .reshape(B, T, C) puts each head's d features side by side (a view of "
                  "(B, H, T, d) straight to (B, T, C), or another permute, mixes tokens, heads and features)",
    "no-proj": "your module skips the output projection: after merging the heads back to (B, T, C), apply self.proj",
    "mask-after-softmax": "your mask comes after the softmax: each row's weights no longer add up to 1; set the "
                          "future scores to -inf before the softmax",
    "scores-transposed": "your scores are transposed: entry (i, j) must be query i against key j, q @ kᵀ; yours is "
                         "key i against query j -- k @ qᵀ, or q and k taken from each other's thirds of self.qkv(x) "
                         "(the two give the same scores)",
    "qkv-order": "your q, k and v are taken from the wrong thirds of self.qkv(x): split(C, dim=-1) gives q, k, v in "
                 "that order, one each",
    "causal-reversed": "your mask is turned round: it hides the keys before each query (and so the past) and keeps "
                       "the future; hide j > i, torch.ones(T, T).triu(1), keep j <= i",
    "unscaled": "your scores are not scaled: multiply q @ kᵀ by 1 / sqrt(d), d = C // H, the width of one head",
    "scale-C": "your scores are scaled by 1 / sqrt(C), the model's width: scale by 1 / sqrt(d), d = C // H, the width "
               "of one head",
    "scale-1/d": "your scores are divided by d, not by √d (d = C // H)",
    "causal-ignored": "your module has no causal mask: hide the keys after each query (j > i) with -inf before the "
                      "softmax",
    "diagonal": "your mask also hides the diagonal: a token must see itself (triu(1), not triu(0))",
    "peeks-ahead": "your mask lets each token see one token ahead: hide j > i (triu(1), not triu(2))",
    "mask-zero": "your masked scores are set to 0, not -inf: a future token still gets weight exp(0); use -inf",
    "nan-everywhere": "your output is NaN in every value of every case, even with small inputs: a NaN enters every "
                      "row -- 0 × (-inf) is NaN (a mask made by multiplying by -inf), as are -inf - (-inf) and "
                      "0 / 0; print the scores after each step to see where the first NaN appears",
    "softmax-dim": "your softmax runs over the wrong axis: each query's weights over the keys (dim=-1) must add up "
                   "to 1",
}


def measured_ok(result) -> tuple[bool | None, str]:
    c = result.curve
    if not c.get("yours") or not c.get("library"):
        return None, "not trained"
    gap = max(abs(a - b) for a, b in zip(c["yours"], c["library"], strict=True))
    return gap <= LOSS_TOL, (f"trained {len(c['yours'])} steps: loss {c['yours'][0]:.3f} → {c['yours'][-1]:.3f}, "
                             f"the library's {c['library'][-1]:.3f} (largest gap {gap:.1e})")


def check(learner, quick=False, seed=0, progress=None, on_stage=None, budget_s=20.0):
    from . import BY_NAME

    return own.check(BY_NAME["module"], learner, own.asker(learner),
                     lambda reply, s: judge(reply, s, learner.name), seed=seed, on_stage=on_stage, budget_s=budget_s)
