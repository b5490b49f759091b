"""PyTorch's own causal masks, ``torch.nn.attention.bias.causal_upper_left / causal_lower_right``, as attn_mask.

A ``CausalBias`` is a tensor subclass whose storage is never filled in: PyTorch's SDPA reads its
variant, not its values. Read as a float bias it gives a different wrong answer on every run. Every
form must give the causal variant it names: the same numbers as that mask spelled out, and PyTorch's
answer on the bias itself. The tolerance rule is shown to tell the variants apart on the same cases:
it fails attention that reads the bias as the other alignment, and passes the reading it names.
"""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import CausalVariant, causal_lower_right, causal_upper_left

import attnlab
from attnlab import masks
from attnlab.judge import oracle, rule
from tests.helpers import qkv
from tests.mutants import attend

SIZES = {"L<S": (2, 3, 5, 9, 8), "L>S": (1, 2, 9, 5, 8), "L=S": (2, 2, 7, 7, 4)}  # N, H, L, S, E
VARIANTS = {"upper_left": (causal_upper_left, "causal"), "lower_right": (causal_lower_right, "lower")}


def spelled_out(variant):
    return masks.causal() if variant == "upper_left" else masks.causal_lower_right()


def run(impl, q, k, v, g, mask, **kw):
    ins = [t.clone().requires_grad_() for t in (q, k, v)]
    out = impl(*ins, attn_mask=mask) if callable(impl) else attnlab.attention(*ins, attn_mask=mask, impl=impl, **kw) \
        if impl != "torch" else F.scaled_dot_product_attention(*ins, attn_mask=mask)
    out.backward(g)
    return [out, *(t.grad for t in ins)]


def judged(impl, variant, size, dtype):
    """(the form's answers on the bias, on the mask spelled out, the tolerance rule's verdict per quantity)."""
    N, H, L, S, E = SIZES[size]
    q, k, v, g = (t.to(dtype) for t in qkv(N, H, H, L, S, E, grad_out=True))
    bias = VARIANTS[variant][0](L, S)
    got = run(impl, q, k, v, g, bias)
    want = run(impl, q, k, v, g, spelled_out(variant)) if not callable(impl) else got
    theirs = run("torch", q, k, v, g, bias)
    ref = oracle.reference(q, k, v, spelled_out(variant), grad_out=g)
    rounding = rule.rounding_floor(q, k, v, spelled_out(variant), grad_out=g)
    cmps = [rule.compare(name, a, c, r, dtype, rounding[name])
            for name, a, c, r in zip(("out", "dq", "dk", "dv"), got, theirs, ref, strict=True)]
    for c in cmps:
        print(getattr(impl, "__name__", impl), variant, size, dtype, c.quantity,
              f"{c.err:.1e} (torch {c.torch_err:.1e}, max {c.allowed:.1e})")
    return got, want, cmps


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("impl", ["matrix", "flash", "sdpa", "loops"])
def test_every_form_reads_causal_bias_as_its_variant(impl, variant, size, dtype):
    if impl == "loops" and dtype not in (torch.float64, torch.float32):
        pytest.skip("loops: two dtypes are enough for a slow form")
    got, want, cmps = judged(impl, variant, size, dtype)
    for a, b, cmp in zip(got, want, cmps, strict=True):
        assert a.dtype == dtype and a.shape == b.shape
        assert torch.equal(a, b), cmp.quantity  # exactly the spelled-out mask: no value of the bias is read
        # attnlab's sdpa hands PyTorch the same mask, so the rule (twice PyTorch's error) cannot fail it: its test is
        # the equality above; the rule's power on these cases is shown by the test below
        assert cmp.passed or impl == "sdpa", cmp.quantity


def _reads_as(alignment):
    """Attention that reads any CausalBias as one alignment: upper-left, lower-right, or the one it names."""

    def fn(q, k, v, attn_mask):
        named = "lower" if attn_mask.variant == CausalVariant.LOWER_RIGHT else "upper"
        lower = {"named": named, "swapped": {"upper": "lower", "lower": "upper"}[named]}.get(alignment, alignment)
        return attend(q, k, v, is_causal=True, bug="lower-right" if lower == "lower" else None)

    fn.__name__ = alignment
    return fn


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_rule_fails_a_wrong_reading_of_the_bias_and_passes_the_right_one(variant):
    wrong = {n: _reads_as(n) for n in ("upper", "lower", "swapped") if n != variant.split("_")[0]}
    for size in SIZES:
        for dtype in (torch.float32, torch.bfloat16):
            assert all(c.passed for c in judged(_reads_as("named"), variant, size, dtype)[2]), (size, dtype)
            for name, fn in wrong.items():
                verdict = judged(fn, variant, size, dtype)[2][0].passed  # the output alone shows it
                assert verdict == (size == "L=S"), (name, size, dtype)  # the alignments differ only where L != S


def test_causal_bias_with_is_causal_is_pytorchs_value_error():
    q = torch.randn(1, 1, 4, 8)
    with pytest.raises(ValueError, match="CausalBias should not be used with causal=True"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=causal_upper_left(4, 4), is_causal=True)
    for impl in ("matrix", "flash", "sdpa", "loops"):
        with pytest.raises(ValueError, match="CausalBias should not be used with causal=True"):
            attnlab.attention(q, q, q, attn_mask=causal_upper_left(4, 4), is_causal=True, impl=impl)


def test_a_causal_bias_of_other_sizes_names_both():
    q = torch.randn(1, 1, 4, 8)
    for make in (causal_upper_left, causal_lower_right):
        with pytest.raises(ValueError, match=r"attn_mask is .*\(3, 5\).*L=4 queries and S=4 keys"):
            attnlab.attention(q, q, q, attn_mask=make(3, 5), impl="flash")


def test_upper_left_is_the_causal_fast_path_and_gqa_and_batch_dims_work():
    q, k, v = qkv((2, 3), 4, 2, 6, 10, 8)
    got = attnlab.attention(q, k, v, attn_mask=causal_lower_right(6, 10), enable_gqa=True, impl="flash")
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(6, 10), enable_gqa=True)
    print(rule.max_err(got, want))
    assert got.shape == want.shape and rule.max_err(got, want) < 1e-12
    a = attnlab.kernels._check.check(q, k, v, causal_upper_left(6, 10), enable_gqa=True)
    assert a.is_causal and a.mask is None and a.attn_mask is None  # the same as is_causal=True
