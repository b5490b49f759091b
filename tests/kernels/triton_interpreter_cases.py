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

import attnlab  # noqa: E402
from attnlab import kernels, masks  # noqa: E402
from attnlab.kernels import triton_masks  # noqa: E402
from attnlab.lab import oracle, rule  # noqa: E402
from helpers import qkv  # noqa: E402

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
    comps = [rule.compare(n, a, b, r, dtype) for n, a, b, r in zip(("out", "dq", "dk", "dv"), mine, theirs, ref,
                                                                     strict=True)]
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
    comps = [rule.compare(n, a, b, r, torch.float32) for n, a, b, r in zip(("out", "dq", "dk", "dv"), mine, theirs,
                                                                             ref, strict=True)]
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
