"""Level 5, flash backward: ``flash_backward(q, k, v, out, lse, dout, block)`` -> dq, dk, dv, with no autograd.

The forward saved each query's log-sum-exp, lse_i = log Σ_j exp(s_ij), so a key block's weights come
back as P = exp(S − lse) without a second softmax. Then, block by block (causal, scale 1/√d):

    dV += Pᵀ dO      dP = dO Vᵀ      D = rowsum(dO ∘ O)      dS = P ∘ (dP − D)
    dQ += dS K · scale                dK += dSᵀ Q · scale

Graded on the level's own cases against the float64 oracle's gradients under verify's rule (PyTorch's
own backward in the same dtype sets the limit). The learner's function runs under
``torch.inference_mode()``, where autograd records nothing: a backward that asks autograd for its
gradients fails there, and the check says so. Slips named: D from the wrong tensors, the scale
missing from dq and dk, the lse of another row.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnlab.judge import oracle, rule

from . import own
from .flash import block_for

CASES = (  # name, (batch, heads, L = S, d), dtype, magnitude
    ("basic", (1, 2, 24, 8), "float64", 1.0),
    ("float32, L = 37, d = 16", (1, 2, 37, 16), "float32", 1.0),
    ("float32, batch 2, L = 64", (2, 1, 64, 32), "float32", 1.0),
    ("float32, larger scores", (1, 2, 30, 8), "float32", 3.0),
)
SEQS = (512, 1024, 2048)  # long enough that the tiles, not the fixed costs, set the slope
MEASURES = "its time and peak memory at T = " + ", ".join(map(str, SEQS)) + ", block 64"
QUANTITIES = ("dq", "dk", "dv")


def inputs(i: int, seed: int):
    """Case ``i``'s inputs, drawn from the seed: q, k, v, dout in the case's dtype, and out and lse from a float64
    forward (rounded to the dtype, as a forward would have saved them)."""
    _, shape, dtype, mag = CASES[i]
    g = torch.Generator().manual_seed(seed * 100 + i)
    q, k = (torch.randn(*shape, generator=g, dtype=torch.float64) * mag for _ in range(2))
    v, dout = (torch.randn(*shape, generator=g, dtype=torch.float64) for _ in range(2))
    out, lse = forward64(q, k, v)
    dt = getattr(torch, dtype)
    return tuple(t.to(dt) for t in (q, k, v, out, lse, dout))


def _scores(q, k):
    L, S = q.shape[-2], k.shape[-2]
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), -math.inf)


def forward64(q, k, v):
    s = _scores(q.double(), k.double())
    lse = torch.logsumexp(s, dim=-1)  # (..., L)
    return torch.exp(s - lse.unsqueeze(-1)) @ v.double(), lse


def grads64(q, k, v, out, lse, dout, d_from="o", scaled=True, lse_of="row"):
    """Float64 dq, dk, dv by the formulas, each step switchable: the slips' answers."""
    q, k, v, out, lse, dout = (t.double() for t in (q, k, v, out, lse, dout))
    sc = 1 / math.sqrt(q.shape[-1])
    s = _scores(q, k)
    at = {"row": lse.unsqueeze(-1), "key": lse.unsqueeze(-2), "next": lse.roll(-1, -1).unsqueeze(-1),
          "previous": lse.roll(1, -1).unsqueeze(-1)}[lse_of]
    P = torch.exp(s - at)
    dv = P.transpose(-2, -1) @ dout
    dP = dout @ v.transpose(-2, -1)
    D = {"o": (dout * out).sum(-1), "v": (dout * v).sum(-1), "zero": torch.zeros_like(lse),
         "dout": (dout * dout).sum(-1)}[d_from].unsqueeze(-1)
    dS = P * (dP - D)
    f = sc if scaled else 1.0
    return {"dq": dS @ k * f, "dk": dS.transpose(-2, -1) @ q * f, "dv": dv}


def run(fn, header: dict) -> dict:
    """In the learner's process: each case under inference mode (no autograd), or the level's measurement."""
    if header.get("what") == "measure":
        return measure(fn, header)
    if header.get("what") == "extra":
        return {}
    cases = []
    for i in own.indices(header, len(CASES)):
        shape = CASES[i][1]
        x = inputs(i, header["seed"])
        try:
            with torch.inference_mode():
                got = fn(*x, block_for(shape[-2]))
            if not (isinstance(got, (tuple, list)) and len(got) == 3 and all(isinstance(t, torch.Tensor) for t in got)):
                cases.append({"error": f"returned {type(got).__name__}, not the three tensors (dq, dk, dv)"})
                continue
            cases.append({"values": {n: own.pack(t) for n, t in zip(QUANTITIES, got, strict=True)},
                          "dtypes": [str(t.dtype).removeprefix("torch.") for t in got]})
        except Exception as e:
            text = own.said(e)  # autograd asked for under inference mode: the level's own slip, as a fact
            cases.append({"error": text, "autograd": isinstance(e, RuntimeError) and (
                "grad" in str(e).lower() or "inference" in str(e).lower())})
    return {"cases": cases}


def _pytorch(x):
    q, k, v, _, _, dout = (t.detach().clone().requires_grad_(True) for t in x)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return dict(zip(QUANTITIES, torch.autograd.grad(out, (q, k, v), dout), strict=True))


def judge(reply: dict, seed: int, name: str = "flash_backward"):
    """(rows, diagnoses, max |yours − the oracle| on dq, dk, dv, the cases' note) from the learner's values."""
    rows, got, right, autograd, dtype_wrong = [], [], [], False, False
    replies = reply.get("cases") or [{"error": reply.get("raised", "no answer")}] * len(CASES)
    for i, ((cname, _, dtype, _), r) in enumerate(zip(CASES, replies, strict=True)):
        x = inputs(i, seed)
        ref = oracle.reference(*x[:3], is_causal=True, grad_out=x[5])
        ref = dict(zip(QUANTITIES, ref[1:], strict=True))
        right.append(ref)
        if (gone := own.answered(r, name, cname, dtype)) is not None:
            autograd = autograd or r.get("autograd", False)
            rows.append(gone)
            got.append(None)
            continue
        mine = {n: own.unpack(t) for n, t in r["values"].items()}
        if (bad := own.wrong_shape(mine, ref)) is not None:
            rows.append(own.row(name, cname, dtype, [], error=f"returned {bad}"))
            got.append(None)
            continue
        got.append(mine)
        theirs = _pytorch(x)
        budget = rule.rounding_floor(*x[:3], is_causal=True, grad_out=x[5])
        comps = [own.compare(n, mine[n], theirs[n], ref[n], getattr(torch, dtype), budget[n]) for n in QUANTITIES]
        wrong = [d for d in r["dtypes"] if d != dtype]
        rows.append(own.row(name, cname, dtype, comps, f"returned {wrong[0]} for {dtype} inputs" if wrong else ""))
        if wrong:
            rows[-1].status = "fail"
            dtype_wrong = True
    keys = ["autograd"] if autograd else []
    if any(r.status != "pass" for r in rows):
        keys += own.named(got, right, slip_list(seed), tol=1e-4)
        if not keys and dtype_wrong:
            keys.append("dtype")
    errs = [max(float((m[n].double() - right[i][n]).abs().max()) for n in QUANTITIES)
            for i, m in enumerate(got) if m is not None]
    err = max(errs) if errs and len(errs) == len(CASES) else math.inf
    note = f"{len(CASES)} cases of the level's own (causal, L = S, block = L // 3 + 1, float64 and float32)"
    return rows, own.lines(keys, TEXT), err, note


def slip_list(seed: int):
    def at(**kw):
        return lambda i: grads64(*inputs(i, seed)[:3], *forward64(*inputs(i, seed)[:3]), inputs(i, seed)[5], **kw)
    return [("d-wrong", at(d_from="v")), ("d-wrong", at(d_from="zero")), ("d-wrong", at(d_from="dout")),
            ("scale-missing", at(scaled=False)), ("lse-other-row", at(lse_of="key")),
            ("lse-other-row", at(lse_of="next")), ("lse-other-row", at(lse_of="previous"))]


TEXT = {
    "autograd": "your backward asks autograd for its gradients (it fails under torch.inference_mode(), where autograd "
                "records nothing): compute dq, dk, dv from the formulas, with no .backward() or autograd.grad",
    "d-wrong": "your D is computed from the wrong tensors: D_i = rowsum(dO ∘ O), the output's gradient times the "
               "output itself, row by row",
    "scale-missing": "your dq and dk miss the scale: the scores were q·k × scale, so dQ = dS K × scale and dK = dSᵀ Q "
                     "× scale",
    "lse-other-row": "your weights use the log-sum-exp of another row: query i's weights are exp(s_ij − lse_i), lse "
                     "indexed by the query (lse[..., :, None]), not by the key",
    "dtype": "your gradients are not in the inputs' dtype: compute in float32 if you like, but return q.dtype",
}


def measure(fn, header: dict) -> dict:
    """Time and extra peak memory of one backward call at each length (block 64, one head of width 64, float32)."""

    def inputs(T, g):
        q, k, v, dout = (torch.randn(1, 1, T, 64, generator=g) for _ in range(4))
        out, lse = (t.float() for t in forward64(q, k, v))
        return q, k, v, out, lse, dout

    def call(*args):
        with torch.inference_mode():
            return fn(*args, 64)

    return own.measure_lengths(SEQS, header["seed"], inputs, call, "one backward call per length, batch 1, one head "
                               "of width 64, float32, block 64, under inference mode")


def measured_ok(result) -> tuple[bool | None, str]:
    p = result.exponents.get("memory")
    if p is None:
        return None, "its memory was not measured at two lengths or more"
    return p <= 1.2, f"memory grew as T^{p:.2f} (a tiled backward needs no T x T matrix: at most T^1.2)"


def check(learner, quick=False, seed=0, progress=None, on_stage=None, budget_s=20.0):
    from . import BY_NAME

    return own.check(BY_NAME["backward"], learner, lambda h, seconds: learner.fn.ask("level", seconds=seconds, **h),
                     lambda reply, s: judge(reply, s, learner.name), seed=seed, on_stage=on_stage, budget_s=budget_s)
