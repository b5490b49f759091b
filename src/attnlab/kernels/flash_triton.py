"""The triton form: FlashAttention-2 on a GPU, the flash form's tiles as Triton kernels.

Same arguments and semantics as every form (``F.scaled_dot_product_attention``'s), for what it
supports: ``is_causal`` (upper-left) and every mask of :mod:`attnlab.masks`, bool and float mask
tensors, L != S and lengths that are not a multiple of the tile, GQA (each key/value head read by
its group of query heads, never repeated in memory), head dims up to 256, ``scale``, float16 /
bfloat16 / float32, rows with no visible key -> 0, gpt-oss's attention sinks (``sinks=``, forward and
backward: the forward kernel folds each row's sink in after its last key tile, and the sinks' gradient
is a per-row sum taken here from what the kernels save). Not supported, each with an error that names
the forms that are: dropout, float64, the gradient of a float mask, score modifiers.

This file is the host side: it checks the arguments, picks tile sizes and launches the kernels
of :mod:`attnlab.kernels.triton_kernels` (imported on the first call, so ``import attnlab`` never
imports Triton); :mod:`attnlab.kernels.triton_masks` turns the mask into what the kernels read.

It runs on CUDA tensors. On a CPU it runs under Triton's interpreter (``TRITON_INTERPRET=1`` set
before the first call), which executes the same kernels with numpy: correct, and slow -- small
sizes only.
"""

from __future__ import annotations

import importlib.util

import torch

from ._check import check
from .argcheck import is_int
from .dtypes import HALF
from .errors import Unsupported
from .interpreter import interpreting
from .online import LOG2E
from .triton_masks import Plan, Rule, rule_of

OTHER_FORMS = "flash, matrix, loops or sdpa"
MAX_HEAD_DIM = 256
INTERPRETER_MAX_WORK = 150_000  # N*H*L*S the CPU interpreter is given by verify (a few seconds a case)


def max_work() -> int | None:
    """The largest problem verify and the lesson should give this form: small under the interpreter."""
    return INTERPRETER_MAX_WORK if interpreting() else None


def unavailable(device: torch.device) -> str | None:
    """Why the form cannot run on ``device`` in this process; None when it can."""
    if importlib.util.find_spec("triton") is None:
        return "Triton is not installed (pip install triton, or the dev extras: pip install -e '.[dev]')"
    if device.type == "cuda":
        return None if torch.cuda.is_available() else "CUDA is not available on this machine"
    if device.type == "cpu":
        return None if interpreting() else ("it runs on CUDA; on a CPU only under Triton's interpreter: "
                                           "set TRITON_INTERPRET=1 before starting (small sizes only)")
    return f"it runs on CUDA (or on a CPU under TRITON_INTERPRET=1), not on {device.type}"


def _kernels():
    """The Triton kernels, imported on first use (Triton reads TRITON_INTERPRET when they are defined)."""
    from . import triton_kernels
    return triton_kernels


def _interpreted(device: torch.device) -> bool:
    """Whether the kernels run in the interpreter; an error if they were defined for a GPU and given CPU tensors."""
    interp = _kernels().INTERPRETED
    if device.type != "cuda" and not interp:
        raise RuntimeError("the triton form's kernels were defined for a GPU (TRITON_INTERPRET was not set when "
                           "they were first used), so they cannot take CPU tensors; set it before starting Python")
    return interp


def _blocks(E: int, block_q: int | None, block_k: int | None, interp: bool, wide: bool = False):
    """Tile sizes (query rows, key rows) of the forward, the dK/dV and the dQ kernels.

    On a GPU, after Triton's tutorial for Hopper: the forward holds 128 queries against 64 keys at
    a time; the dK/dV kernel a key tile of 128 against query tiles of 32, the dQ kernel the mirror
    image. Head dim 256, or 4-byte float32 elements (``wide``), halve them to fit shared memory
    (float32 at 128 x 64 needs 225 KiB of the 227 a Hopper block may have). The interpreter uses 32 x 32.
    """
    if block_q is not None or block_k is not None:
        bq, bk = block_q or block_k, block_k or block_q
        return (bq, bk), (bq, bk), (bq, bk)
    if interp:
        return (32, 32), (32, 32), (32, 32)
    if E <= 128 and not wide:
        return (128, 64), (32, 128), (128, 32)
    return (64, 32), (32, 64), (64, 32)


def _dot_precision(q: torch.Tensor) -> str:
    """float32: full float32 products ("ieee", not TF32's 10-bit mantissa, which would fail the tolerance
    rule); half types on a GPU: the tensor cores' native dot, with the weights P and dS rounded to the
    half type as in FlashAttention; half types in the interpreter: "upcast", everything in float32 (its
    dot misreads bfloat16, and the CPU's PyTorch that the tolerance rule compares with keeps P in float32)."""
    if q.dtype == torch.float32:
        return "ieee"
    return "upcast" if _kernels().INTERPRETED else "tf32"


def _store_dtype(q: torch.Tensor) -> torch.dtype:
    """What the kernels write: the inputs' dtype, except bfloat16 in the interpreter, which truncates
    float32 -> bfloat16 instead of rounding to nearest (Triton 3.8): there the kernels write float32 and
    PyTorch rounds, as a GPU's conversion does."""
    return torch.float32 if _kernels().INTERPRETED and q.dtype == torch.bfloat16 else q.dtype


def _pow2(n: int) -> int:
    return max(16, 1 << (n - 1).bit_length())


def _forward(q, k, v, plan: Plan, scale: float, blocks, sinks: torch.Tensor | None = None):
    """The forward kernel: the output (N, H, L, Ev) and, per row, what it saves for the backward (N, H, L):
    the shift m and 1 / norm (:func:`attnlab.kernels.online.finish`; a row that sees no key: +inf and 1).
    ``sinks``: (H,) float32 sink logits, folded into m and norm (:func:`attnlab.kernels.online.add_sink`)."""
    kern = _kernels()
    N, H, L, E = q.shape
    S, Ev = k.shape[2], v.shape[3]
    o = q.new_empty(N, H, L, Ev, dtype=_store_dtype(q))
    m = torch.empty(N, H, L, dtype=torch.float32, device=q.device)  # shift, base 2 (+inf: sees nothing)
    inv_l = torch.empty(N, H, L, dtype=torch.float32, device=q.device)  # 1 / normaliser (1: sees nothing)
    (bq, bk), _, _ = blocks
    margs, masks = plan.args(bq, bk, False, q.device)
    kern._fwd[(triton_cdiv(L, bq), N * H)](
        q, k, v, o, m, inv_l, m if sinks is None else sinks, *q.stride(), *k.stride(), *v.stride(), H, plan.G, L, S,
        E, Ev, scale * LOG2E, *margs, BLOCK_M=bq, BLOCK_N=bk, BLOCK_E=_pow2(E), BLOCK_EV=_pow2(Ev), MASKS=masks,
        DOT_PREC=_dot_precision(q), HAS_SINK=sinks is not None)
    return o.to(q.dtype), m, inv_l


class _TritonFlash(torch.autograd.Function):
    """(q, k, v, sinks or None (H,) float32, plan, scale, blocks) -> out."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, plan: Plan, scale: float, blocks):
        o, m, inv_l = _forward(q, k, v, plan, scale, blocks, sinks)
        ctx.save_for_backward(q, k, v, sinks, o, m, inv_l)
        ctx.cfg = (plan, scale, blocks)
        return o

    @staticmethod
    def backward(ctx, do):
        kern = _kernels()
        q, k, v, sinks, o, m, inv_l = ctx.saved_tensors
        plan, scale, (_, (bq1, bk1), (bq2, bk2)) = ctx.cfg
        do = do.contiguous()
        N, H, L, E = q.shape
        Hkv, S, Ev = k.shape[1], k.shape[2], v.shape[3]
        D = torch.empty(N, H, L, dtype=torch.float32, device=q.device)
        kern._bwd_pre[(triton_cdiv(L, 64), N * H)](o, do, D, L, Ev, BLOCK_M=64, BLOCK_EV=_pow2(Ev))
        store = _store_dtype(q)
        dq, dk, dv = (torch.empty(x.shape, dtype=store, device=x.device) for x in (q, k, v))  # contiguous
        common = dict(BLOCK_E=_pow2(E), BLOCK_EV=_pow2(Ev), DOT_PREC=_dot_precision(q))
        strides = (*q.stride(), *k.stride(), *v.stride())  # the inputs as they came: never copied
        margs, masks = plan.args(bq1, bk1, True, q.device)
        kern._bwd_dkdv[(triton_cdiv(S, bk1), N * Hkv)](
            q, k, v, do, m, inv_l, D, dk, dv, *strides, H, plan.G, L, S, E, Ev, scale * LOG2E, scale, *margs,
            BLOCK_M=bq1, BLOCK_N=bk1, MASKS=masks, **common)
        margs, masks = plan.args(bq2, bk2, False, q.device)
        kern._bwd_dq[(triton_cdiv(L, bq2), N * H)](
            q, k, v, do, m, inv_l, D, dq, *strides, H, plan.G, L, S, E, Ev, scale * LOG2E, scale, *margs,
            BLOCK_M=bq2, BLOCK_N=bk2, MASKS=masks, **common)
        dsinks = _sink_grad(sinks, m, inv_l, D) if sinks is not None and ctx.needs_input_grad[3] else None
        return dq.to(q.dtype), dk.to(q.dtype), dv.to(q.dtype), dsinks, None, None, None


def _sink_grad(sinks: torch.Tensor, m: torch.Tensor, inv_l: torch.Tensor, D: torch.Tensor) -> torch.Tensor:
    """dsink_h = -sum over the batch and the rows of head h of P_sink * D, P_sink = exp2(sink - m) / l: the sink is a
    column whose dP is 0, so its dS is P_sink (0 - D) (:meth:`attnlab.kernels.flash_backward.Weights.sink_grad`).
    m, 1 / l and D (N, H, L) are what the kernels saved; a row that sees no key has D = 0 (its output is 0)."""
    p = torch.exp2(sinks.view(1, -1, 1) * LOG2E - m) * inv_l
    return -(p * D).sum(dim=(0, 2))


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False, *, block_q: int | None = None, block_k: int | None = None, score_mod=None,
              sinks=None):
    """The triton form. ``block_q`` / ``block_k``: tile sizes, powers of two from 16 to 256 (default:
    chosen per device and head dim). ``score_mod`` is refused: the kernels have no score modifiers
    (the flash form has them). ``sinks`` (H,): gpt-oss's attention sinks, computed in float32 as the
    scores are."""
    a, plan, blocks = _prepare(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, block_q,
                               block_k, score_mod, sinks)
    sinks = a.sinks.to(torch.float32).contiguous() if a.sinks is not None else None  # the kernels' scores are float32
    out = _TritonFlash.apply(a.q, a.k, a.v, sinks, plan, a.scale, blocks)  # read by strides, never copied
    return a.unflatten(out)


def statistics(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, *,
               block_q: int | None = None, block_k: int | None = None, sinks=None):
    """The forward kernel alone: (out, shift, norm), with what it saves per row for the backward in the terms
    of :func:`attnlab.kernels.online.finish` -- shift and norm (N, H, L), float32, base-2 units; the kernel
    keeps 1 / norm. The flash form saves the same numbers (its tile sizes and rounding aside). With ``sinks``
    they are the whole row's, sink included: lse = (shift + log2 norm) * ln 2."""
    a, plan, blocks = _prepare(query, key, value, attn_mask, 0.0, is_causal, scale, enable_gqa, block_q, block_k,
                               sinks=sinks)
    sinks = a.sinks.detach().to(torch.float32).contiguous() if a.sinks is not None else None
    out, m, inv_l = _forward(a.q, a.k, a.v, plan, a.scale, blocks, sinks)
    return a.unflatten(out), m, 1.0 / inv_l


def _prepare(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, block_q, block_k,
             score_mod=None, sinks=None):
    """Check the arguments and refuse what the kernels do not take; (checked args, mask plan, tile sizes)."""
    a = check(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, sinks=sinks)
    why = unavailable(a.q.device)
    if why is not None:
        raise RuntimeError(f"the triton form cannot run on {a.q.device}: {why}")
    if score_mod is not None:
        raise Unsupported(f"score_mod={score_mod!r}: the triton form has no score modifiers; use flash or matrix")
    if a.q.dtype not in (*HALF, torch.float32):
        raise Unsupported(f"query has dtype {a.q.dtype}; the triton form computes float16, bfloat16 and float32 "
                          f"(for {a.q.dtype} use {OTHER_FORMS})")
    if a.dropout_p > 0:
        raise Unsupported(f"dropout_p={a.dropout_p}: the triton form has no dropout; use {OTHER_FORMS}")
    if max(a.E, a.Ev) > MAX_HEAD_DIM:
        raise Unsupported(f"head dims E={a.E}, Ev={a.Ev}: the triton form takes head dims up to {MAX_HEAD_DIM}; "
                          f"use {OTHER_FORMS}")
    if a.N * max(a.H, a.Hkv) > 65535:  # CUDA's second grid axis, one program per (batch, head)
        raise Unsupported(f"batch x heads = {a.N} x {a.H} > 65535 programs on the triton form's second grid axis; "
                          f"split the batch, or use {OTHER_FORMS}")
    for name, b in (("block_q", block_q), ("block_k", block_k)):
        if b is not None and (not is_int(b) or b < 16 or b > 256 or b & (b - 1)):
            raise ValueError(f"{name} must be a power of two from 16 to 256 (a Triton tile), got {b!r}")
    dense = None
    if a.attn_mask is not None:
        m = a.attn_mask
        if m.dtype != torch.bool and m.requires_grad and torch.is_grad_enabled():
            raise Unsupported(f"attn_mask of dtype {m.dtype} requires grad: the triton form does not compute "
                              f"the gradient of a float mask; use {OTHER_FORMS}")
        m = m.detach().view(torch.uint8) if m.dtype == torch.bool else m.detach()
        dense = m.expand(a.N, a.H, a.L, a.S)
    mask_fn = a.mask
    rule = Rule(off=0) if a.is_causal else (rule_of(mask_fn, a.L, a.S) if mask_fn is not None else None)
    plan = Plan(a.N, a.H, a.groups, a.L, a.S, rule, mask_fn, dense)
    interp = _interpreted(a.q.device)
    blocks = _blocks(max(a.E, a.Ev), block_q, block_k, interp, wide=a.q.dtype == torch.float32)
    return a, plan, blocks
