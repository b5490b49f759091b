"""The band forward of the flash form: equal to the float64 matrix form for sparse masks, in every shape."""

import pytest
import torch

import attnlab
from attnlab import masks
from attnlab.judge import oracle, rule
from attnlab.kernels import flash_band
from tests.helpers import qkv

from .test_flash import both, path  # noqa: F401  (path: the bounded / online-max fixture)


def ids(*lengths):
    return torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])


CASES = {  # name: (N, H, Hkv, L, S, E, Ev), mask
    "window-odd": ((2, 4, 4, 37, 37, 16, 8), masks.sliding_window(5)),
    "window-gqa": ((1, 6, 2, 41, 41, 8, 8), masks.sliding_window(3)),
    "window-L<S": ((2, 2, 1, 13, 45, 8, 6),  # aligned to the bottom right, as when decoding with a cache
                   masks.Mask.from_mod(lambda b, h, i, j: (j <= i + 32) & (j > i + 25), "window lower right")),
    "window-L>S": ((1, 2, 2, 45, 13, 8, 8), masks.sliding_window(4)),
    "documents": ((2, 2, 2, 43, 43, 8, 8), masks.document(ids(9, 13, 3, 18))),
    "documents-causal-gqa": ((1, 4, 2, 43, 43, 8, 8), masks.document(ids(20, 5, 18)) & masks.causal()),
    "documents-per-batch": ((2, 2, 2, 40, 40, 8, 8),
                            masks.document(torch.stack([ids(5, 6, 8, 6, 7, 8), ids(7, 4, 9, 5, 6, 9)]))),
    "per-head": ((1, 4, 2, 33, 33, 8, 8),
                 masks.Mask.from_mod(lambda b, h, i, j: (j <= i) & (j > i - 2 - h), "window per head")),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bands_equal_the_float64_matrix_form(name, small_bands, path):  # noqa: F811
    size, mask = CASES[name]
    N, H, Hkv, L, S, E, Ev = size
    plan = flash_band.bands(mask, N, H, L, S, 4)
    assert plan is not None, "the band plan must be used here, or this test checks the tiles"
    assert len(plan.batches) > 1
    errs = both(size, 8, 6, attn_mask=mask)  # backward on the tiles, from the band forward's lse
    assert max(errs.values()) < 1e-12


def test_bands_take_views_and_gathers(small_bands):
    """A sliding window's bands are evenly spaced (strided views); documents' are not (gathered)."""
    window = flash_band.bands(masks.sliding_window(5), 1, 1, 64, 64, 4)
    docs = flash_band.bands(masks.document(ids(9, 10, 6, 12, 8, 7, 12)), 1, 1, 64, 64, 4)
    assert any(b.step is not None and b.t1 - b.t0 > 1 for b in window.batches)
    assert any(b.step is None for b in docs.batches)
    # a window's inner columns are seen by every row: only its two edges are masked
    assert all(sum(c1 - c0 for c0, c1 in b.cols) < b.W for b in window.batches)


def test_bands_float32_against_pytorch_and_oracle(small_bands):
    q, k, v = qkv(1, 4, 2, 61, 61, 32, 32, dtype=torch.float32, seed=3)
    mask = masks.document(ids(17, 30, 14)) & masks.sliding_window(9)
    dense = mask.dense(1, 4, 61, 61)
    ref = oracle.reference(q, k, v, attn_mask=dense, enable_gqa=True)
    torch_out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=dense, enable_gqa=True)
    c = rule.compare("out", attnlab.attention(q, k, v, attn_mask=mask, enable_gqa=True, impl="flash"),
                       torch_out, ref, torch.float32,
                       rule.rounding_floor(q, k, v, attn_mask=dense, enable_gqa=True, dtype=torch.float32)["out"])
    print(c)
    assert c.passed


def test_rows_that_see_nothing_are_zero(small_bands):
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, 2, 20, 40, 8, 8))
    mask = masks.Mask.from_mod(lambda b, h, i, j: (j >= 2 * i) & (j < 2 * i + 3) & (i % 5 != 0), "stride")
    assert flash_band.bands(mask, 1, 2, 20, 40, 4) is not None
    out = attnlab.attention(q, k, v, attn_mask=mask, impl="flash")
    ref = attnlab.attention(q, k, v, attn_mask=mask.dense(1, 2, 20, 40), impl="matrix")
    print("max |bands - matrix| with hidden rows:", rule.max_err(out, ref))
    assert torch.equal(out[:, :, ::5], torch.zeros_like(out[:, :, ::5]))
    assert rule.max_err(out, ref) < 1e-12
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_dense_masks_keep_the_tiles():
    """Full and causal attention would gain nothing from bands: no plan, the tile loop runs."""
    assert flash_band.bands(masks.causal(), 1, 1, 512, 512, 64) is None
    assert flash_band.bands(masks.prefix_lm(10), 1, 1, 512, 512, 64) is None
    assert flash_band.bands(masks.sliding_window(64), 1, 1, 1024, 1024, 64) is not None


@pytest.mark.parametrize("kw", [
    {"score_mod": attnlab.mods.Mod.from_fn(attnlab.mods.alibi(2).fn, "alibi as a function")},
    {"score_mod": attnlab.mods.Mod.from_fn(attnlab.mods.softcap(5.0).fn, "softcap as a function")},
    {"dropout_p": 0.3}])
def test_modifiers_and_dropout_walk_the_tiles(small_bands, kw, monkeypatch):
    """The band forward takes only the built-in modifiers (in closed form), and no dropout; a modifier given as a
    function and dropout walk the tiles, and give what bands=False gives."""
    monkeypatch.setattr(flash_band, "forward", lambda *a, **k: pytest.fail("a function modifier took the bands"))
    q, k, v = qkv(1, 2, 2, 30, 30, 8, 8)
    mask = masks.sliding_window(4)
    outs = []
    for bands in (True, False):
        torch.manual_seed(0)
        outs.append(attnlab.attention(q, k, v, attn_mask=mask, impl="flash", bands=bands, **kw))
    assert torch.equal(outs[0], outs[1])


def test_bands_only_where_they_save_work(monkeypatch):
    """A window's bands compute far fewer scores than its tiles; documents aligned to the tiles leave the
    tiles nothing to waste, so the tile walk runs them (it needs no gather and no mask there)."""
    calls = []
    forward = flash_band.forward
    monkeypatch.setattr(flash_band, "forward", lambda *a, **kw: calls.append(1) or forward(*a, **kw))
    q, k, v = qkv(1, 2, 2, 1024, 1024, 16, 16, dtype=torch.float32)
    attnlab.attention(q, k, v, attn_mask=masks.sliding_window(64), impl="flash")
    assert calls == [1]
    docs = masks.document(ids(256, 512, 256))
    plan = flash_band.bands(docs, 1, 2, 1024, 1024, flash_band.BAND_BLOCK_Q)
    assert plan is not None and plan.scores >= 256 ** 2 * 2 + 512 ** 2  # no fewer than the visible tiles'
    out = attnlab.attention(q, k, v, attn_mask=docs, impl="flash")
    assert calls == [1], "aligned documents must walk the tiles"
    ref = oracle.reference(q, k, v, attn_mask=docs.dense(1, 2, 1024, 1024))
    print("aligned documents, tiles vs float64:", rule.max_err(out, ref))
    assert rule.max_err(out, ref) < 1e-5


def test_a_hidden_score_that_overflows_stays_hidden(small_bands):
    """A key so long that its score overflows to +inf must not reach the rows that do not see it:
    the mask hides it (-inf), as the matrix form does, instead of adding -inf to +inf (NaN)."""
    q, k, v = qkv(1, 2, 2, 37, 37, 8, 8, dtype=torch.float32, seed=5)
    q = q * 1e19
    k[:, :, 20] = 1e30  # q . k[20] overflows float32; rows 20 .. 24 see key 20, the others do not
    mask = masks.sliding_window(5)
    out = attnlab.attention(q, k, v, attn_mask=mask, impl="flash")
    ref = oracle.reference(q, k, v, attn_mask=mask.dense(1, 2, 37, 37))  # float64: no score overflows
    rows = [i for i in range(37) if not 20 <= i <= 24]
    err = rule.max_err(out[:, :, rows], ref[:, :, rows])
    print("max |bands - float64| on rows that do not see the long key:", err)
    assert torch.isfinite(out[:, :, rows]).all()
    assert err < 1e-5


def builtin(which: str, H: int, g: torch.Generator):
    """A built-in modifier, with learnable tensors where it holds one (so their gradients are checked too)."""
    if which.startswith("softcap"):
        return attnlab.mods.softcap(float(which[7:])), ()
    if which.startswith("alibi"):  # more slopes than heads; alibi-far: steep, so keys ahead pass the bound
        slopes = (attnlab.mods.alibi_slopes(H + 2).double() * (40 if which == "alibi-far" else 4)).requires_grad_()
        return attnlab.mods.alibi(slopes=slopes), (slopes,)
    table = (torch.randn(H + 1, 8, generator=g, dtype=torch.float64) * (20 if which == "t5-far" else 1))
    table.requires_grad_()  # t5-far: |bias| up to about 60 leaves the bounded path
    return attnlab.mods.relative_bias(table, max_distance=12, bidirectional=which == "t5-both"), (table,)


@pytest.mark.parametrize("which", ["softcap1.5", "softcap50", "alibi", "alibi-far", "t5", "t5-both",
                                   "t5-far"])
@pytest.mark.parametrize("name", ["window-gqa", "window-L<S", "documents-causal-gqa", "documents-per-batch"])
def test_a_builtin_modifier_rides_on_the_bands_and_equals_the_float64_matrix_form(name, which, small_bands,
                                                                                  monkeypatch):
    """[P12] A built-in modifier takes the band forward (bounded where its ``bounded`` says so: a soft-cap of 1.5,
    ALiBi where the window ends at the diagonal, T5's small table; else the running max), and its output and
    gradients -- of q, k, v and the modifier's tensor, the backward on the tiles from the bands' lse -- are the
    float64 matrix form's."""
    size, mask = CASES[name]
    N, H, Hkv, L, S, E, Ev = size
    g = torch.Generator().manual_seed(3)
    q, k, v = (t.mul(4.0 if which == "softcap50" else 1.0).requires_grad_()
               for t in qkv(N, H, Hkv, L, S, E, Ev, generator=g))
    mod, held = builtin(which, H, g)
    calls = []
    band_forward = flash_band.forward
    monkeypatch.setattr(flash_band, "forward", lambda *a, **kw: calls.append(1) or band_forward(*a, **kw))
    got = attnlab.attention(q, k, v, attn_mask=mask, enable_gqa=True, impl="flash", score_mod=mod, block_q=8,
                            block_k=6)
    assert calls, "the modifier must take the bands here, or this test checks the tiles"
    want = attnlab.attention(q, k, v, attn_mask=mask, enable_gqa=True, impl="matrix", score_mod=mod)
    go = torch.randn(want.shape, generator=g, dtype=want.dtype)
    wrt = (q, k, v, *held)
    errs = [(a - b).abs().max().item() for a, b in zip((got, *torch.autograd.grad(got, wrt, go)),
                                                     (want, *torch.autograd.grad(want, wrt, go)), strict=True)]
    print(name, which, [f"{e:.1e}" for e in errs])
    assert max(errs) < 1e-12
