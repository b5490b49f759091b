"""A corpus of wrong attention functions, each one bug people really write, and right ones to pass.

Every function has ``F.scaled_dot_product_attention``'s signature. :func:`attend` is a plain,
correct implementation with switches; each mutant flips one switch (or is a small function of its
own where the bug lives in a structure: an online softmax, a tile loop, a custom backward). Each
mutant names the diagnosis key (:mod:`attnlab.judge.diagnose`) that states its cause; ``None`` where
no one-line cause can be read from the failures (the test reports how many got theirs).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F


def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                          scale=scale, enable_gqa=enable_gqa)


def _set(bug) -> frozenset:
    return frozenset() if bug is None else frozenset((bug,) if isinstance(bug, str) else bug)


def attend(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
           work=None, bug=None):
    """Correct attention with ``bug`` (a name, or a tuple of names: several bugs at once) switched on; computes in
    ``work`` (default: float32 for half precision, else the inputs' dtype) and returns the inputs' dtype."""
    bug = _set(bug)
    dtype = q.dtype
    work = work or (torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype)
    if "fp32-always" in bug:
        work = torch.float32
    if "bf16-weights" in bug or "fp16-matmul" in bug:
        work = torch.float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    if "only-4d" in bug:
        B, H, L, E = q.shape
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    if enable_gqa and k.shape[-3] != q.shape[-3]:
        G = q.shape[-3] // k.shape[-3]
        if "gqa-repeat" in bug:
            k, v = (t.repeat(*[1] * (t.dim() - 3), G, 1, 1) for t in (k, v))
        else:
            k, v = (t.repeat_interleave(G, dim=-3) for t in (k, v))
    if "scale-ignored" in bug or scale is None:
        scale = 1 / math.sqrt(E)
    if "unscaled" in bug:
        scale = 1.0
    if "scale-1/d" in bug:
        scale = 1.0 / E
    if "scale-tensor" in bug and not isinstance(scale, float):
        scale = 1 / math.sqrt(E)
    if "fp16-matmul" in bug:
        s = (q.half() @ k.half().transpose(-2, -1)).to(work) * float(scale)
    elif "scores-in-dtype" in bug:  # the matmul and the scale both in the inputs' dtype (two roundings)
        s = ((q.to(dtype) @ k.to(dtype).transpose(-2, -1)) * float(scale)).to(work)
    elif "fold-q" in bug:  # the scale multiplied into q and stored in the inputs' dtype
        s = (q * float(scale)).to(dtype).to(work) @ k.transpose(-2, -1)
    elif "fold-k" in bug:
        s = q @ (k * float(scale)).to(dtype).to(work).transpose(-2, -1)
    elif "fold-qk" in bug:  # the square root of the scale into each of q and k (the sign to q)
        root = math.sqrt(abs(float(scale)))
        s = (q * math.copysign(root, float(scale))).to(dtype).to(work) @ (k * root).to(dtype).to(work).transpose(-2, -1)
    elif "scale-f32" in bug:  # the scale a float32 tensor: a float64 path computed with a float32 constant
        s = q @ k.transpose(-2, -1) * torch.tensor(float(scale), dtype=torch.float32)
    elif "view-flatten" in bug:
        s = (q.view(-1, L, E) @ k.view(-1, S, E).transpose(-2, -1)).view(*q.shape[:-1], S) * float(scale)
    else:
        s = q @ k.transpose(-2, -1) * float(scale)  # (..., H, L, S)
    if is_causal and "causal-ignored" not in bug and not ("causal-dropped-with-mask" in bug and attn_mask is not None):
        if "diagonal" in bug:
            keep = torch.ones(L, S, dtype=torch.bool, device=s.device).tril(-1)
        elif "causal-reversed" in bug:
            keep = torch.ones(L, S, dtype=torch.bool, device=s.device).triu()
        elif "lower-right" in bug:
            keep = torch.ones(L, S, dtype=torch.bool, device=s.device).tril(S - L)
        elif "offset-sign" in bug and S > L:  # an offset meant as S - L (lower-right), its sign flipped
            keep = torch.ones(L, S, dtype=torch.bool, device=s.device).tril(L - S)
        elif "square-causal" in bug:
            keep = torch.ones(L, L, dtype=torch.bool, device=s.device).tril()
        else:
            keep = torch.ones(L, S, dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, 0.0 if "mask-zero" in bug else -math.inf)
    if attn_mask is not None and "mask-ignored" not in bug and not ("mask-dropped-with-causal" in bug and is_causal):
        m = attn_mask
        if "mask-view" in bug:
            m = m.view(s.shape)
        if m.dtype == torch.bool:
            if "mask-inverted" in bug:
                m = ~m
            if "mask-in-place" in bug:
                attn_mask.logical_not_()
                m = ~attn_mask
            s = s + m.to(work) if "bool-added" in bug else s.masked_fill(~m, -math.inf)
        elif "float-as-bool" in bug:
            s = s.masked_fill(~m.bool(), -math.inf)
        elif "float-multiplied" in bug:
            s = s * m.to(work)
        else:
            s = s + m.to(work)
    if "bf16-scores" in bug:  # the scores stored in the inputs' dtype before the softmax
        s = s.to(dtype).to(work)
    if "no-max" in bug:
        e = s.exp()
        w = e / e.sum(dim=-1, keepdim=True)
    elif "nan-rows" in bug:
        w = torch.softmax(s, dim=-1)
    elif "minus-1e9" in bug:
        w = torch.softmax(s.clamp(min=-1e9), dim=-1)  # a row that sees nothing spreads evenly
    elif "softmax-dim" in bug:
        w = torch.softmax(s, dim=-2)
    elif "sum-in-dtype" in bug:  # a running sum, key by key, kept in the inputs' dtype
        m_ = s.amax(dim=-1, keepdim=True).detach()
        e = (s - torch.where(torch.isneginf(m_), 0.0, m_)).exp()
        total = torch.zeros_like(e[..., :1]).to(dtype)
        for j in range(e.shape[-1]):
            total = (total + e[..., j:j + 1]).to(dtype)
        w = e / torch.where(total == 0, 1.0, total).to(work)
    else:
        m_ = s.amax(dim=-1, keepdim=True).detach()
        m_ = torch.where(torch.isneginf(m_), 0.0, m_)
        e = (s - m_).exp()
        total = e.sum(dim=-1, keepdim=True)
        w = e / (total + 1e-8) if "eps-sum" in bug else e / torch.where(total == 0, 1.0, total)  # eps: a guard
    if "bf16-weights" in bug:
        w = w.bfloat16().to(work)
    if dropout_p > 0 and "dropout-ignored" not in bug:
        keep = torch.rand_like(w) >= dropout_p
        w = w * keep if "dropout-unscaled" in bug else w * keep / (1 - dropout_p)
        if "dropout-renormalised" in bug:  # the kept weights divided by their sum, not by 1 - p
            w = w / w.sum(dim=-1, keepdim=True).clamp(min=1e-30)
    out = (w.float() @ v.float()).to(work) if "acc-f32" in bug else w @ v  # P V accumulated in float32
    return out.float() if "fp32-always-returned" in bug else out.to(dtype)


def tiled(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *, tile=16,
          bug=None):
    """The online softmax over key tiles of 16, in float32 (float64 inputs stay float64): right unless ``bug``."""
    dtype = q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    if enable_gqa and k.shape[-3] != q.shape[-3]:
        k, v = (t.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3) for t in (k, v))
    sc = 1 / math.sqrt(E) if scale is None else float(scale)
    bias = torch.zeros(L, S, dtype=work, device=q.device)
    if is_causal:
        bias = bias.masked_fill(~torch.ones(L, S, dtype=torch.bool, device=q.device).tril(), -math.inf)
    if attn_mask is not None:
        bias = (bias.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool
                else bias + attn_mask.to(work))
    shape = torch.broadcast_shapes(q.shape[:-1], bias.shape[:-1])
    m = torch.full(shape, -math.inf, dtype=work, device=q.device)
    l = torch.zeros(shape, dtype=work, device=q.device)
    acc = torch.zeros(*shape, v.shape[-1], dtype=work, device=q.device)
    if bug == "pad-keys" and S % tile:  # keys and values padded with zeros to a multiple of the tile, and seen
        pad = tile - S % tile
        k, v = (torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in (k, v))
        bias, S = torch.nn.functional.pad(bias, (0, pad)), S + pad
    stop = S - S % tile if bug == "drop-tail" and tile <= S else S
    for j0 in range(0, stop, tile):
        j1 = min(stop, j0 + tile)
        s = q @ k[..., j0:j1, :].transpose(-2, -1) * sc + bias[..., j0:j1]
        m_new = torch.maximum(m, s.amax(dim=-1))
        m_safe = torch.where(torch.isneginf(m_new), 0.0, m_new)
        p = (s - m_safe[..., None]).exp()
        alpha = (m - m_safe).exp()
        if bug == "no-rescale":
            alpha = torch.ones_like(alpha)
        l = l * alpha + p.sum(dim=-1)
        if dropout_p > 0:
            p = p * (torch.rand_like(p) >= dropout_p) / (1 - dropout_p)
        acc = acc * alpha[..., None] + p @ v[..., j0:j1, :]
        m = m_new
    if bug == "eps-sum":  # the running sum guarded with an eps at the end, not where a row saw no key
        return (acc / (l + 1e-6)[..., None]).to(dtype)
    return (acc / torch.where(l == 0, 1.0, l)[..., None]).to(dtype)


class _BrokenBackward(torch.autograd.Function):
    """Right forward; backward forgets D = rowsum(dO * O) in dS = P * (dP - D) (``bug="no-D"``) or the scale in dq."""

    @staticmethod
    def forward(ctx, q, k, v, scale, bug):
        P = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1)
        out = P @ v
        ctx.save_for_backward(q, k, v, P, out)
        ctx.scale, ctx.bug = scale, bug
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, P, out = ctx.saved_tensors
        dv = P.transpose(-2, -1) @ dout
        dP = dout @ v.transpose(-2, -1)
        D = 0.0 if ctx.bug == "no-D" else (dout * out).sum(dim=-1, keepdim=True)
        dS = P * (dP - D)
        dq = dS @ k * (1.0 if ctx.bug == "dq-unscaled" else ctx.scale)
        dk = dS.transpose(-2, -1) @ q * ctx.scale
        return dq, dk, dv, None, None


def custom_backward(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
                    *, bug=None):
    """A custom autograd.Function for the no-mask case; everything else goes to PyTorch."""
    if attn_mask is not None or is_causal or dropout_p or enable_gqa:
        return sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    sc = 1 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    return _BrokenBackward.apply(q, k, v, sc, bug)


class _ForgetfulBackward(torch.autograd.Function):
    """Right forward; the backward recomputes attention without attn_mask and is_causal (it forgot to pass them)."""

    @staticmethod
    def forward(ctx, q, k, v, attn_mask, is_causal, scale, enable_gqa):
        ctx.save_for_backward(q, k, v)
        ctx.args = (scale, enable_gqa)
        return sdpa(q, k, v, attn_mask, 0.0, is_causal, scale, enable_gqa)

    @staticmethod
    def backward(ctx, dout):
        with torch.enable_grad():
            q, k, v = (t.detach().requires_grad_(True) for t in ctx.saved_tensors)
            out = sdpa(q, k, v, None, 0.0, False, *ctx.args)
            grads = torch.autograd.grad(out, (q, k, v), dout)
        return (*grads, None, None, None, None)


def backward_unmasked(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p:
        return sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    return _ForgetfulBackward.apply(q, k, v, attn_mask, is_causal, scale, enable_gqa)


def detached_keys(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return sdpa(q, k.detach(), v, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def under_no_grad(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    with torch.no_grad():
        return sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def _bug(fn, name):
    f = functools.partial(fn, bug=name)
    f.__name__ = name
    return f


F32, BF16, F64 = ("float32",), ("float32", "bfloat16"), ("float64",)

# name -> (function, the diagnosis key that names its cause (None where no single cause shows; a tuple of keys
# for a function with several bugs), the dtypes whose grid shows the bugs: float32 for most; precision bugs
# pass in bfloat16, where PyTorch rounds as much)
MUTANTS = {
    "ignores scale=": (_bug(attend, "scale-ignored"), "scale", F32),
    "never scales": (_bug(attend, "unscaled"), "unscaled", F32),
    "scales by 1/d": (_bug(attend, "scale-1/d"), "scale-1/d", F32),
    "scale only as a float": (_bug(attend, "scale-tensor"), "scale-tensor", F32),
    "ignores is_causal": (_bug(attend, "causal-ignored"), "causal-ignored", F32),
    "causal mask hides the diagonal": (_bug(attend, "diagonal"), "diagonal", F32),
    "causal mask turned round": (_bug(attend, "causal-reversed"), "causal-reversed", F32),
    "masked scores set to 0, not -inf": (_bug(attend, "mask-zero"), "mask-zero", F32),
    "causal aligned lower-right": (_bug(attend, "lower-right"), "causal-alignment", F32),
    "causal mask built L x L": (_bug(attend, "square-causal"), "causal-alignment", F32),
    "drops attn_mask when is_causal": (_bug(attend, "mask-dropped-with-causal"), "causal+mask", F32),
    "drops is_causal when attn_mask": (_bug(attend, "causal-dropped-with-mask"), "causal+mask", F32),
    "ignores attn_mask": (_bug(attend, "mask-ignored"), "mask-ignored", F32),
    "bool mask inverted": (_bug(attend, "mask-inverted"), "mask-inverted", F32),
    "bool mask added as 0/1": (_bug(attend, "bool-added"), "bool-mask", F32),
    "float mask as bool": (_bug(attend, "float-as-bool"), "float-mask", F32),
    "float mask multiplied": (_bug(attend, "float-multiplied"), "float-mask", F32),
    "mask viewed to (N, H, L, S)": (_bug(attend, "mask-view"), "broadcast-mask", F32),
    "plain softmax: NaN on dead rows": (_bug(attend, "nan-rows"), "dead-rows", F32),
    "-1e9 for -inf: dead rows spread evenly": (_bug(attend, "minus-1e9"), "dead-rows", F32),
    "GQA with repeat": (_bug(attend, "gqa-repeat"), "gqa", F32),
    "no max subtraction (nor a guard for dead rows)": (_bug(attend, "no-max"), ("max-subtraction", "dead-rows"),
                                                       F32),
    "softmax over the queries": (_bug(attend, "softmax-dim"), "softmax-dim", F32),
    "dropout survivors not scaled": (_bug(attend, "dropout-unscaled"), "dropout-scale", F32),
    "ignores dropout_p": (_bug(attend, "dropout-ignored"), "dropout", F32),
    "weights rounded to bfloat16": (_bug(attend, "bf16-weights"), "precision", BF16),
    # (q and k cast to float16 for Q Kᵀ: the scores-rounded model of a full-precision kernel's fixed-half step says it
    # exactly; "fails in float32 and float64, passes in half" is true of it too)
    "scores in float16": (_bug(attend, "fp16-matmul"), "scores-rounded", BF16),
    "float64 computed in float32": (_bug(attend, "fp32-always"), "float32-in-float64", ("float32", "float64")),
    "the scale a float32 tensor": (_bug(attend, "scale-f32"), "float32-in-float64", F64),
    "P V accumulated in float32": (_bug(attend, "acc-f32"), "float32-in-float64", F64),
    "softmax sum + 1e-8": (_bug(attend, "eps-sum"), "eps-in-sum", F64),
    "online softmax, final sum + 1e-6": (_bug(tiled, "eps-sum"), "eps-in-sum", F64),
    "scores: matmul and scale in the inputs' dtype": (_bug(attend, "scores-in-dtype"), "scores-rounded", BF16),
    "scale folded into q in the inputs' dtype": (_bug(attend, "fold-q"), "scale-folded", BF16),
    "scale folded into k in the inputs' dtype": (_bug(attend, "fold-k"), "scale-folded", BF16),
    "sqrt(scale) into q and k in the inputs' dtype": (_bug(attend, "fold-qk"), "scale-folded", BF16),
    "running sum in the inputs' dtype": (_bug(attend, "sum-in-dtype"), "scores-rounded", BF16),
    "returns float32 whatever the input": (_bug(attend, "fp32-always-returned"), "dtype", F64),
    "view instead of reshape": (_bug(attend, "view-flatten"), "noncontig", F32),
    "only 4-D inputs": (_bug(attend, "only-4d"), "batch-dims", F32),
    "flips the caller's bool mask in place": (_bug(attend, "mask-in-place"), "in-place", F32),
    "detaches the keys": (detached_keys, "gradients-only", F32),
    "runs under torch.no_grad": (under_no_grad, "no-grad", F32),
    "custom backward without D": (_bug(custom_backward, "no-D"), "gradients-only", F32),
    "custom backward: dq unscaled": (_bug(custom_backward, "dq-unscaled"), "gradients-only", F32),
    "online softmax without the rescale": (_bug(tiled, "no-rescale"), None, F32),
    "tile loop drops the last partial tile": (_bug(tiled, "drop-tail"), None, F32),
    "scores rounded to the input dtype": (_bug(attend, "bf16-scores"), "scores-rounded", BF16),
    "dropout renormalised over the kept weights": (_bug(attend, "dropout-renormalised"), "dropout-renormalised", F32),
    "causal offset's sign flipped for S > L": (_bug(attend, "offset-sign"), "causal-offset-sign", F32),
    "backward recomputed without the mask": (backward_unmasked, "backward-mask", F32),
    "zero pad keys attended": (_bug(tiled, "pad-keys"), "pad-keys", F32),
    # several bugs at once: every one must be among the lines
    "ignores scale=, GQA with repeat": (_bug(attend, ("scale-ignored", "gqa-repeat")), ("scale", "gqa"), F32),
    "bool mask inverted, causal lower-right": (_bug(attend, ("mask-inverted", "lower-right")),
                                               ("mask-inverted", "causal-alignment"), F32),
    "NaN dead rows, dropout unscaled": (_bug(attend, ("nan-rows", "dropout-unscaled")), ("dead-rows", "dropout-scale"),
                                        F32),
    "scores rounded, is_causal ignored": (_bug(attend, ("bf16-scores", "causal-ignored")),
                                          ("scores-rounded", "causal-ignored"), BF16),
    "scale only as a float, drops is_causal with a mask, only 4-D": (
        _bug(attend, ("scale-tensor", "causal-dropped-with-mask", "only-4d")), ("scale-tensor", "causal+mask",
                                                                                 "batch-dims"), F32),
    "GQA with repeat, diagonal hidden, attn_mask ignored": (_bug(attend, ("gqa-repeat", "diagonal", "mask-ignored")),
                                                            ("gqa", "diagonal", "mask-ignored"), F32),
    "causal lower-right, -1e9 for -inf": (_bug(attend, ("lower-right", "minus-1e9")), ("causal-alignment", "dead-rows"),
                                          F32),
    "float32 inside, is_causal ignored, NaN dead rows": (_bug(attend, ("fp32-always", "causal-ignored", "nan-rows")),
                                                         ("float32-in-float64", "causal-ignored", "dead-rows"),
                                                         ("float32", "float64")),
}

# what else a line may truthfully say of a bug: a key and the keys that also describe what the function does
ALSO = {
    "scale": {"scale-tensor"}, "scale-tensor": {"scale"}, "causal-ignored": {"causal+mask"},
    "causal+mask": {"causal-ignored", "mask-ignored"}, "mask-inverted": {"bool-mask"}, "bool-mask": {"mask-inverted"},
    "float-mask": {"mask-ignored", "causal+mask"}, "dropout-scale": {"dropout"}, "dropout-renormalised": {"dropout"},
    "max-subtraction": {"dead-rows"},
    "mask-ignored": {"causal+mask"}, "causal-alignment": {"L!=S", "lower-right"},
    "scores-rounded": {"bfloat16", "precision"},
    "float64": {"precision"}, "precision": {"float32", "bfloat16"}, "float32-in-float64": {"float64", "precision"},
    "eps-in-sum": {"float64", "precision"},
    "scale-folded": {"bfloat16"}, "softmax-half": {"scores-rounded", "bfloat16"}, "batch-dims": {"raises"},
    "backward-mask": {"gradients-only"}, "causal-offset-sign": {"causal-alignment", "L!=S"},
    "noncontig": {"raises"}, "broadcast-mask": {"raises"},
}


def bugs(want) -> tuple[str, ...]:
    """The diagnosis keys of a mutant's bugs (``MUTANTS[name][1]``): one, several, or none."""
    return () if want is None else (want,) if isinstance(want, str) else tuple(want)


def allowed(want) -> set[str]:
    """Every key a line may name for a function with these bugs (a line naming another is a false line)."""
    keys = set(bugs(want))
    return keys | {k for b in keys for k in ALSO.get(b, ())}

CORRECT = {
    "PyTorch's own": sdpa,
    "float64 inside": functools.partial(attend, work=torch.float64),
    "tiled online softmax": tiled,
}
