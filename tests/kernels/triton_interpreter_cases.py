"""The triton form under Triton's CPU interpreter: forward and gradients against the float64 oracle.

Triton reads TRITON_INTERPRET when a kernel is defined, so these tests run in a process of their
own (tests/kernels/test_triton.py starts it) where it is set before anything imports Triton; the
rest of the suite never sees it. Sizes are tiny and tiles 16 x 16, so that odd lengths, partial
and skipped tiles all occur; each case prints its errors before the tolerance rule judges it.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before Triton defines a kernel (this file is its own process)

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import attnlab  # noqa: E402
from attnlab import kernels, masks  # noqa: E402
from attnlab.judge import oracle, rule  # noqa: E402
from attnlab.kernels import triton_kernels as tk  # noqa: E402
from attnlab.kernels import triton_masks  # noqa: E402
from attnlab.kernels.masks import index_grid, tile_slices  # noqa: E402
from tests.helpers import qkv  # noqa: E402

torch.set_num_threads(1)


def make(N, H, Hkv, L, S, E, Ev, dtype, seed=0):
    """q, k, v and an output gradient, drawn in float32 and then cast (so every dtype sees the same numbers)."""
    return [t.to(dtype) for t in qkv(N, H, Hkv, L, S, E, Ev, dtype=torch.float32, seed=seed, grad_out=True)]


def judge(size, dtype=torch.float32, mask=None, dense=None, is_causal=False, scale=None, seed=0, tiles=16):
    """Run the triton form, PyTorch and the oracle on one case; return the comparisons (out, dq, dk, dv)."""
    q, k, v, g = make(*size, dtype, seed)
    gqa = size[1] != size[2]
    dense = mask.dense(size[0], size[1], size[3], size[4]) if isinstance(mask, masks.Mask) else (
        mask if dense is None else dense)

    def run(fn, m, **kw):
        ins = [t.clone().requires_grad_() for t in (q, k, v)]
        out = fn(*ins, attn_mask=m, is_causal=is_causal, scale=scale, enable_gqa=gqa, **kw)
        return (out, *torch.autograd.grad(out, ins, g))

    mine = run(attnlab.attention, mask, impl="triton", block_q=tiles, block_k=tiles)
    theirs = run(F.scaled_dot_product_attention, dense)
    ref = oracle.reference(q, k, v, dense, is_causal, scale, gqa, grad_out=g)
    floor = rule.rounding_floor(q, k, v, dense, is_causal, scale, gqa, grad_out=g, dtype=dtype)
    comps = [rule.compare(n, a, b, r, dtype, floor[n]) for n, a, b, r in zip(("out", "dq", "dk", "dv"), mine, theirs,
                                                                               ref, strict=True)]
    print(size, dtype, " ".join(f"{c.quantity} {c.err:.1e} (torch {c.torch_err:.1e}, allowed {c.allowed:.1e})"
                                for c in comps))
    return comps


def assert_pass(comps):
    bad = [c for c in comps if not c.passed]
    assert not bad, "; ".join(f"{c.quantity}: error {c.err:.2e} > allowed {c.allowed:.2e}" for c in bad)


def odd_mask(b, h, i, j):  # no rule for this one: it goes through its block map's stored tiles
    return ((i + 2 * j) % 5 != 0) & (j <= i + 3)


CASES = {  # name -> (N, H, Hkv, L, S, E, Ev), keywords of judge
    "full, odd lengths and head dims": ((1, 2, 2, 37, 45, 40, 24), {}),
    "causal upper-left, L < S": ((1, 2, 2, 21, 50, 32, 32), {"is_causal": True}),
    "causal upper-left, L > S": ((1, 2, 2, 50, 21, 32, 32), {"is_causal": True}),
    "lower-right, L > S: dead rows": ((1, 2, 2, 40, 19, 16, 16), {"mask": masks.causal_lower_right()}),
    "lower-right decode, L = 1": ((2, 2, 2, 1, 37, 16, 16), {"mask": masks.causal_lower_right()}),
    "sliding window": ((1, 2, 2, 64, 64, 16, 16), {"mask": masks.sliding_window(13)}),
    "prefix-LM": ((1, 2, 2, 50, 50, 16, 16), {"mask": masks.prefix_lm(21)}),
    "document & causal, per batch": ((2, 2, 2, 40, 40, 16, 16),
                                     {"mask": masks.document(torch.tensor([[0] * 9 + [1] * 20 + [2] * 11,
                                                                           [0] * 30 + [1] * 10])) & masks.causal()}),
    "document, not contiguous": ((1, 2, 2, 33, 33, 16, 16), {"mask": masks.document(torch.arange(33) % 3)}),
    "sliding window | prefix (block map)": ((1, 2, 2, 48, 48, 16, 16),
                                            {"mask": masks.sliding_window(5) | masks.prefix_lm(3)}),
    "mask_mod of your own (block map)": ((1, 2, 2, 40, 40, 16, 16), {"mask": masks.Mask.from_mod(odd_mask)}),
    "GQA 4/2 causal": ((1, 4, 2, 33, 33, 16, 16), {"is_causal": True}),
    "MQA 3/1, bool mask with dead rows": ((1, 3, 1, 24, 30, 16, 16), {"mask": "dead-rows"}),
    "float mask, broadcast over heads": ((2, 2, 2, 20, 27, 16, 16), {"mask": "float"}),
    "scale 0.3, head dim 130 (padded to 256)": ((1, 1, 1, 20, 20, 130, 130), {"scale": 0.3}),
}


def resolve(size, kw, seed=0):
    kw = dict(kw)
    g = torch.Generator().manual_seed(seed + 1)
    N, H, _, L, S = size[:5]
    if kw.get("mask") == "dead-rows":
        m = torch.rand(N, H, L, S, generator=g) > 0.4
        m[..., ::4, :] = False  # every fourth query sees no key
        kw["mask"] = m
    elif kw.get("mask") == "float":
        kw["mask"] = torch.randn(N, 1, L, S, generator=g)
    return kw


@pytest.mark.parametrize("name", list(CASES))
def test_float32_against_oracle(name):
    size, kw = CASES[name]
    assert_pass(judge(size, **resolve(size, kw)))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["causal upper-left, L > S", "GQA 4/2 causal", "document & causal, per batch"])
def test_half_precision_against_oracle(name, dtype):
    size, kw = CASES[name]
    assert_pass(judge(size, dtype, **resolve(size, kw)))


@pytest.mark.parametrize("seed", [1, 2])
def test_default_tiles_and_other_seeds(seed):
    size = (2, 2, 2, 70, 70, 32, 32)
    assert_pass(judge(size, is_causal=True, seed=seed, tiles=None))


def window_mod(b, h, i, j):
    return (j <= i) & (j > i - 8)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the NaN rows, on purpose
@pytest.mark.parametrize("mask", [masks.sliding_window(8), masks.Mask.from_mod(window_mod)], ids=["rule", "block map"])
def test_empty_tiles_are_never_read(mask):
    """Key tile 0 (keys 0..15) is NaN. Queries 32..63 see keys > 24 only, so for their tiles it is EMPTY: a
    kernel that read it anyway would turn their output and every gradient of keys 32..63 into NaN."""
    q, k, v, g = make(1, 1, 1, 64, 64, 16, 16, torch.float32)
    clean = [t.clone().requires_grad_() for t in (q, k, v)]
    k[..., :16, :] = float("nan")
    v[..., :16, :] = float("nan")
    poisoned = [t.clone().requires_grad_() for t in (q, k, v)]
    res = []
    for ins in (clean, poisoned):
        out = attnlab.attention(*ins, attn_mask=mask, impl="triton", block_q=16, block_k=16)
        res.append([out, *torch.autograd.grad(out, ins, g)])
    for name, a, b in zip(("out", "dq", "dk", "dv"), *res, strict=True):
        assert torch.isfinite(b[..., 32:, :]).all(), f"{name}: an EMPTY tile was read"
        torch.testing.assert_close(b[..., 32:, :], a[..., 32:, :], rtol=0, atol=0)
    assert torch.isnan(res[1][0][..., :16, :]).all()  # the queries that do see key tile 0 see the NaN


def test_rules_recognised():
    """Masks the kernel evaluates itself, and the ones that go through their block map."""
    r = triton_masks.rule_of(masks.sliding_window(9) & masks.causal(), 50, 50)
    assert (r.off, r.window, r.prefix, r.doc) == (0, 9, None, None)
    assert triton_masks.rule_of(masks.causal_lower_right(), 10, 30).off == 20
    assert triton_masks.rule_of(masks.prefix_lm(4), 9, 9).prefix == 4
    assert triton_masks.rule_of(masks.document(torch.arange(8)) & masks.causal(), 8, 8).doc is not None
    assert triton_masks.rule_of(masks.prefix_lm(4) & masks.causal(), 9, 9) is None  # an OR inside an AND
    assert triton_masks.rule_of(masks.causal() | masks.prefix_lm(2), 9, 9) is None
    assert triton_masks.rule_of(masks.causal_lower_right() & masks.causal(), 5, 9) is None  # two alignments
    assert triton_masks.rule_of(masks.Mask.from_mod(odd_mask), 9, 9) is None


def test_unsupported_inputs_name_the_forms_that_take_them():
    q, k, v, _ = make(1, 2, 2, 8, 8, 16, 16, torch.float32)
    with pytest.raises(kernels.Unsupported, match="dropout_p=0.1.*flash"):
        attnlab.attention(q, k, v, dropout_p=0.1, impl="triton")
    with pytest.raises(kernels.Unsupported, match="float64.*flash"):
        attnlab.attention(q.double(), k.double(), v.double(), impl="triton")
    with pytest.raises(kernels.Unsupported, match="score_mod"):
        attnlab.attention(q, k, v, impl="triton", score_mod=lambda s, b, h, i, j: s)
    bias = torch.zeros(8, 8, requires_grad=True)
    with pytest.raises(kernels.Unsupported, match="requires grad.*flash"):
        attnlab.attention(q, k, v, attn_mask=bias, impl="triton")
    big = torch.randn(1, 1, 4, 300)
    with pytest.raises(kernels.Unsupported, match="E=300.*256"):
        attnlab.attention(big, big, big, impl="triton")
    with pytest.raises(ValueError, match="block_q must be a power of two"):
        attnlab.attention(q, k, v, impl="triton", block_q=24)


def test_registry_says_where_it_runs():
    form = kernels.get("triton")
    assert form.why_not("cpu") is None and "triton" in attnlab.forms()  # here: the interpreter is on
    assert form.max_work is not None and form.slow  # small sizes only, under the interpreter


@pytest.mark.parametrize("how", ["transposed", "expanded", "sliced"])
@pytest.mark.parametrize("mask", [None, masks.causal_lower_right() & masks.sliding_window(7)], ids=["full", "window"])
def test_layouts_that_are_not_contiguous(how, mask):
    """(B, L, H, E).transpose(1, 2), keys expanded over heads (stride 0), a last dim sliced from a wider one."""
    from .test_layouts import inputs

    q, k, v, g = (t.float() for t in inputs(how, 2, 4, 2, 19, 29, 16))
    ins = [t.detach().requires_grad_() for t in (q, k, v)]
    out = attnlab.attention(*ins, attn_mask=mask, enable_gqa=True, impl="triton", block_q=16, block_k=16)
    mine = (out, *torch.autograd.grad(out, ins, g))
    dense = None if mask is None else mask.dense(2, 4, 19, 29)
    pt = [t.detach().contiguous().requires_grad_() for t in (q, k, v)]
    o = F.scaled_dot_product_attention(*pt, attn_mask=dense, enable_gqa=True)
    theirs = (o, *torch.autograd.grad(o, pt, g))
    ref = oracle.reference(q, k, v, dense, False, None, True, grad_out=g)
    floor = rule.rounding_floor(q, k, v, dense, False, None, True, grad_out=g, dtype=torch.float32)
    comps = [rule.compare(n, a, b, r, torch.float32, floor[n]) for n, a, b, r in zip(("out", "dq", "dk", "dv"), mine,
                                                                                       theirs, ref, strict=True)]
    print(how, " ".join(f"{c.quantity} {c.err:.1e} (torch {c.torch_err:.1e})" for c in comps))
    assert_pass(comps)


@pytest.mark.parametrize("size", [(1, 2, 2, 9, 21, 16, 16), (1, 2, 2, 21, 9, 16, 16)], ids=["L<S", "L>S"])
@pytest.mark.parametrize("variant", ["upper_left", "lower_right"])
def test_pytorchs_causal_bias_is_the_variant_it_names(variant, size):
    """torch.nn.attention.bias.causal_*: never read as a float bias (its storage is uninitialised)."""
    from torch.nn.attention import bias

    make_bias = bias.causal_upper_left if variant == "upper_left" else bias.causal_lower_right
    spelled = masks.causal() if variant == "upper_left" else masks.causal_lower_right()
    q, k, v, _ = make(*size, torch.float16)
    got = attnlab.attention(q, k, v, attn_mask=make_bias(size[3], size[4]), impl="triton")
    want = attnlab.attention(q, k, v, attn_mask=spelled, impl="triton")
    print(variant, size, rule.max_err(got, F.scaled_dot_product_attention(q, k, v, attn_mask=make_bias(*size[3:5]))))
    assert torch.equal(got, want)


def test_a_mask_written_per_position_as_for_flexattention():
    """The Flamingo-style cross-attention mask (it indexes tensors with kv_idx): evaluated per position."""
    from .test_mask_mod import CROSS, truth

    size = (2, 2, 2, 20, 15, 16, 16)
    comps = judge(size, mask=masks.Mask.from_mod(CROSS), dense=truth(CROSS, 2, 2, 20, 15))
    assert_pass(comps)


@pytest.mark.parametrize("logits", ["small", "large"])
def test_saved_statistics_agree_with_the_flash_form(logits):
    """What the forward saves per row for the backward (online.finish's shift and norm): the Triton kernel
    and the flash form, same input. A row that sees no key saves (+inf, 1) and writes 0 in both; the others
    save the same log-sum-exp, and with large logits (no bounded path in flash) the same shift and norm."""
    from attnlab.kernels import flash, flash_triton, online

    N, H, L, S, E = 1, 2, 40, 56, 16
    q, k, v, _ = make(N, H, H, L, S, E, E, torch.float32)
    q = q * (20.0 if logits == "large" else 1.0)
    mask = torch.rand(N, 1, L, S, generator=torch.Generator().manual_seed(4)) > 0.3
    mask[..., 3, :] = False  # row 3 sees no key
    mask[..., 17, :] = False
    out, shift, norm = flash_triton.statistics(q, k, v, attn_mask=mask, block_q=16, block_k=16)
    tiles = flash.Tiles(N, H, L, S, 16, 16, None, mask)
    f_out, f_lse, (f_shift, f_norm) = flash.forward_tiles(q.reshape(N, H, 1, L, E), k, v, E ** -0.5, tiles,
                                                          keep_norm=True)
    f_out, f_lse, f_shift, f_norm = (t[:, :, 0] for t in (f_out, f_lse, f_shift, f_norm))
    dead = ~mask[0, 0].any(dim=-1)  # (L,)
    for name, t in (("triton", (out, shift, norm)), ("flash", (f_out, f_shift, f_norm))):
        o, m, n = t
        assert torch.equal(o[:, :, dead], torch.zeros_like(o[:, :, dead])), name
        assert bool((m[:, :, dead] == float("inf")).all()) and bool((n[:, :, dead] == 1).all()), name
    lse = (shift.double() + torch.log2(norm.double())) * online.LN2
    err = float((lse - f_lse)[:, :, ~dead].abs().max())
    print(logits, "max |lse triton - lse flash|", err, "out", rule.max_err(out, f_out))
    assert torch.equal(f_lse[:, :, dead], torch.full_like(f_lse[:, :, dead], float("-inf")))
    assert err < 1e-5 * float(f_lse.abs()[:, :, ~dead].max() + 1)
    if logits == "large":  # flash's running max: the shift is each row's largest score, as in the kernel
        torch.testing.assert_close(shift[:, :, ~dead], f_shift[:, :, ~dead], rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(norm[:, :, ~dead], f_norm[:, :, ~dead], rtol=1e-4, atol=0)


def _node(out):
    """The triton form's autograd node under ``out`` (a view of its output)."""
    fn = out.grad_fn
    while "TritonFlash" not in type(fn).__name__:
        fn = fn.next_functions[0][0]
    return fn


@pytest.mark.parametrize("mask", [None, masks.sliding_window(9)], ids=["full", "window"])
def test_transposed_inputs_are_read_in_place_and_give_the_contiguous_answer(mask):
    """transformers passes (B, L, H, E).transpose(1, 2): read by its strides, bit for bit the contiguous call."""
    q, k, v, g = make(1, 4, 2, 33, 33, 16, 16, torch.float32)
    runs = []
    for layout in ("contiguous", "transposed"):
        ins = [t.clone() if layout == "contiguous" else t.transpose(1, 2).contiguous().transpose(1, 2) for t in
               (q, k, v)]
        ins = [t.requires_grad_() for t in ins]
        out = attnlab.attention(*ins, attn_mask=mask, enable_gqa=True, impl="triton", block_q=16, block_k=16)
        saved = _node(out).saved_tensors[:3]
        for s, t in zip(saved, ins, strict=True):  # the caller's own memory, in its own layout: no copy
            assert s.data_ptr() == t.data_ptr(), layout
            assert all(a == b for a, b, n in zip(s.stride(), t.stride(), t.shape, strict=True) if n > 1), layout
        runs.append((out, *torch.autograd.grad(out, ins, g)))
    for name, a, b in zip(("out", "dq", "dk", "dv"), *runs, strict=True):
        assert torch.equal(a, b), name


@triton.jit
def _probe(MT, MASK, PACK, SPAN, NEED, VIS, L, S, n_other_tiles, MASKS: tl.constexpr, TRANSPOSE: tl.constexpr,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One row tile (program 0) of batch element b (program 1): the loop bounds the kernels would take, and for
    every tile of the other axis whether it would be masked and which of its pairs are visible."""
    pid = tl.program_id(0)
    b = tl.program_id(1)
    mask = tk._mask_state(MT, MASK, PACK)
    BLOCK_ROWS: tl.constexpr = BLOCK_N if TRANSPOSE else BLOCK_M
    BLOCK_OTHER: tl.constexpr = BLOCK_M if TRANSPOSE else BLOCK_N
    row0 = pid * BLOCK_ROWS
    t_lo, t_hi = tk._span(row0, pid, b, L if TRANSPOSE else S, mask, MASKS, TRANSPOSE, BLOCK_ROWS, BLOCK_OTHER)
    tl.store(SPAN + (b * tl.num_programs(0) + pid) * 2, t_lo)
    tl.store(SPAN + (b * tl.num_programs(0) + pid) * 2 + 1, t_hi)
    for t in range(0, n_other_tiles):
        q0 = t * BLOCK_M if TRANSPOSE else row0
        k0 = row0 if TRANSPOSE else t * BLOCK_N
        need = tk._needs_mask(q0, q0 + BLOCK_M, k0, k0 + BLOCK_N, S, -1, mask, MASKS)
        tl.store(NEED + (b * tl.num_programs(0) + pid) * n_other_tiles + t, need.to(tl.int32))
        i = q0 + tl.arange(0, BLOCK_M)
        j = k0 + tl.arange(0, BLOCK_N)
        vis = tk._visible(i[:, None], j[None, :], b, 0, L, S, q0, k0, -1, mask, MASKS, BLOCK_N)
        tl.store(VIS + b * L * S + i[:, None] * S + j[None, :], vis.to(tl.int8),
                 mask=(i[:, None] < L) & (j[None, :] < S))


def _rule_masks(g, N, L, S):
    w = int(torch.randint(1, 40, (1,), generator=g))
    n = int(torch.randint(0, 30, (1,), generator=g))
    out = [masks.causal(), masks.causal_lower_right(), masks.sliding_window(w), masks.prefix_lm(n),
           masks.sliding_window(47)]  # 47 = 16 + 32 - 1: a tile's first key on the window's edge, FULL tiles beside
    if L == S:  # (a window is aligned upper-left: with L != S it has no closed form beside lower-right)
        out.append(masks.causal_lower_right() & masks.sliding_window(w))
        ids = torch.randint(0, 5, (N, S), generator=g)  # per batch element, not contiguous: a document may recur
        out += [masks.document(ids), masks.document(ids) & masks.causal(),
                masks.document(ids.sort(dim=-1).values) & masks.sliding_window(w) & masks.causal(),
                masks.prefix_lm(n) & masks.document(ids[0])]
    return out


@pytest.mark.parametrize("seed", range(2))
def test_the_kernels_closed_form_agrees_with_the_rule_and_the_mask_function(seed):
    """The kernels' predicates (_span, _needs_mask, _visible) on each mask's Rule, against the Rule evaluated in
    PyTorch (Rule.visible) and against the mask's function, on random
    sizes: the same visible pairs, every tile outside the loop bounds EMPTY, and no tile left unmasked that is not
    FULL. On sizes that are whole tiles, also no needless work: the first and the last tile inside the bounds
    are not EMPTY, and (without document ids, read in every tile) every FULL tile is left unmasked."""
    g = torch.Generator().manual_seed(seed)
    bq, bk = (16, 32) if seed == 0 else (32, 16)
    L0 = int(torch.randint(1, 70, (1,), generator=g))
    S0 = L0 if seed == 0 else int(torch.randint(1, 70, (1,), generator=g))
    sizes = [(L0, S0, False)] + ([(96, 96 + 32 * (S0 % 2), True)] if seed == 0 else [])
    for L, S, whole in sizes:
        for mask in _rule_masks(g, 2, L, S):
            _check_closed_form(mask, 2, L, S, bq, bk, whole)


def _check_closed_form(mask, N, L, S, bq, bk, whole):
    rule = mask.rule(L, S)
    assert rule is not None, mask
    plan = triton_masks.Plan(N, 1, 1, L, S, rule, mask, None)
    dense = mask.dense(N, 1, L, S).expand(N, 1, L, S)[:, 0]  # (N, L, S), from the function
    by_rule = rule.visible(*index_grid(N, 1, 0, L, 0, S)).expand(N, 1, L, S)[:, 0]  # the rule, in PyTorch
    for transpose in (False, True):
        (mt, m_, pack), bits = plan.args(bq, bk, transpose, "cpu")
        n_rows, n_other = (-(-S // bk), -(-L // bq)) if transpose else (-(-L // bq), -(-S // bk))
        span = torch.zeros(N, n_rows, 2, dtype=torch.int32)
        need = torch.zeros(N, n_rows, n_other, dtype=torch.int32)
        vis = torch.zeros(N, L, S, dtype=torch.int8)
        _probe[(n_rows, N)](mt, m_, pack, span, need, vis, L, S, n_other, MASKS=bits, TRANSPOSE=transpose,
                            BLOCK_M=bq, BLOCK_N=bk)
        assert torch.equal(vis.bool(), by_rule), (mask, L, S, "the predicates against the rule")
        assert torch.equal(vis.bool(), dense), (mask, L, S, "the predicates against the function")
        for b in range(N):
            kinds = _kinds(dense[b], bq, bk)  # (nQ, nK), read off the function
            k = [list(c) for c in zip(*kinds, strict=True)] if transpose else kinds  # (row tiles, other tiles)
            for r in range(n_rows):
                lo, hi = span[b, r].tolist()
                where = (mask, L, S, transpose, b, r, lo, hi)
                assert all(k[r][t] == masks.EMPTY for t in range(n_other) if not lo <= t < hi), where
                assert all(k[r][t] == masks.FULL for t in range(n_other) if not need[b, r, t]), where
                if whole and lo < hi:
                    assert k[r][lo] != masks.EMPTY and k[r][hi - 1] != masks.EMPTY, where
                if whole and rule.doc is None:
                    assert all(not need[b, r, t] for t in range(n_other) if k[r][t] == masks.FULL), where


def _kinds(dense: torch.Tensor, bq: int, bk: int) -> list:
    """EMPTY / PARTIAL / FULL of each tile of one batch element's (L, S) mask."""
    def kind(t):
        return masks.FULL if bool(t.all()) else masks.PARTIAL if bool(t.any()) else masks.EMPTY
    return [[kind(dense[rows, cols]) for _, cols in tile_slices(dense.shape[1], bk)]
            for _, rows in tile_slices(dense.shape[0], bq)]
