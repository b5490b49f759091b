"""Every claim `attnlab explore` prints, checked on its numbers."""

import json
import math

import pytest
import torch

from attnlab import explore
from attnlab.explore import online_softmax, trust
from attnlab.results import to_dict


@pytest.fixture(scope="module")
def results():  # the quick ones; sinks, which trains, has its own tests (test_sinks.py)
    return {name: explore.get(name).run(seed=0) for name in explore.quick()}


def test_no_mask_fills_the_upper_triangle(results):
    r = results["no-mask"]
    T = len(r.tokens)
    assert r.causal_upper_max == 0.0
    assert all(r.causal[i][j] == 0.0 for i in range(T) for j in range(i + 1, T))
    assert all(m > 0.01 for m in r.future_mass[:-1]) and r.future_mass[-1] == 0.0
    for w in (r.causal, r.bidirectional):
        assert all(abs(sum(row) - 1) < 1e-12 for row in w)
    assert r.out_change[-1] < 1e-12 and min(r.out_change[:-1]) > 1e-3  # the last row sees every key either way


def test_same_token_identical_without_positions_different_with_rope(results):
    r = results["same-token"]
    plain, rope = r.without_positions, r.with_rope
    assert plain.query == plain.key == plain.value == plain.out == 0.0
    assert rope.query > 0.1 and rope.key > 0.1 and rope.out > 0.01
    assert rope.value == 0.0  # RoPE rotates queries and keys, never values
    assert plain.out_causal > 0.01  # a causal mask alone already tells the copies apart


def test_inv_scale_under_sharpens_and_sqrt_holds_steady(results):
    r = results["inv-scale"]
    inv, sq, none = r.entropy["inv"], r.entropy["sqrt"], r.entropy["none"]
    assert inv == sorted(inv) and inv[-1] > 0.99 * r.max_entropy  # toward uniform as d grows
    assert max(sq) - min(sq) < 0.15  # 1/sqrt(d): the same sharpness at every width
    assert none[-1] < 0.5 < sq[-1] < inv[-1]  # unscaled collapses
    assert r.peak["inv"][-1] < 1.2 / r.T and r.peak["none"][-1] > 0.8


def test_trust_untrusted_change_reaches_every_later_output_unless_masked(results):
    r = results["trust"]
    a, b = r.segments["untrusted"]
    T = len(r.tokens)
    assert min(r.change_causal[b:]) > 1e-3  # every later position moves
    assert max(r.change_causal[:a]) == 0.0  # causal: the trusted text before it cannot see it
    assert min(r.change_bidirectional[:a]) > 1e-3  # without a causal mask even the trusted outputs move
    assert max(r.change_masked[b:]) == 0.0  # only an explicit mask stops it
    for seg in ("trusted", "untrusted", "later"):
        assert len(r.mass[seg]) == T - b
    assert all(abs(t + u + l - 1) < 1e-12 for t, u, l in zip(*r.mass.values(), strict=True))
    assert min(r.mass["untrusted"]) > 0.05


def test_block_untrusted_mask_is_causal_minus_the_untrusted_block():
    m = trust.block_untrusted(6, 2, 4)
    assert not m[4, 2] and not m[5, 3] and m[3, 2] and m[4, 1] and m[5, 4] and not m[1, 2]


def test_online_softmax_trace_ends_equal_to_softmax(results):
    r = results["online-softmax"]
    assert len(r.steps) == math.ceil(r.S / r.tile)
    assert r.weight_err < 1e-14 and r.out_err < 1e-14
    assert r.rescales >= 1  # the running max moved at least once, so the rescale was exercised
    ms = [s.m_new for s in r.steps]
    assert ms == sorted(ms) and ms[-1] == max(r.scores)
    assert r.steps[0].m_old is None and r.steps[0].rescale == 0.0
    for s in r.steps[1:]:
        assert s.rescale == pytest.approx(math.exp(s.m_old - s.m_new), abs=0)


@pytest.mark.parametrize("S,tile", [(1, 4), (7, 3), (9, 9), (10, 1)])
def test_online_softmax_trace_any_tiling(S, tile):
    g = torch.Generator().manual_seed(S)
    s, v = torch.randn(S, generator=g, dtype=torch.float64) * 5, torch.randn(S, 3, generator=g, dtype=torch.float64)
    steps = online_softmax.trace(s, v, tile)
    assert torch.allclose(torch.tensor(steps[-1].out, dtype=torch.float64), torch.softmax(s, -1) @ v, atol=1e-14)
    with pytest.raises(ValueError):
        online_softmax.run(S=0)


def test_results_round_trip_through_json(results, round_trip):
    assert set(explore.quick()) == set(explore.EXPERIMENTS) - {"sinks"}
    for name in explore.quick():
        e = explore.get(name)
        data = json.loads(json.dumps(to_dict(results[name])))
        back = e.from_dict(data)
        assert e.finding(back) == e.finding(results[name])
        assert back == results[name] == round_trip(results[name])
        assert "torch" in data["versions"]
    with pytest.raises(ValueError, match="missing"):
        explore.get("trust").from_dict({"seed": 0})
    with pytest.raises(ValueError, match="unknown experiment"):
        explore.get("nope")
