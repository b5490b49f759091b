"""The pieces the flash and ring loops are built from, each on its own: the tile iterator, the
dropout value object, the float64-lse split backward rebuilds weights with, and the ring's schedule
(a pure function of the step, checked here without any process group)."""

import pytest
import torch

import attnlab
from attnlab.kernels import dropout, masks
from attnlab.kernels.flash import Tiles
from attnlab.kernels.flash_backward import Weights
from attnlab.kernels.online import LN2
from attnlab.kernels.ring import _Schedule
from attnlab.kernels.ring_stats import RingStats, pair_work
from tests.helpers import qkv


def test_tile_slices_cover_the_length_once_with_a_short_last_tile():
    assert list(masks.tile_slices(10, 4)) == [(0, slice(0, 4)), (1, slice(4, 8)), (2, slice(8, 10))]
    assert list(masks.tile_slices(8, 8)) == [(0, slice(0, 8))]
    assert list(masks.tile_slices(0, 4)) == []


def test_block_map_kinds_follow_the_tile_slices():
    bm = masks.causal().block_map(1, 1, 10, 10, 4, 4)
    for qt, rows in masks.tile_slices(10, 4):
        for kt, cols in masks.tile_slices(10, 4):
            dense = masks.causal().dense(1, 1, 10, 10)[..., rows, cols]
            want = masks.FULL if dense.all() else masks.PARTIAL if dense.any() else masks.EMPTY
            assert int(bm.kind[qt, kt]) == want, (qt, kt)


def test_dropout_of_a_block_is_the_same_weights_as_the_whole_problem():
    whole = dropout.keep_mask(7, 0.4, 2, 3, torch.arange(20), torch.arange(30))  # (2, 3, 20, 30)
    block = dropout.Dropout(7, 0.4).at(row0=8, col0=12)  # a block whose top-left weight is (8, 12)
    got = block.keep(2, 3, slice(2, 6), slice(5, 9))
    assert torch.equal(got, whole[:, :, 10:14, 17:21])
    assert block.active and not dropout.NO_DROPOUT.active
    with pytest.raises(AttributeError):
        block.p = 0.5  # frozen: a call's dropout cannot change under a loop


def test_weights_from_a_float64_lse_equal_exp_of_s_minus_lse():
    """The [P4] split in the base-2 units of [P8]: exp2(s - hi) * corr equals exp(s ln 2 - lse)."""
    g = torch.Generator().manual_seed(0)
    # float32 scores far from 0 (lse's rounding matters), in base-2 units as the flash form keeps them
    s = 1000 + 3 * torch.randn(1, 1, 1, 6, 5, generator=g)
    lse = torch.logsumexp(s.double() * LN2, dim=-1) + 1e-9  # natural units, as forward saves it: not a float32
    lse[..., 0] = float("-inf")  # a row that saw no key
    w = Weights.from_lse(lse, None, torch.float32)
    P = torch.exp2(s - w.shift[..., None]) * w.corr[..., None]  # in float32: exp2(s - hi) * exp2(hi - lse)
    want = torch.exp(s.double() * LN2 - lse[..., None])
    assert w.shift.dtype == w.corr.dtype == torch.float32
    assert torch.equal(P[..., 0, :], torch.zeros(1, 1, 1, 5)) and bool(w.corr[..., 0] == 1)
    err = ((P.double() - want).abs() / want)[..., 1:, :].max()
    without_corr = ((torch.exp2(s - w.shift[..., None]).double() - want).abs() / want)[..., 1:, :].max()
    print(f"relative error {err:.1e}; without the correction factor {without_corr:.1e}")
    assert err < 1e-6 < without_corr


def _schedule(rank, world, layout, causal, T=32, block=4):
    n = 1 if layout == "contiguous" else 2
    c = T // world // n
    full = Tiles(1, 2, c, c, block, block)
    diag = Tiles(1, 2, c, c, block, block, mask_fn=masks.causal()) if causal else None
    return _Schedule(rank, world, layout, full, diag, NH=2)


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_the_ring_schedule_is_pure_and_balances_causal_work_in_zigzag(layout):
    world = 4
    totals = []
    for rank in range(world):
        sched = _schedule(rank, world, layout, causal=True)
        stats = RingStats()
        for step in range(world):
            src = (rank - step) % world
            first, again = sched.step(src), sched.step(src)
            assert first == again  # asking twice changes nothing and counts nothing
            assert stats == RingStats()
        for step in range(world):
            sched.step((rank - step) % world).record(stats, 0.0)
        totals.append(stats)
        assert stats.steps == world
        assert stats.pairs_computed + stats.pairs_skipped == world * (1 if layout == "contiguous" else 4)
    scores = [s.scores for s in totals]
    if layout == "zigzag":
        assert len(set(scores)) == 1  # every rank does the same causal work
    else:
        assert [s.pairs_computed for s in totals] == [1, 2, 3, 4] and scores == sorted(scores)


def test_pair_work_counts_tiles_and_scores():
    full = Tiles(1, 2, 8, 6, 4, 4)  # 2 x 2 tiles, the last key tile 2 wide
    assert pair_work(full, NH=2) == (4, 0, 2 * 8 * 6)
    diag = Tiles(1, 2, 8, 8, 4, 4, mask_fn=masks.causal())  # the tile above the diagonal is empty
    assert pair_work(diag, NH=2) == (3, 1, 2 * 3 * 16)


@pytest.mark.parametrize("Hkv", [4, 1])
def test_decoding_takes_wide_key_tiles_and_equals_the_oracle(Hkv):
    """[P5] One query (decoding) against many keys: the flash form's plan takes key tiles of TILE_SCORES // L keys
    (one query row: the scores as k q^T) and the running max (too few rows for the keys' norms to pay), and its
    output and gradients are the float64 oracle's as with 256-key tiles."""
    from attnlab.judge import oracle, rule
    from attnlab.kernels import flash

    q, k, v = (t.float().requires_grad_() for t in qkv(2, 4, Hkv, 1, 3000, 16, 16, seed=7))
    mask = attnlab.masks.causal_lower_right()
    p = flash.plan(q, k, v, attn_mask=mask, enable_gqa=True)
    print(p)
    assert (p.tiles.block_q, p.tiles.block_k) == (1, 3000)  # one tile of every key (65536 // 1, cut to S)
    assert p.sizes.startswith("block_q default, block_k widened")
    # one query row per key head takes the running max; 4 (GQA: the group's rows) the bounded rule [P2]
    assert (p.bounded is None and "decoding" in p.why_max) if Hkv == 4 else p.bounded is not None
    out = attnlab.attention(q, k, v, attn_mask=mask, enable_gqa=True, impl="flash")
    narrow = attnlab.attention(q, k, v, attn_mask=mask, enable_gqa=True, impl="flash", block_k=256)
    ref = oracle.reference(q, k, v, attn_mask=mask.dense(2, 4, 1, 3000), enable_gqa=True)
    print("decode, wide vs float64:", rule.max_err(out, ref), "narrow vs float64:", rule.max_err(narrow, ref))
    assert rule.max_err(out, ref) < 1e-6 and rule.max_err(narrow, ref) < 1e-6
    go = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), go), torch.autograd.grad(narrow, (q, k, v), go),
                    strict=True):
        assert rule.max_err(a, b) < 1e-5 * float(b.abs().max())
