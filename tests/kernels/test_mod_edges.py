"""Score modifiers and mask functions at their edges, across the forms that take them: a modifier that hides
whole rows, one that reads a learnable tensor it does not list, one that works in place; and functions of the
wrong shape, bad numbers and huge windows, refused in one message that names them."""

import warnings

import pytest
import torch

import attnlab
from attnlab import masks, mods
from attnlab.kernels.mods import unlisted
from tests.helpers import qkv

FORMS = {"loops": {}, "matrix": {}, "flash": {"block_q": 2, "block_k": 3}, "flash default tiles": {}}


def _impl(form: str) -> str:
    return form.split()[0]


def _inputs(seed=0, H=2, L=6, S=7, E=4, dtype=torch.float64):
    return [t.requires_grad_() for t in qkv(1, H, H, L, S, E, dtype=dtype, seed=seed)]


def hide_rows(score, b, h, q_idx, kv_idx):
    """Every key of queries 1 and 4 hidden (-inf), as FlexAttention's documentation writes a mask as a modifier."""
    return torch.where((q_idx == 1) | (q_idx == 4), float("-inf"), score)


def _run(form, ins, mod, **kw):
    out = attnlab.attention(*ins, impl=_impl(form), score_mod=mod, **FORMS[form], **kw)
    out.backward(torch.ones_like(out))
    grads = [t.grad.clone() for t in ins]
    for t in ins:
        t.grad = None
    return out.detach(), grads


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("causal", [False, True])
def test_a_modifier_that_hides_whole_rows_gives_zeros_and_finite_gradients(form, dtype, causal):
    ins = _inputs(dtype=dtype)
    out, grads = _run(form, ins, hide_rows, is_causal=causal)
    want, want_grads = _run("matrix", ins, hide_rows, is_causal=causal)
    pairs = [(out, want), *zip(grads, want_grads, strict=True)]
    errs = [(a - b).abs().max().item() for a, b in pairs]
    print(f"{form} {dtype} causal={causal}: max|form - matrix| out/dq/dk/dv {[f'{e:.1e}' for e in errs]}")
    assert torch.equal(out[:, :, [1, 4]], torch.zeros_like(out[:, :, [1, 4]]))
    assert all(torch.isfinite(g).all() for g in grads)
    assert torch.equal(grads[0][:, :, [1, 4]], torch.zeros_like(grads[0][:, :, [1, 4]]))
    assert max(errs) < (1e-12 if dtype == torch.float64 else 1e-5)


@pytest.mark.slow
def test_flexattention_also_gives_zeros_for_hidden_rows():
    """The convention the forms follow is FlexAttention's (forward only: PyTorch has no CPU backward for it)."""
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    q, k, v = (t.detach() for t in _inputs(L=6, S=6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager flex warns that it is not compiled
        want = flex.flex_attention(q, k, v, score_mod=hide_rows)
    for form in FORMS:
        got = attnlab.attention(q, k, v, impl=_impl(form), score_mod=hide_rows, **FORMS[form])
        print(form, "vs flex", (got - want).abs().max().item())
        assert (got - want).abs().max() < 1e-12


@pytest.mark.parametrize("form", list(FORMS))
def test_a_tensor_the_modifier_reads_without_listing_it_gets_its_gradient(form):
    g = torch.Generator().manual_seed(1)
    w = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)  # a learnable temperature, not in params
    table = torch.randn(2, 7, generator=g, dtype=torch.float64, requires_grad=True)
    scaled = {}

    def mod(score, b, h, q_idx, kv_idx):
        return score * scaled["w"] + table[h, kv_idx]

    ins = _inputs()
    grads = []
    for f in (form, "matrix"):
        scaled["w"] = w * 2  # not a leaf: its gradient flows on to w
        out = attnlab.attention(*ins, impl=_impl(f), score_mod=mod, is_causal=True, **FORMS[f])
        out.backward(torch.ones_like(out))
        grads.append([w.grad.clone(), table.grad.clone()])
        w.grad = table.grad = None
    print(form, "dw", grads[0][0].item(), "matrix", grads[1][0].item())
    assert grads[0][0] != 0
    assert torch.allclose(grads[0][0], grads[1][0], atol=1e-12) and torch.allclose(grads[0][1], grads[1][1], atol=1e-12)


def test_a_listed_tensor_is_not_counted_twice():
    table = torch.randn(2, 8, dtype=torch.float64, requires_grad=True)
    mod = mods.relative_bias(table, max_distance=16)
    assert unlisted(mod, 1, 2, torch.float64, "cpu") == ()
    extra = torch.ones((), requires_grad=True)
    plain = mods.Mod.from_fn(lambda s, b, h, i, j: s * extra + table[h, 0])
    assert [t is extra or t is table for t in unlisted(plain, 1, 2, torch.float64, "cpu")] == [True, True]
    with torch.no_grad():  # nothing to find when no gradient is wanted
        assert unlisted(plain, 1, 2, torch.float64, "cpu") == ()


@pytest.mark.parametrize("form", list(FORMS))
def test_a_modifier_that_works_in_place_gives_the_answer_of_one_that_does_not(form):
    ins = _inputs()
    out, grads = _run(form, ins, lambda s, b, h, i, j: s.mul_(0.5).add_((j - i).to(s.dtype) * 0.1))
    want, want_grads = _run("matrix", ins, lambda s, b, h, i, j: s * 0.5 + (j - i).to(s.dtype) * 0.1)
    assert (out - want).abs().max() < 1e-12
    assert all((g - w).abs().max() < 1e-12 for g, w in zip(grads, want_grads, strict=True))


@pytest.mark.parametrize("form", list(FORMS))
def test_functions_with_the_wrong_arguments_are_named_with_the_signature_they_need(form):
    q, k, v = _inputs()
    kw = dict(impl=_impl(form), **FORMS[form])

    def squash(score):
        return score

    with pytest.raises(TypeError, match=r"^score_mod squash must take 5 arguments \(score, b, h, q_idx, kv_idx\) "
                                        r"-> score; it takes \(score\)$"):
        attnlab.attention(q, k, v, score_mod=squash, **kw)
    with pytest.raises(TypeError, match=r"^mask_mod <lambda> must take 4 arguments \(b, h, q_idx, kv_idx\) -> bool "
                                        r"tensor; it takes \(q_idx, kv_idx\)$"):
        masks.Mask.from_mod(lambda q_idx, kv_idx: q_idx >= kv_idx)
    mods.Mod.from_fn(lambda *a: a[0])  # any number of arguments is fine
    with pytest.raises(TypeError, match=r"^mask everything returned a Python bool \(True\), not a bool tensor"):
        attnlab.attention(q, k, v, attn_mask=masks.Mask.from_mod(lambda b, h, q_idx, kv_idx: True, "everything"),
                          **kw)


def test_non_finite_modifier_tensors_are_refused():
    with pytest.raises(ValueError, match=r"^alibi slopes must be finite numbers; slope 2 of 4 is nan$"):
        mods.alibi(slopes=torch.tensor([0.5, 0.25, float("nan"), 0.1]))
    with pytest.raises(ValueError, match=r"^alibi slopes must be finite numbers; slope 0 of 1 is inf$"):
        mods.alibi(slopes=torch.tensor([float("inf")]))
    with pytest.raises(ValueError, match=r"relative_bias: the table of shape \(2, 8\) holds NaN"):
        mods.relative_bias(torch.full((2, 8), float("nan")))


@pytest.mark.parametrize("form", ["matrix", "flash"])
def test_a_window_or_prefix_past_every_position_is_no_limit(form):
    q, k, v = (t.detach() for t in _inputs(L=7, S=7))
    for huge, same in ((masks.sliding_window(2**70), masks.causal()), (masks.prefix_lm(2**70), None)):
        got = attnlab.attention(q, k, v, attn_mask=huge, impl=form)
        want = attnlab.attention(q, k, v, attn_mask=same, is_causal=False, impl="matrix")
        assert (got - want).abs().max() < 1e-12, huge.name
    assert masks.sliding_window(2**70).name == f"sliding_window({2**70})"


def test_more_documents_than_positions_is_refused():
    with pytest.raises(ValueError, match=r"^mask 'document:100' asks for 100 documents in 10 positions; K can be "
                                         r"at most the length \(10\)"):
        masks.from_spec("document:100", 10)
    assert masks.from_spec("document:10", 10).dense(1, 1, 10, 10).squeeze().equal(torch.eye(10, dtype=torch.bool))
