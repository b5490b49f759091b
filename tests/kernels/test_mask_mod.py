"""FlexAttention-style mask functions written for one position at a time, in every form and tile table.

The cross-attention mask of a Flamingo-style model: text token q sees the tokens of the images whose
interval of text [start, end) holds q. Written as for FlexAttention, it looks up the key's image and
then indexes that image's interval -- right for one key, wrong (or an error) for a row of keys at
once. attnlab must evaluate it as FlexAttention does, and keep the cheap broadcast call for masks
that answer it correctly.
"""

import pytest
import torch

import attnlab
from attnlab import masks
from attnlab.judge import oracle, rule
from attnlab.kernels import flash_band
from attnlab.kernels.mask_mod import PerIndex
from tests.helpers import qkv


def image_mask(intervals: torch.Tensor, tokens_per_image: int):
    """q (text) sees the tokens of image n when intervals[n, 0] <= q < intervals[n, 1]: written per position."""
    owner = torch.arange(intervals.shape[0]).repeat_interleave(tokens_per_image)  # the image of each key

    def cross_attention(b, h, q_idx, kv_idx):
        interval = intervals[owner[kv_idx]]  # (2,) for one key
        return (q_idx >= interval[0]) & (q_idx < interval[1])

    return cross_attention


def documents_per_position(bounds: torch.Tensor):
    """Causal attention inside documents, looked up per key: doc = bounds[doc_of[kv_idx]]."""
    doc_of = torch.repeat_interleave(torch.arange(bounds.shape[0]), bounds[:, 1] - bounds[:, 0])

    def packed(b, h, q_idx, kv_idx):
        span = bounds[doc_of[kv_idx]]
        return (q_idx >= span[0]) & (q_idx < span[1]) & (kv_idx <= q_idx)

    return packed


INTERVALS = torch.tensor([[0, 7], [1, 7], [7, 12], [12, 12], [9, 20]])  # image 3 is seen by no text token
TRUTH_CACHE = {}


def truth(mask_mod, N, H, L, S) -> torch.Tensor:
    """The mask asked one position at a time, with Python loops: what the function means."""
    key = (id(mask_mod), N, H, L, S)
    if key not in TRUTH_CACHE:
        t = torch.tensor
        TRUTH_CACHE[key] = torch.tensor([[[[bool(mask_mod(t(b), t(h), t(i), t(j))) for j in range(S)]
                                           for i in range(L)] for h in range(H)] for b in range(N)])
    return TRUTH_CACHE[key]


CROSS = image_mask(INTERVALS, 3)  # L = 20 text tokens, S = 15 image tokens


def test_the_broadcast_call_is_wrong_for_it():
    b, h = torch.zeros(1, 1, 1, 1, dtype=torch.long), torch.zeros(1, 1, 1, 1, dtype=torch.long)
    i, j = torch.arange(20).view(1, 1, -1, 1), torch.arange(15).view(1, 1, 1, -1)
    with pytest.raises((RuntimeError, IndexError)):
        r = CROSS(b, h, i, j)
        assert torch.equal(r.expand(1, 1, 20, 15), truth(CROSS, 1, 1, 20, 15))


@pytest.mark.parametrize("impl", ["matrix", "flash", "sdpa", "loops"])
def test_every_form_gives_the_mask_flexattention_means(impl):
    N, H, L, S = (1, 2, 20, 15) if impl == "loops" else (2, 3, 20, 15)
    q, k, v, g = qkv(N, H, H, L, S, 8, grad_out=True)
    mask = masks.Mask.from_mod(CROSS)
    dense = truth(CROSS, N, H, L, S)
    assert torch.equal(mask.dense(N, H, L, S).expand(N, H, L, S), dense)
    ins = [t.clone().requires_grad_() for t in (q, k, v)]
    kw = {"block_q": 8, "block_k": 4} if impl == "flash" else {}
    out = attnlab.attention(*ins, attn_mask=mask, impl=impl, **kw)
    out.backward(g)
    ref = oracle.reference(q, k, v, dense, grad_out=g)
    errs = [rule.max_err(x, r) for x, r in zip((out, *(t.grad for t in ins)), ref, strict=True)]
    print(impl, [f"{e:.1e}" for e in errs])
    assert max(errs) < 1e-12


def test_block_maps_and_bands_of_a_per_position_mask(monkeypatch):
    N, H, L = 2, 2, 48
    bounds = torch.tensor([[0, 9], [9, 22], [22, 25], [25, 48]])
    mod = documents_per_position(bounds)
    mask = masks.Mask.from_mod(mod)
    dense = truth(mod, N, H, L, L)
    bm = mask.block_map(N, H, L, L, 8, 8)
    for (qt, kt), tile in bm.partial.items():  # every stored tile is the truth's
        assert torch.equal(tile.expand(N, H, 8, 8), dense[:, :, qt * 8:(qt + 1) * 8, kt * 8:(kt + 1) * 8])
    kinds = [[2 if bool(t.all()) else (1 if bool(t.any()) else 0) for t in row.split(8, dim=-1)]
             for row in dense.split(8, dim=-2)]
    assert bm.kind.tolist() == kinds and bm.counts()["empty"] > 0
    monkeypatch.setattr(flash_band, "BAND_BLOCK_Q", 4)
    monkeypatch.setattr(flash_band, "BATCH_SCORES", 150)
    assert flash_band.bands(mask, N, H, L, L, 4) is not None  # the band path is taken
    q, k, v = qkv(N, H, H, L, L, 8)
    out = attnlab.attention(q, k, v, attn_mask=mask, impl="flash", block_q=8, block_k=8)
    err = rule.max_err(out, oracle.reference(q, k, v, dense))
    print(f"bands: {err:.1e}")
    assert err < 1e-12


def test_masks_that_answer_the_broadcast_call_keep_it():
    shapes = []

    def window(b, h, q_idx, kv_idx):
        shapes.append(tuple(q_idx.shape))
        return (kv_idx <= q_idx) & (kv_idx > q_idx - 4)

    mask = masks.Mask.from_mod(window)
    mask.block_map(1, 2, 64, 64, 16, 16)
    fn = mask._fn
    assert isinstance(fn, PerIndex) and fn.vmapped is False
    assert shapes.count(()) <= _vmap_calls_to_decide() and (1, 1, 16, 1) in shapes  # tiles: one broadcast call each

    def python_if(b, h, q_idx, kv_idx):  # vmap cannot run Python control flow on an index: the broadcast call stays
        if bool((q_idx > 100).any()):
            return kv_idx < 0
        return kv_idx <= q_idx

    m2 = masks.Mask.from_mod(python_if)
    assert torch.equal(m2.dense(1, 1, 6, 6)[0, 0], torch.ones(6, 6, dtype=torch.bool).tril())
    assert m2._fn.vmapped is False


def _vmap_calls_to_decide() -> int:
    return 1  # vmap traces the function once, with 0-d tensors, to compare on the first corner
