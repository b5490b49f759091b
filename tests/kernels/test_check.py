"""Bad input: a ValueError/TypeError that names the argument and the shapes, for every form."""

import math

import pytest
import torch

import attnlab
from attnlab import masks
from tests.helpers import qkv

FORMS = ["loops", "matrix", "flash", "sdpa"]


def inputs(H=4, Hkv=4, L=5, S=6, E=8, Ev=8, batch=(2,), dtype=torch.float32):
    return qkv(batch, H, Hkv, L, S, E, Ev, dtype=dtype)


BAD = [
    ("gqa without flag", dict(Hkv=2), {}, ValueError, r"key has 2 heads but query has 4; pass enable_gqa=True"),
    ("gqa not dividing", dict(H=6, Hkv=4), dict(enable_gqa=True), ValueError,
     r"multiple of key heads, got query 6 and key 4 heads.*query \(2, 6, 5, 8\)"),
    ("feature dims", dict(), dict(_k=torch.randn(2, 4, 6, 7)), ValueError,
     r"query has feature dim E=8 but key has E=7"),
    ("key/value lengths", dict(), dict(_v=torch.randn(2, 4, 7, 8)), ValueError, r"key has 6 positions but value has 7"),
    ("batch dims", dict(), dict(_k=torch.randn(3, 4, 6, 8), _v=torch.randn(3, 4, 6, 8)), ValueError,
     r"batch dims do not broadcast: query \(2, 4, 5, 8\), key \(3, 4, 6, 8\)"),
    ("mask shape", dict(), dict(attn_mask=torch.ones(5, 7, dtype=torch.bool)), ValueError,
     r"attn_mask has shape \(5, 7\) which does not broadcast to \(2, 4, 5, 6\)"),
    ("mask 1-d", dict(), dict(attn_mask=torch.ones(6, dtype=torch.bool)), ValueError, r"attn_mask has shape \(6\)"),
    ("mask dtype", dict(), dict(attn_mask=torch.ones(5, 6, dtype=torch.float64)), TypeError,
     r"attn_mask has dtype torch.float64 but query has torch.float32"),
    ("mask int", dict(), dict(attn_mask=torch.ones(5, 6, dtype=torch.int64)), TypeError,
     r"attn_mask has dtype torch.int64"),
    ("mask type", dict(), dict(attn_mask=[[True]]), TypeError, r"attn_mask must be a torch.Tensor"),
    ("dtypes differ", dict(), dict(_k=torch.randn(2, 4, 6, 8, dtype=torch.float64)), TypeError,
     r"one dtype, got torch.float32, torch.float64 and torch.float32"),
    ("integer input", dict(), dict(_q=torch.ones(2, 4, 5, 8, dtype=torch.int64)), TypeError,
     r"query has dtype torch.int64; attention needs floating-point"),
    ("not a tensor", dict(), dict(_q=[[1.0]]), TypeError, r"query must be a torch.Tensor, got list"),
    ("dropout high", dict(), dict(dropout_p=1.5), ValueError, r"dropout_p must be in \[0, 1\], got 1.5"),
    ("dropout negative", dict(), dict(dropout_p=-0.1), ValueError, r"dropout_p must be in \[0, 1\]"),
    ("dropout type", dict(), dict(dropout_p="0.1"), TypeError, r"dropout_p must be a number"),
    ("scale nan", dict(), dict(scale=math.nan), ValueError, r"scale must be a finite number, got nan"),
    ("scale inf", dict(), dict(scale=math.inf), ValueError, r"scale must be a finite number, got inf"),
    ("scale type", dict(), dict(scale="big"), TypeError, r"scale must be a number or None"),
    ("is_causal type", dict(), dict(is_causal="yes"), TypeError, r"is_causal must be a bool"),
    ("heads k/v", dict(), dict(_v=torch.randn(2, 2, 6, 8)), ValueError, r"key has 4 heads but value has 2"),
    ("mask fn sizes", dict(), dict(attn_mask=masks.document(torch.zeros(6, dtype=torch.long))), ValueError,
     r"document mask has ids for 6 positions but the problem has L=5"),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name,shape,kw,exc,msg", BAD, ids=[b[0] for b in BAD])
def test_bad_input_raises_named_error(form, name, shape, kw, exc, msg):
    q, k, v = inputs(**shape)
    kw = dict(kw)
    q, k, v = kw.pop("_q", q), kw.pop("_k", k), kw.pop("_v", v)
    with pytest.raises(exc, match=msg):
        attnlab.attention(q, k, v, impl=form, **kw)


def test_devices_differ_is_named():
    if not torch.cuda.is_available():
        meta = torch.randn(2, 4, 6, 8, device="meta")
        q, _, v = inputs()
        with pytest.raises(ValueError, match=r"one device, got cpu, meta and cpu"):
            attnlab.attention(q, meta, v)


def test_unknown_impl_lists_known_forms():
    q, k, v = inputs()
    with pytest.raises(ValueError, match=r"unknown impl 'fast'; known forms: .*loops, matrix, .*sdpa"):
        attnlab.attention(q, k, v, impl="fast")
