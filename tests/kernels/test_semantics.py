"""Every form answers exactly what F.scaled_dot_product_attention answers on its edge inputs.

Empty dims, rank and batch broadcasting, is_causal with a mask, dropout_p = 1 or a tensor, any
finite scale, NaN at a masked-out key: each input is given to PyTorch and to every form, and the
outputs and the gradients of q, k, v are compared (float64, printed errors). The one input PyTorch
takes and attnlab refuses, a NaN or infinite scale, is checked for its message.
"""

import math

import pytest
import torch
import torch.nn.functional as F

import attnlab

FORMS = list(attnlab.forms())  # loops, matrix, flash, sdpa (every single-process form)


def r(*shape):
    return torch.randn(*shape, dtype=torch.float64)


def _inputs():
    g = torch.manual_seed(0)
    del g
    m = torch.rand(4, 5) > 0.4
    m[:, 0] = True
    return {
        "L = 0": (r(2, 3, 0, 8), r(2, 3, 5, 8), r(2, 3, 5, 8), {}),
        "S = 0": (r(2, 3, 4, 8), r(2, 3, 0, 8), r(2, 3, 0, 8), {}),
        "N = 0": (r(0, 3, 4, 8), r(0, 3, 5, 8), r(0, 3, 5, 8), {}),
        "E = 0": (r(2, 3, 4, 0), r(2, 3, 5, 0), r(2, 3, 5, 6), {}),
        "Ev = 0": (r(2, 3, 4, 8), r(2, 3, 5, 8), r(2, 3, 5, 0), {}),
        "S = 0, causal": (r(2, 3, 4, 8), r(2, 3, 0, 8), r(2, 3, 0, 8), {"is_causal": True}),
        "q rank 2, k rank 4": (r(4, 8), r(2, 3, 5, 8), r(2, 3, 5, 8), {}),
        "q rank 3, k rank 4": (r(3, 4, 8), r(2, 3, 5, 8), r(2, 3, 5, 8), {}),
        "q rank 4, k rank 3": (r(2, 3, 4, 8), r(3, 5, 8), r(3, 5, 8), {}),
        "batch 2 vs 1": (r(2, 3, 4, 8), r(1, 3, 5, 8), r(1, 3, 5, 8), {}),
        "batch 1 vs 2": (r(1, 3, 4, 8), r(2, 3, 5, 8), r(2, 3, 5, 8), {}),
        "batch (2,1) vs (1,3)": (r(2, 1, 3, 4, 8), r(1, 3, 3, 5, 8), r(1, 3, 3, 5, 8), {}),
        "one key head, no enable_gqa": (r(2, 3, 4, 8), r(2, 1, 5, 8), r(2, 1, 5, 8), {}),
        "GQA, key batch 1": (r(2, 4, 4, 8), r(1, 2, 5, 8), r(1, 2, 5, 8), {"enable_gqa": True}),
        "is_causal + bool mask": (r(2, 3, 4, 8), r(2, 3, 5, 8), r(2, 3, 5, 8), {"is_causal": True, "attn_mask": m}),
        "is_causal + float mask": (r(2, 3, 4, 8), r(2, 3, 5, 8), r(2, 3, 5, 8),
                                   {"is_causal": True, "attn_mask": r(4, 5)}),
        "dropout_p = 1.0": (r(2, 3, 4, 8), r(2, 3, 5, 8), r(2, 3, 5, 8), {"dropout_p": 1.0}),
        "dropout_p a 0-d tensor": (r(2, 3, 4, 8), r(2, 3, 5, 8), r(2, 3, 5, 8),
                                   {"dropout_p": torch.tensor(0.0)}),
        "scale -1": (r(2, 3, 4, 8), r(2, 3, 5, 8), r(2, 3, 5, 8), {"scale": -1.0}),
        "scale 0": (r(2, 3, 4, 8), r(2, 3, 5, 8), r(2, 3, 5, 8), {"scale": 0.0}),
        "scale a 0-d tensor": (r(2, 3, 4, 8), r(2, 3, 5, 8), r(2, 3, 5, 8), {"scale": torch.tensor(0.5)}),
    }


INPUTS = _inputs()


def _run(fn, q, k, v, kw):
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    out = fn(q, k, v, **kw)
    if out.numel():
        out.backward(torch.ones_like(out) * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape))
    else:
        out.sum().backward()
    return out, q.grad, k.grad, v.grad


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", list(INPUTS))
def test_form_answers_as_pytorch(form, name):
    q, k, v, kw = INPUTS[name]
    want = _run(F.scaled_dot_product_attention, q, k, v, kw)
    got = _run(attnlab.forms()[form].fn, q, k, v, kw)
    for what, a, b in zip(["out", "dq", "dk", "dv"], got, want, strict=True):
        assert a is not None and a.shape == b.shape, f"{what}: {None if a is None else tuple(a.shape)} vs {b.shape}"
        err = (a - b).abs().max().item() if a.numel() else 0.0
        print(f"{form:7s} {name:28s} {what}: shape {tuple(a.shape)} max err {err:.1e}")
        assert err < 1e-12, (what, err)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("where", ["bool mask", "float mask", "dead row"])
def test_nan_at_a_masked_out_key_propagates_as_in_pytorch(form, where):
    q, k, v = r(1, 2, 3, 4), r(1, 2, 5, 4), r(1, 2, 5, 4)
    v[0, 0, 2, 1] = math.nan
    m = torch.ones(3, 5, dtype=torch.bool)
    m[0, 2] = False
    if where == "dead row":
        m[1] = False
    mask = m if where != "float mask" else torch.zeros(3, 5, dtype=torch.float64).masked_fill(~m, -math.inf)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    got = attnlab.forms()[form].fn(q, k, v, attn_mask=mask)
    print(form, where, want[0, 0, :, 1], got[0, 0, :, 1])
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.allclose(got.nan_to_num(), want.nan_to_num(), atol=1e-12)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("scale", [math.nan, math.inf, -math.inf])
def test_non_finite_scale_is_refused_saying_pytorch_accepts_it(form, scale):
    q = r(1, 2, 3, 4)
    F.scaled_dot_product_attention(q, q, q, scale=scale)  # PyTorch answers (NaN or zeros)
    with pytest.raises(ValueError, match=r"scale must be a finite number, got .*PyTorch accepts it"):
        attnlab.forms()[form].fn(q, q, q, scale=scale)


def test_dropout_p_one_on_every_form_is_zeros_with_zero_gradients():
    q, k, v = r(2, 2, 6, 4), r(2, 2, 7, 4), r(2, 2, 7, 3)
    for form in FORMS:
        out, dq, dk, dv = _run(attnlab.forms()[form].fn, q, k, v, {"dropout_p": 1.0, "is_causal": True})
        print(form, out.abs().max().item(), dq.abs().max().item(), dv.abs().max().item())
        assert torch.equal(out, torch.zeros_like(out)) and not dq.any() and not dk.any() and not dv.any()


@pytest.mark.parametrize("bad, msg", [
    (dict(dropout_p=1.5), r"dropout_p must be in \[0, 1\], got 1.5"),
    (dict(dropout_p=torch.tensor([0.1, 0.2])), r"dropout_p must be a number"),
    (dict(_k=r(3, 3, 5, 8)), r"batch dims do not broadcast: query \(2, 3, 4, 8\), key \(3, 3, 5, 8\)"),
    (dict(_k=r(2, 2, 5, 8), _v=r(2, 2, 5, 8)), r"key has 2 heads but query has 3; pass enable_gqa=True"),
])
def test_what_pytorch_refuses_is_refused(bad, msg):
    q, k, v = r(2, 3, 4, 8), bad.pop("_k", r(2, 3, 5, 8)), bad.pop("_v", r(2, 3, 5, 8))
    with pytest.raises(Exception):  # noqa: B017 -- PyTorch's own error types vary; attnlab's are checked below
        F.scaled_dot_product_attention(q, k, v, **bad)
    for form in FORMS:
        with pytest.raises((ValueError, TypeError), match=msg):
            attnlab.forms()[form].fn(q, k, v, **bad)


def test_flash_computes_tiles_a_dense_mask_hides_when_a_value_is_nan():
    q, k, v = r(1, 1, 4, 4), r(1, 1, 4, 4), r(1, 1, 4, 4)
    v[0, 0, 3, 0] = math.nan  # key 3: hidden from queries 0..2, so the tile (rows 0-1, keys 2-3) is all hidden
    m = torch.ones(4, 4, dtype=torch.bool).tril()
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    got = attnlab.attention(q, k, v, attn_mask=m, impl="flash", block_q=2, block_k=2)
    print(want[0, 0, :, 0], got[0, 0, :, 0])
    assert torch.equal(got.isnan(), want.isnan()) and bool(want[0, 0, :, 0].isnan().all())


@pytest.mark.parametrize("form", FORMS)
def test_causal_with_a_negative_scale_is_the_softmax_where_pytorch_answers_nan(form):
    q, k, v = r(1, 2, 6, 4), r(1, 2, 7, 4), r(1, 2, 7, 4)
    m = torch.ones(6, 7, dtype=torch.bool).tril()
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=-0.7)  # the same mask, spelled out
    assert F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=-0.7).isnan().all()  # PyTorch 2.13, CPU
    got = attnlab.forms()[form].fn(q, k, v, is_causal=True, scale=-0.7)
    print(form, (got - want).abs().max().item())
    assert (got - want).abs().max().item() < 1e-12
