"""Inputs that arrive non-contiguous: every form and path, forward and backward, against the float64 oracle.

Hugging Face models pass ``(B, L, H, E).transpose(1, 2)``; GQA code passes keys expanded over heads or
batch (stride 0); a fused projection gives a last dim sliced out of a wider one. A form must read them
all: ``view`` on such a tensor fails, and a path that works on contiguous inputs may not (the flash
form's key bands, for one). Each case prints its errors; float64 inputs keep the limit tight.
"""

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab import masks
from attnlab.judge import oracle, rule
from attnlab.kernels import flash_band
from tests.helpers import qkv

LAYOUTS = ("transposed", "expanded", "sliced")


def lay_out(t: torch.Tensor, how: str, heads_expand: bool = False) -> torch.Tensor:
    """The same numbers as ``t`` (N, H, L, E) in a non-contiguous layout."""
    if how == "transposed":  # as transformers passes them
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    if how == "sliced":  # the first E of a wider last dim
        wide = torch.randn(*t.shape[:-1], t.shape[-1] + 3, dtype=t.dtype)
        wide[..., :t.shape[-1]] = t
        return wide[..., :t.shape[-1]]
    if heads_expand:  # stride 0 over heads: every head the same
        return t[:, :1].expand(t.shape)
    return t[:1].expand(t.shape)  # stride 0 over the batch


def inputs(how, N, H, Hkv, L, S, E, seed=0):
    q, k, v, g = qkv(N, H, Hkv, L, S, E, grad_out=True, seed=seed)
    if how == "expanded":  # expanded keys and values (the query stays as it is, as in GQA code)
        k, v = lay_out(k, how, heads_expand=True), lay_out(v, how)
        return q, k, v, g
    return lay_out(q, how), lay_out(k, how), lay_out(v, how), g


def judge(impl, q, k, v, g, attn_mask=None, **kw):
    """The form's errors (out, dq, dk, dv) against the oracle on the same numbers; PyTorch's, for the record."""
    ins = [t.detach().clone().requires_grad_() if t.is_contiguous() else t.detach().requires_grad_()
           for t in (q, k, v)]
    leaf = [t for t in ins]
    out = attnlab.attention(*ins, attn_mask=attn_mask, impl=impl, **kw)
    out.backward(g)
    gqa = kw.get("enable_gqa", False)
    ref = oracle.reference(q, k, v, attn_mask=attn_mask, is_causal=kw.get("is_causal", False),
                           enable_gqa=gqa, grad_out=g)
    dense = attn_mask.dense(q.shape[0], q.shape[1], q.shape[2], k.shape[2]) if isinstance(
        attn_mask, masks.Mask) else attn_mask
    pt = [t.detach().requires_grad_() for t in (q.contiguous(), k.contiguous(), v.contiguous())]
    theirs = F.scaled_dot_product_attention(*pt, attn_mask=dense, is_causal=kw.get("is_causal", False),
                                            enable_gqa=gqa)
    theirs.backward(g)
    errs = {n: rule.max_err(x, r) for n, x, r in zip(("out", "dq", "dk", "dv"),
                                                        (out, *(t.grad for t in leaf)), ref, strict=True)}
    torch_errs = {n: rule.max_err(x, r) for n, x, r in zip(("out", "dq", "dk", "dv"),
                                                              (theirs, *(t.grad for t in pt)), ref, strict=True)}
    print(impl, {n: f"{e:.1e} (torch {torch_errs[n]:.1e})" for n, e in errs.items()})
    return errs


@pytest.mark.parametrize("how", LAYOUTS)
@pytest.mark.parametrize("impl", ["matrix", "flash", "sdpa"])
@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float"])
def test_dense_forms_read_every_layout(impl, how, mask):
    N, H, L, S, E = 2, 4, 13, 17, 8
    q, k, v, g = inputs(how, N, H, H, L, S, E)
    gen = torch.Generator().manual_seed(1)
    m = {"none": None, "causal": None, "bool": torch.rand(N, 1, L, S, generator=gen) > 0.3,
         "float": torch.randn(1, H, L, S, generator=gen, dtype=torch.float64)}[mask]
    errs = judge(impl, q, k, v, g, attn_mask=m, is_causal=mask == "causal", block_q=4, block_k=5) if impl == "flash" \
        else judge(impl, q, k, v, g, attn_mask=m, is_causal=mask == "causal")
    assert max(errs.values()) < 1e-12


@pytest.mark.parametrize("how", LAYOUTS)
def test_loops_read_every_layout(how):
    errs = judge("loops", *inputs(how, 1, 2, 2, 3, 4, 3), is_causal=True)
    assert max(errs.values()) < 1e-12


@pytest.mark.parametrize("how", LAYOUTS)
@pytest.mark.parametrize("bands", [True, False])
def test_flash_mask_functions_read_every_layout_on_tiles_and_bands(how, bands):
    """The key-band path and the tile walk, forward and backward, GQA included."""
    N, H, Hkv, L, S, E = 2, 4, 2, 128, 217, 8
    mask = masks.causal_lower_right() & masks.sliding_window(18)
    q, k, v, g = inputs(how, N, H, Hkv, L, S, E)
    plan = flash_band.bands(mask, N, H, L, S, flash_band.BAND_BLOCK_Q)
    assert plan is not None  # the band path is taken when bands=True
    errs = judge("flash", q, k, v, g, attn_mask=mask, enable_gqa=True, bands=bands)
    assert max(errs.values()) < 1e-12


def test_the_transformers_layout_that_crashed_the_band_path():
    """B=2, H=4, L=128, S=217, lower-right causal & window 18, float32: ``view size is not compatible`` once."""
    q, k, v, g = (t.float() for t in inputs("transposed", 2, 4, 4, 128, 217, 16))
    out = attnlab.attention(q, k, v, attn_mask=masks.causal_lower_right() & masks.sliding_window(18), impl="flash")
    same = attnlab.attention(q.contiguous(), k.contiguous(), v.contiguous(),
                             attn_mask=masks.causal_lower_right() & masks.sliding_window(18), impl="flash")
    print(rule.max_err(out, same))
    assert torch.equal(out, same)
