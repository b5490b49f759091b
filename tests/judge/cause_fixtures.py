"""One wrong function for each cause the judge can name: the cause table's fixtures (tests/judge/test_cause_table.py).

``FIXTURES[key]`` is a :class:`Fixture`: a function with that cause and no other, the API it is written to, and the
few cases of its grid that show the cause (by name: a case is run when its name contains one of the words), in the
dtypes that show it. Most come from the corpora the judge is measured on (tests/mutants.py, tests/api_bugs.py,
tests/kv_bugs.py, tests/api_functions.py); the rest are written here, each a line or two on top of PyTorch's own
attention. ``NO_FUNCTION`` holds the causes no function can have, and why.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from tests import api_bugs, api_functions, kv_bugs, mutants, sink_kernels


@dataclass(frozen=True)
class Fixture:
    fn: object
    api: str = "sdpa"
    only: tuple[str, ...] = ()  # words of the case names run (the API's grid and probes)
    dtypes: tuple[str, ...] = ("float32",)
    kw: dict = field(default_factory=dict)  # verify's own arguments (backward=, max_ratio=, timeout=)


def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                          scale=scale, enable_gqa=enable_gqa)


def _when(test, wrong):
    """PyTorch's attention, but ``wrong(q, k, v, **kw)`` where ``test(q, k, v, **kw)``."""
    def fn(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        kw = dict(attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
        return wrong(q, k, v, **kw) if test(q, k, v, **kw) else sdpa(q, k, v, **kw)
    return fn


def _off(out):
    return out + 0.5 * out.abs().amax().clamp_min(1.0)


def not_a_tensor(q, k, v, **kw):
    return sdpa(q, k, v, **kw).tolist()


def wrong_shape(q, k, v, **kw):
    return sdpa(q, k, v, **kw)[..., :1, :]


def wrong_dtype(q, k, v, **kw):
    return sdpa(q, k, v, **kw).double() if q.dtype != torch.float64 else sdpa(q, k, v, **kw).float()


def regrad(q, k, v, **kw):
    out = sdpa(q, k, v, **kw)
    k.requires_grad_(False)
    return out


def exits(q, k, v, **kw):
    sys.exit(3)


def hangs(q, k, v, **kw):
    time.sleep(30)
    return sdpa(q, k, v, **kw)


def raises(q, k, v, **kw):
    raise ValueError("this kernel cannot run")


def no_grad_path_wrong(q, k, v, **kw):
    out = sdpa(q, k, v, **kw)
    return _off(out) if not torch.is_grad_enabled() and not torch.is_inference_mode_enabled() else out


def inference_path_wrong(q, k, v, **kw):
    out = sdpa(q, k, v, **kw)
    return _off(out) if torch.is_inference_mode_enabled() else out


def no_grad_in_place(q, k, v, **kw):
    out = sdpa(q, k, v, **kw)
    if not torch.is_grad_enabled() and not torch.is_inference_mode_enabled():
        q.add_(1e-3)
    return out


def inference_in_place(q, k, v, **kw):
    out = sdpa(q, k, v, **kw)
    if torch.is_inference_mode_enabled():
        q.add_(1e-3)
    return out


def no_grad_raises(q, k, v, **kw):
    if not torch.is_grad_enabled() and not torch.is_inference_mode_enabled():
        raise RuntimeError("no road for no_grad")
    return sdpa(q, k, v, **kw)


def inference_raises(q, k, v, **kw):
    if torch.is_inference_mode_enabled():
        raise RuntimeError("no road for inference_mode")
    return sdpa(q, k, v, **kw)


def bf16_only(q, k, v, **kw):
    out = sdpa(q, k, v, **kw)
    return _off(out) if q.dtype == torch.bfloat16 else out


def f64_only(q, k, v, **kw):
    out = sdpa(q, k, v, **kw)
    return _off(out) if q.dtype == torch.float64 else out


def f32_only(q, k, v, **kw):
    out = sdpa(q, k, v, **kw)
    return _off(out) if q.dtype == torch.float32 else out


def half_through(q, k, v, **kw):
    """Full precision rounded through bfloat16 (the weights' matmul): fails in float32 and float64, passes in half."""
    return sdpa(q.bfloat16(), k.bfloat16(), v.bfloat16(), **kw).to(q.dtype) if q.dtype != torch.bfloat16 else \
        sdpa(q, k, v, **kw)


def kv_staged_half(q, k, v, **kw):
    """Keys and values staged in float16 whatever the inputs' dtype (a cache kept in half), the rest in theirs."""
    return sdpa(q, k.half().to(q.dtype), v.half().to(q.dtype), **kw)


def mask_in_bfloat16(q, k, v, attn_mask=None, **kw):
    """A float mask rounded to bfloat16 before it is added, whatever the inputs' dtype (a bias built in half)."""
    if attn_mask is not None and attn_mask.is_floating_point():
        attn_mask = attn_mask.to(torch.bfloat16).to(q.dtype)
    return sdpa(q, k, v, attn_mask=attn_mask, **kw)


def pv_in_half(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """P V taken in float16 whatever the inputs' dtype (P and V cast down, the product rounded there); the weights
    right."""
    if q.dtype == torch.bfloat16:
        return sdpa(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
    L, S = q.shape[-2], k.shape[-2]
    s = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if is_causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    return (torch.softmax(s, dim=-1).half() @ v.half()).to(q.dtype)


class _DPHalfBackward(torch.autograd.Function):
    """Attention whose hand-written backward takes dP = dO Vᵀ and rounds it to bfloat16 (a leftover of a bfloat16
    kernel); its forward and every other step of its backward right."""

    @staticmethod
    def forward(ctx, q, k, v, scale, causal):
        s = q @ k.transpose(-2, -1) * scale
        if causal:
            s = s.masked_fill(~torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).tril(), float("-inf"))
        p = torch.softmax(s, -1)
        o = p @ v
        ctx.save_for_backward(q, k, v, p, o)
        ctx.scale = scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, p, o = ctx.saved_tensors
        dp = (do @ v.transpose(-2, -1)).to(torch.bfloat16).to(do.dtype)
        ds = p * (dp - (do * o).sum(-1, keepdim=True))
        return ds @ k * ctx.scale, ds.transpose(-2, -1) @ q * ctx.scale, p.transpose(-2, -1) @ do, None, None


def dp_in_bfloat16(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """The forward right; the backward's dP rounded to bfloat16 (PyTorch's own where the fixture's cases need more
    than a causal mask)."""
    if attn_mask is not None or enable_gqa or dropout_p > 0 or q.dtype == torch.bfloat16:
        return sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                    enable_gqa=enable_gqa)
    return _DPHalfBackward.apply(q, k, v, q.shape[-1] ** -0.5 if scale is None else scale, is_causal)


def _shaped(test):
    return _when(test, lambda q, k, v, **kw: _off(sdpa(q, k, v, **kw)))


def eps_sum(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return mutants.attend(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, bug="eps-sum")


def unclear(q, k, v, **kw):
    out = sdpa(q, k, v, **kw)
    torch.manual_seed(q.shape[-2] * 7919 + q.shape[-1])
    return out + 0.1 * torch.randn_like(out)  # noise of no pattern


def causal_tile_first_row(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Query tiles of 64 rows, key tiles of 32: under is_causal a key tile is visited only when it starts at or
    before the query tile's first row, so rows 33-63 of a tile lose the keys of the tile that starts at 32."""
    if not is_causal:
        return sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    i, j = torch.arange(q.shape[-2])[:, None], torch.arange(k.shape[-2])[None, :]
    keep = (j <= i) & (j // 32 * 32 <= i // 64 * 64)
    if attn_mask is not None:
        keep = attn_mask & keep if attn_mask.dtype == torch.bool else attn_mask.masked_fill(~keep, -math.inf)
    return sdpa(q, k, v, keep, dropout_p, False, scale, enable_gqa)


def splits_merged_by_sums(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Split-KV over splits of 32 keys, each split's exps against its own max, the splits merged by their sums
    alone (never brought to a common max)."""
    S = k.shape[-2]
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    keep = torch.ones(q.shape[-2], S, dtype=torch.bool).tril() if is_causal else None
    if attn_mask is not None:
        keep = attn_mask if keep is None else attn_mask & keep if attn_mask.dtype == torch.bool else \
            attn_mask.masked_fill(~keep, -math.inf)
    if enable_gqa:
        g = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(g, dim=-3), v.repeat_interleave(g, dim=-3)
    sc = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q.to(work) @ k.to(work).transpose(-2, -1)) * sc
    if keep is not None:
        s = s.masked_fill(~keep, -math.inf) if keep.dtype == torch.bool else s + keep.to(work)
    acc, total = 0.0, 0.0
    for j in range(0, S, 32):
        st = s[..., j:j + 32]
        m = st.amax(-1, keepdim=True)
        p = torch.exp(st - torch.where(torch.isneginf(m), 0.0, m))
        acc, total = acc + p @ v[..., j:j + 32, :].to(work), total + p.sum(-1, keepdim=True)
    return (acc / torch.where(total > 0, total, 1.0)).to(q.dtype)


def _mutant(label):
    """The first mutant of tests/mutants.py whose bug is ``label`` (a tuple: its several bugs)."""
    return next(fn for fn, key, _ in mutants.MUTANTS.values() if key == label)


def _kv(key: str):
    """tests/kv_bugs.py's kernel with ``key`` as its one bug."""
    name = next(n for n, (_, _, _, bugs) in kv_bugs.MUTANTS.items() if len(bugs) == 1 and key in (
        bugs[0] if isinstance(bugs[0], tuple) else (bugs[0],)))
    return kv_bugs.function(name)


def _flash(q, k, v, **kw):
    return api_functions.flash_attn_func(q, k, v, **kw)


def _with_lse(change):
    """flash_attn_func whose log-sum-exp is ``change(lse, q, scale)`` (the output right)."""
    def fn(q, k, v, softmax_scale=None, **kw):
        out, lse, p = _flash(q, k, v, softmax_scale=softmax_scale, **{**kw, "return_attn_probs": True})
        scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
        return (out, change(lse, q, scale), p) if kw.get("return_attn_probs") else out
    return fn


lse_dead_rows = _with_lse(lambda lse, q, scale: torch.where(torch.isinf(lse), 0.0, lse))
lse_half = _with_lse(lambda lse, q, scale: lse.to(q.dtype).float() if q.dtype in (torch.bfloat16, torch.float16)
                     else lse)
lse_unclear = _with_lse(lambda lse, q, scale: lse + 0.01 * torch.sin(13.0 * lse))  # wrong in no way a cause reads


def no_lse(q, k, v, **kw):
    return _flash(q, k, v, **{**kw, "return_attn_probs": False})


def _flash_wrong(test):
    """flash_attn_func, its output off where ``test(kw)`` holds of its keywords (a failure no cause reads)."""
    def fn(q, k, v, **kw):
        res = _flash(q, k, v, **kw)
        if not test(kw):
            return res
        out, *rest = res if isinstance(res, tuple) else (res,)
        return (_off(out), *rest) if rest else _off(out)
    return fn


def flash_alibi_offset(q, k, v, alibi_slopes=None, causal=False, window_size=(-1, -1), softmax_scale=None,
                       softcap=0.0, return_attn_probs=False, **kw):
    """ALiBi's distance |i - j|, without the S - L offset that places query i at key position i + S - L."""
    B, L, H, D = q.shape
    S = k.shape[1]
    scale = D ** -0.5 if softmax_scale is None else softmax_scale
    seen = api_functions._flash_seen(L, S, causal, window_size, q.device)
    bias = None
    if alibi_slopes is not None:
        sl = alibi_slopes.reshape(-1, H).double().expand(B, H)
        bias = (-sl[:, :, None, None] * (torch.arange(L)[:, None] - torch.arange(S)[None, :]).abs().double()).to(
            torch.float64 if q.dtype == torch.float64 else torch.float32)
    out, lse = api_functions._attend(*(t.transpose(1, 2) for t in (q, k, v)), scale, seen, bias, softcap)
    out = out.transpose(1, 2)
    return (out, lse, None) if return_attn_probs else out


def flash_window_edge(q, k, v, window_size=(-1, -1), **kw):
    left, right = window_size
    return _flash(q, k, v, window_size=(left - 1 if left > 0 else left, right), **kw)


def flash_mask_ignored(q, k, v, causal=False, window_size=(-1, -1), **kw):
    return _flash(q, k, v, **kw)


def flash_gqa_repeat(q, k, v, **kw):
    G = q.shape[2] // k.shape[2]
    return _flash(q, k.repeat(1, 1, G, 1), v.repeat(1, 1, G, 1), **kw)


def flash_exp_in_dtype(q, k, v, softmax_scale=None, causal=False, return_attn_probs=False, **kw):
    """flash_attn_func whose exp is taken in the inputs' dtype (argument and result rounded), the sum in float32:
    the log-sum-exp carries the rounded exps' error."""
    out, lse, p = _flash(q, k, v, softmax_scale=softmax_scale, causal=causal, return_attn_probs=True, **kw)
    if q.dtype in (torch.bfloat16, torch.float16):
        B, L, H, D = q.shape
        scale = D ** -0.5 if softmax_scale is None else softmax_scale
        G = H // k.shape[2]
        s = torch.einsum("blhd,bshd->bhls", q.float(), k.float().repeat_interleave(G, 2)) * scale
        if causal:
            s = s.masked_fill(~torch.ones(L, k.shape[1], dtype=torch.bool).tril(k.shape[1] - L), -torch.inf)
        m = s.amax(-1, keepdim=True).clamp_min(-1e30)
        lse = (m + torch.exp((s - m).to(q.dtype)).float().sum(-1, keepdim=True).log())[..., 0]
    return (out, lse, p) if return_attn_probs else out


def nudged(q, k, v, **kw):
    """PyTorch's own answer, moved by a few units in its last place in half precision: more error than PyTorch's,
    of no rounding's pattern -- where the same cases pass in float32."""
    out = sdpa(q, k, v, **kw)
    if q.dtype not in (torch.bfloat16, torch.float16):
        return out
    g = torch.Generator().manual_seed(q.shape[-2] * 31 + q.shape[-1])
    step = torch.finfo(q.dtype).eps * out.detach().float().abs().clamp_min(1e-2)
    return (out.float() + 3 * step * torch.randn(out.shape, generator=g)).to(q.dtype)


def upper_left_for_lower_right(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                               enable_gqa=False):
    """A lower-right bool mask (KV-cache decoding's) read as PyTorch's upper-left is_causal."""
    L, S = q.shape[-2], k.shape[-2]
    lower = torch.ones(L, S, dtype=torch.bool).tril(S - L)
    if attn_mask is not None and attn_mask.dtype == torch.bool and L != S and bool((attn_mask == lower).all()):
        return sdpa(q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale, enable_gqa=enable_gqa)
    return sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def paged_new_unseen(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, **kw):
    """k=, v= written into the cache, then only the keys cached before them attended."""
    if k is None:
        return api_functions.paged_decode(q, k_cache, v_cache, cache_seqlens=cache_seqlens, **kw)
    api_functions.paged_decode(q, k_cache, v_cache, k=k, v=v, cache_seqlens=cache_seqlens, **kw)
    return api_functions.paged_decode(q, k_cache, v_cache, cache_seqlens=cache_seqlens, **kw)


def score_mod_only(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
                   score_mod=None):
    """Right, but off wherever a score modifier is passed (a failure no cause reads)."""
    import attnlab

    out = attnlab.attention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, impl="matrix",
                            score_mod=score_mod)
    return _off(out) if score_mod is not None else out


def paged_wrote_elsewhere(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, **kw):
    """Right, but k= written into v_cache and v= into k_cache, where the caller's cache is concerned."""
    if k is None:
        return api_functions.paged_decode(q, k_cache, v_cache, cache_seqlens=cache_seqlens, **kw)
    vc, kc = v_cache.clone(), k_cache.clone()
    res = api_functions.paged_decode(q, kc, vc, k=k, v=v, cache_seqlens=cache_seqlens, **kw)
    new_k, new_v = kc != k_cache, vc != v_cache
    k_cache.copy_(torch.where(new_k, vc, k_cache))
    v_cache.copy_(torch.where(new_v, kc, v_cache))
    return res


def paged_wrong_slots(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, **kw):
    """Right, but k=, v= written one whole page later in memory (page + 1), where no reading puts them."""
    if k is None:
        return api_functions.paged_decode(q, k_cache, v_cache, cache_seqlens=cache_seqlens, block_table=block_table,
                                          **kw)
    kc, vc = k_cache.clone(), v_cache.clone()
    res = api_functions.paged_decode(q, kc, vc, k=k, v=v, cache_seqlens=cache_seqlens, block_table=block_table, **kw)
    for c, new in ((k_cache, kc), (v_cache, vc)):
        moved = (new != c).any(-1).any(-1)  # (blocks, block): the slots written
        for b, s in moved.nonzero().tolist():
            c[(b + 2) % c.shape[0], s] = new[b, s]
    return res


def _api_mutant(name: str):
    from tests import api_mutants

    return api_mutants.CORPUS[name][0]


def _tagged(api: str, test):
    """The API's right reference, off where ``test(kw)`` holds of its keywords: a failure read only from what the
    failing cases share."""
    ref = {A: _flash, V: api_functions.flash_attn_varlen_func, P: api_functions.paged_decode}[api]

    def fn(*args, **kw):
        res = ref(*args, **kw)
        if not test(kw):
            return res
        out, *rest = res if isinstance(res, tuple) else (res,)
        return (_off(out), *rest) if rest else _off(out)
    return fn


MASKS = ("basic", "bool mask", "float mask", "GQA 6/2 causal", "fully masked rows", "L<S causal upper-left",
         "is_causal with a bool mask", "scale=0.05")
F32, BF16, F64 = ("float32",), ("bfloat16",), ("float64",)
A, V, P, X = "flash-attn", "flash-attn-varlen", "paged-decode", "flex"
WINDOWS = ("window", "causal")
PLAIN = ("basic", "no batch dims", "head dim 128", "head dim 40")  # cases no API argument tags
VARLEN = ("4 sequences 5", "causal, 5", "keys longer (chunked", "an empty sequence", "window (4, 4)",
          "12 sequences of mixed lengths, causal")
PAGED = ("3 sequences of 1", "an empty cache", "4 queries, causal", "window (5, -1)", "append 1 (a", "append 4, causal",
         "append 2, pages of 1")

FIXTURES: dict[str, Fixture] = {
    # the contract and the process
    "not-a-tensor": Fixture(not_a_tensor, only=("basic",)),
    "shape": Fixture(wrong_shape, only=("basic",)),
    "dtype": Fixture(wrong_dtype, only=("basic",)),
    "in-place": Fixture(_mutant("in-place"), only=("basic", "bool mask")),
    "requires-grad": Fixture(regrad, only=("basic",)),
    "no-grad": Fixture(_mutant("no-grad"), only=("basic", "causal")),
    "exit": Fixture(exits, only=("basic",)),
    "hangs": Fixture(hangs, only=("basic",), kw={"timeout": 0.5}),
    "raises": Fixture(raises, only=("basic",)),
    "no-grad-output": Fixture(no_grad_path_wrong, only=("basic",)),
    "inference-mode-output": Fixture(inference_path_wrong, only=("basic",)),
    "no-grad-in-place": Fixture(no_grad_in_place, only=("basic",)),
    "inference-mode-in-place": Fixture(inference_in_place, only=("basic",)),
    "no-grad-raises": Fixture(no_grad_raises, only=("basic",)),
    "inference-mode-raises": Fixture(inference_raises, only=("basic",)),
    "gradients-only": Fixture(_mutant("gradients-only"), only=("basic", "causal")),
    "backward-mask": Fixture(_mutant("backward-mask"), only=("is_causal with a bool mask", "causal", "bool mask")),
    # SDPA's semantics
    "unscaled": Fixture(_mutant("unscaled"), only=MASKS),
    "scale-1/d": Fixture(_mutant("scale-1/d"), only=MASKS),
    "scale": Fixture(_mutant("scale"), only=(*MASKS, "scale=3", "scale=-0.7")),
    "scale-tensor": Fixture(_mutant("scale-tensor"), only=(*MASKS, "0-d tensor", "scale=3")),
    "causal-ignored": Fixture(_mutant("causal-ignored"), only=MASKS),
    "diagonal": Fixture(_mutant("diagonal"), only=MASKS),
    "causal-reversed": Fixture(_mutant("causal-reversed"), only=MASKS),
    "mask-zero": Fixture(_mutant("mask-zero"), only=MASKS),
    "causal-alignment": Fixture(_mutant("causal-alignment"), only=MASKS),
    "causal+mask": Fixture(_mutant("causal+mask"), only=(*MASKS, "is_causal with a padding", "is_causal with a float")),
    "mask-ignored": Fixture(_mutant("mask-ignored"), only=MASKS),
    "mask-inverted": Fixture(_mutant("mask-inverted"), only=MASKS),
    "bool-mask": Fixture(_mutant("bool-mask"), only=MASKS),
    "float-mask": Fixture(_mutant("float-mask"), only=(*MASKS, "float bias")),
    "broadcast-mask": Fixture(_mutant("broadcast-mask"), only=(*MASKS, "broadcast", "padding")),
    "dead-rows": Fixture(_mutant("dead-rows"), only=MASKS),
    "gqa": Fixture(_mutant("gqa"), only=(*MASKS, "MQA")),
    "max-subtraction": Fixture(_mutant(("max-subtraction", "dead-rows")), only=("basic", "causal", "large logits")),
    "softmax-dim": Fixture(_mutant("softmax-dim"), only=("basic", "no batch dims", "scale=0.05")),
    "dropout-scale": Fixture(_mutant("dropout-scale"), only=("basic", "dropout")),
    "dropout": Fixture(_mutant("dropout"), only=("basic", "dropout", "causal")),
    "dropout-renormalised": Fixture(_mutant("dropout-renormalised"), only=("basic", "dropout")),
    "noncontig": Fixture(_mutant("noncontig"), only=("basic", "causal", "transposed", "expanded", "sliced")),
    "batch-dims": Fixture(_mutant("batch-dims"), only=("basic", "causal", "batch dims")),
    "causal-offset-sign": Fixture(_mutant("causal-offset-sign"), only=MASKS),
    "pad-keys": Fixture(_mutant("pad-keys"), only=(*MASKS, "off the tiles", "head dim 40")),
    "online-not-rescaled": Fixture(mutants.MUTANTS["online softmax without the rescale"][0],
                                   only=("basic", "causal", "L=1", "off the tiles")),
    "causal-tile-skip": Fixture(causal_tile_first_row, only=MASKS),
    "split-max-dropped": Fixture(splits_merged_by_sums, only=("basic", "causal", "large logits", "off the tiles")),
    "tail-dropped": Fixture(mutants.MUTANTS["tile loop drops the last partial tile"][0],
                            only=("basic", "causal", "off the tiles", "head dim 40", "L=1")),
    "lower-right": Fixture(upper_left_for_lower_right, only=("basic", "causal", "lower-right")),
    "mod": Fixture(score_mod_only, only=("basic", "causal", "score_mod")),
    "grad-mask": Fixture(_shaped(lambda q, k, v, attn_mask=None, **kw: attn_mask is not None and
                                 attn_mask.requires_grad), only=("basic", "float mask", "learnable")),
    "mask-fn": Fixture(_shaped(lambda q, k, v, attn_mask=None, **kw: attn_mask is not None and attn_mask.dtype ==
                               torch.bool and attn_mask.dim() == 4 and attn_mask.shape[-2] in (61, 128)),
                       only=("basic", "bool mask", "mask fn")),
    "Ev!=E": Fixture(_shaped(lambda q, k, v, **kw: v.shape[-1] != q.shape[-1]), only=("basic", "causal", "Ev=")),
    "L=1": Fixture(_shaped(lambda q, k, v, **kw: q.shape[-2] == 1), only=("basic", "causal", "L=1")),
    "L!=S": Fixture(_shaped(lambda q, k, v, **kw: q.shape[-2] != k.shape[-2]),
                    only=("basic", "causal", "L=1", "off the tiles", "L<S", "L>S")),
    "bfloat16": Fixture(bf16_only, only=("basic", "causal", "GQA"), dtypes=("float32", "bfloat16")),
    "float64": Fixture(f64_only, only=("basic", "causal", "GQA"), dtypes=("float32", "float64")),
    "float32": Fixture(f32_only, only=("basic", "causal", "GQA"), dtypes=("float32", "float64")),
    "precision": Fixture(half_through, only=("basic", "causal", "head dim 64"), dtypes=("float32", "bfloat16")),
    "scores-rounded": Fixture(mutants.MUTANTS["scores: matmul and scale in the inputs' dtype"][0],
                              only=("basic", "causal", "large logits"), dtypes=BF16),
    "scale-folded": Fixture(_mutant("scale-folded"), only=("basic", "causal", "large logits"), dtypes=BF16),
    "softmax-half": Fixture(_api_mutant("sdpa_softmax_float16"), only=("basic", "causal", "head dim 64"), dtypes=F32),
    "pv-half": Fixture(pv_in_half, only=("basic", "causal"), dtypes=("float32", "float64")),
    "kv-half": Fixture(kv_staged_half, only=("basic", "causal", "GQA"), dtypes=("float32", "float64")),
    "bias-half": Fixture(mask_in_bfloat16, only=("basic", "float mask"), dtypes=("float32", "float64")),
    "bwd-half": Fixture(dp_in_bfloat16, only=("basic", "causal"), dtypes=("float32", "float64")),
    "float32-in-float64": Fixture(_mutant("float32-in-float64"), only=("basic", "causal"), dtypes=F64),
    "eps-in-sum": Fixture(eps_sum, only=("basic", "causal"), dtypes=F64),
    "over-ratio": Fixture(_api_mutant("sdpa_softmax_input_dtype"), only=("basic", "large logits", "no batch dims"),
                          dtypes=BF16, kw={"max_ratio": 1.0}),
    "precision-unplaced": Fixture(nudged, only=("basic", "causal", "no batch dims"), dtypes=("float32", "bfloat16")),
    "unclear": Fixture(unclear, only=("basic", "no batch dims", "head dim 40", "two batch dims")),
    # the APIs' own: the log-sum-exp
    "no-lse": Fixture(no_lse, A, only=("basic", "causal")),
    "lse-base2": Fixture(api_functions.flash_lse_base2, A, only=("basic", "causal")),
    "lse-unscaled": Fixture(_api_mutant("flash_lse_unscaled"), A, only=("basic", "causal")),
    "lse-shift": Fixture(_api_mutant("flash_lse_without_max"), A, only=("basic", "causal")),
    "lse-dead-rows": Fixture(lse_dead_rows, A, only=("basic", "dead rows")),
    "lse-only": Fixture(lse_unclear, A, only=("basic", "causal")),
    "lse-half": Fixture(lse_half, A, only=("basic", "causal"), dtypes=BF16),
    "merge-half": Fixture(api_bugs.flash_merge_lse_bfloat16, A, only=("basic", "causal", "GQA"), dtypes=F32),
    "exp-half": Fixture(flash_exp_in_dtype, A, only=("basic", "no batch dims", "large logits", "head dim 40"),
                        dtypes=BF16),
    # flash_attn_func
    "api-mask-ignored": Fixture(flash_mask_ignored, A, only=WINDOWS),
    "api-top-left": Fixture(api_functions.flash_top_left, A, only=("causal", "lower-right")),
    "flash-window-swapped": Fixture(api_bugs.flash_window_swapped, A, only=("window",)),
    "flash-softcap-scale": Fixture(api_bugs.flash_softcap_before_scale, A, only=("softcap",)),
    "flash-alibi-one-row": Fixture(api_bugs.flash_alibi_one_row, A, only=("ALiBi",)),
    "flash-alibi-signed": Fixture(_api_mutant("flash_alibi_signed"), A, only=("ALiBi",)),
    "flash-alibi-offset": Fixture(flash_alibi_offset, A, only=("probe: weights, ALiBi (H,), causal",)),
    "flash-window-edge": Fixture(flash_window_edge, A, only=("window",)),
    "window": Fixture(_tagged(A, lambda kw: "window_size" in kw), A, only=("window", *PLAIN)),
    "window-left": Fixture(_tagged(A, lambda kw: kw.get("window_size", (-1, -1))[0] >= 0), A, only=("window", *PLAIN)),
    "window-right": Fixture(_tagged(A, lambda kw: kw.get("window_size", (-1, -1))[1] >= 0 and not kw.get("causal")),
                            A, only=("window", *PLAIN)),
    "softcap": Fixture(_tagged(A, lambda kw: bool(kw.get("softcap"))), A, only=("softcap", "ALiBi", *PLAIN)),
    "alibi": Fixture(_tagged(A, lambda kw: kw.get("alibi_slopes") is not None), A, only=("ALiBi", "softcap", *PLAIN)),
    "append": Fixture(_tagged(P, lambda kw: kw.get("k") is not None), P, only=("append", "3 sequences", "GQA")),
    # flex_attention
    "mod-after-mask": Fixture(api_bugs.flex_mod_after_mask, X, only=("softcap", "causal")),
    "flex-full-only": Fixture(api_bugs.flex_full_blocks_only, X, only=("causal", "documents")),
    "flex-partial-as-full": Fixture(_api_mutant("flex_partial_as_full"), X, only=("causal", "documents")),
    "flex-block-size": Fixture(_api_mutant("flex_block_size_64"), X, only=("causal", "documents", "window")),
    "flex-mod-index": Fixture(api_bugs.flex_mod_index_swapped, X, only=("softcap", "relative", "alibi")),
    "flex-mod-kv-head": Fixture(_api_mutant("flex_mod_kv_head"), X, only=("GQA", "alibi", "relative")),
    "flex-counts-ignored": Fixture(api_bugs.flex_counts_ignored, X, only=("causal", "documents", "padding")),
    "flex-full-dropped": Fixture(api_bugs.flex_full_dropped, X, only=("causal", "documents", "padding")),
    "flex-counts-crossed": Fixture(api_bugs.flex_counts_crossed, X, only=("causal", "documents", "padding")),
    # flash_attn_varlen_func
    "varlen-keys-early": Fixture(_kv("varlen-keys-early"), V, only=VARLEN),
    "varlen-keys-late": Fixture(_kv("varlen-keys-late"), V, only=VARLEN),
    "varlen-keys-overrun": Fixture(_kv("varlen-keys-overrun"), V, only=VARLEN),
    "varlen-max-seqlen-k": Fixture(_kv("varlen-max-seqlen-k"), V, only=VARLEN),
    "varlen-queries-shifted": Fixture(_kv("varlen-queries-shifted"), V, only=VARLEN),
    "varlen-top-left": Fixture(_kv("varlen-top-left"), V, only=VARLEN),
    "varlen-causal-packed": Fixture(_kv("varlen-causal-packed"), V, only=VARLEN),
    "varlen-packing-ignored": Fixture(_kv("varlen-packing-ignored"), V, only=VARLEN),
    "varlen-diagonal-from-max": Fixture(_api_mutant("varlen_offset_from_max"), V, only=VARLEN),
    "varlen-lse-padded": Fixture(_api_mutant("varlen_lse_padded"), V, only=VARLEN),
    # a paged KV cache
    "paged-page-id-off": Fixture(_kv("paged-page-id-off"), P, only=PAGED),
    "paged-table-index-off": Fixture(_kv("paged-table-index-off"), P, only=PAGED),
    "paged-table-ignored": Fixture(_kv("paged-table-ignored"), P, only=PAGED),
    "paged-seqlens-ignored": Fixture(_kv("paged-seqlens-ignored"), P, only=PAGED),
    "paged-stale-slots": Fixture(_kv("paged-stale-slots"), P, only=PAGED),
    "paged-top-left": Fixture(_kv("paged-top-left"), P, only=PAGED),
    "paged-queries-before-append": Fixture(_kv("paged-queries-before-append"), P,
                                           only=(*PAGED, "append 3, window (3, 2)")),
    "paged-new-kv-unseen": Fixture(paged_new_unseen, P, only=PAGED),
    "paged-cache-not-written": Fixture(_kv("paged-cache-not-written"), P, only=PAGED),
    "paged-new-kv-stale": Fixture(_kv("paged-new-kv-stale"), P, only=PAGED),
    "paged-new-kv-wrong-slot": Fixture(_kv("paged-new-kv-wrong-slot"), P, only=PAGED),
    "paged-cache-touched": Fixture(_kv("paged-cache-touched"), P, only=PAGED),
    "paged-cache-wrong-slots": Fixture(_kv("paged-new-kv-wrong-slot"), P, only=("pages of 1",)),
    "paged-cache-written": Fixture(paged_wrote_elsewhere, P, only=("append",)),
    # attention sinks (tests/sink_kernels.py: one bug each where sinks are given, PyTorch's answer where not)
    "sinks": Fixture(sink_kernels.sdpa_kernel("halved"),
                     only=("basic", "transposed views", "sinks: random", "sinks: large")),
    "sink-ignored": Fixture(sink_kernels.sdpa_kernel("ignored"), only=("sinks: random", "sinks: large, causal")),
    "sink-head": Fixture(sink_kernels.sdpa_kernel("head0"), only=("sinks: random", "sinks: large, causal")),
    "sink-kv-head": Fixture(sink_kernels.flash_kernel("kv-head"), A, only=("flash sinks: GQA",)),
    "sink-query": Fixture(sink_kernels.sdpa_kernel("query"), only=("sinks: random", "sinks: large, causal")),
    "sink-per-tile": Fixture(sink_kernels.sdpa_kernel("per-tile"), only=("sinks: zero, L<S", "sinks: sliding")),
    "sink-not-in-lse": Fixture(sink_kernels.flash_kernel("not-in-lse"), A, only=("flash sinks: random",)),
    "dsink-zero": Fixture(sink_kernels.sdpa_kernel(grad_bug="zero"), only=("sinks: random",)),
    "dsink-sign": Fixture(sink_kernels.sdpa_kernel(grad_bug="sign"), only=("sinks: random",)),
    "dsink-form": Fixture(sink_kernels.sdpa_kernel(grad_bug="no-D"), only=("sinks: random",)),
    "dsink-axis": Fixture(sink_kernels.flash_kernel(grad_bug="group"), A, only=("flash sinks: GQA",)),
    "sink-scaled": Fixture(sink_kernels.sdpa_kernel("scaled"), only=("sinks: random", "sinks: large, causal")),
    "sink-unshifted": Fixture(sink_kernels.sdpa_kernel("unshifted"), only=("sinks: random", "sinks: large, causal")),
    "sink-masked": Fixture(sink_kernels.sdpa_kernel("masked"),
                           only=("sinks: random", "sinks: zero, L<S", "sinks: causal, L>S", "sinks: large, causal")),
    "sink-column-shifted": Fixture(sink_kernels.sdpa_kernel("column-shifted"), only=("sinks: random",)),
    "sink-backward": Fixture(sink_kernels.sdpa_kernel(grad_bug="keys-lse"), only=("sinks: random",)),
    "sink-modified": Fixture(sink_kernels.flash_modified("modified"), A,
                             only=("flash sinks: ALiBi", "flash sinks: soft")),
}

NO_FUNCTION = {  # causes no function can have: the judge's own, and the lines that say a process ended
    "oracle": "the oracle and PyTorch disagreeing is the judge's bug, whatever the function: tested by "
              "tests/judge/test_oracle.py with PyTorch's answer patched",
    "busy": "a function the machine holds back past its time needs a busy machine (or a process stopped in turns, as "
            "tests/judge/test_pace.py holds it back): tested there",
    "ended": "a function that ends its process (os._exit, a kill) needs a process of its own: tested by "
             "tests/cli/test_verify_isolation.py and tests/test_testing_strict.py",
    "device": "an output on another device needs a second device: tested by tests/judge/test_device_dtypes.py",
}
