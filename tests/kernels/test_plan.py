"""The flash form's plan: the strategy each representative call takes, said in words, and that the plan is what
runs (issue 43 §2: the fast paths chosen in one place, not conditions inside the loop)."""

import re
from pathlib import Path

import pytest
import torch

import attnlab
from attnlab import masks, mods
from attnlab.kernels import flash, flash_band, flash_plan
from tests.helpers import qkv

ROOT = Path(__file__).resolve().parents[2]


def _ids(*lengths):
    return torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])


def _tilt(score, b, h, q_idx, kv_idx):
    return score + (kv_idx - q_idx).to(score.dtype) / 64


# name -> (N, H, Hkv, L, S), the call's keywords, (path, takes the bounded rule, words in the plan)
CASES = {
    "full": ((1, 4, 4, 512, 512), {}, ("tiles", True, "tiles of 256 x 256 (the defaults), none masked")),
    "causal": ((1, 4, 4, 512, 512), {"is_causal": True}, ("tiles", True, "3 of 4 computed per head, 2 of them masked")),
    "window": ((1, 4, 4, 1024, 1024), {"attn_mask": masks.sliding_window(64)}, ("bands", True, "key bands of 64")),
    "window, dropout": ((1, 4, 4, 1024, 1024), {"attn_mask": masks.sliding_window(64), "dropout_p": 0.1},
                        ("tiles", True, "dropout   0.1")),
    "window, a function": ((1, 4, 4, 1024, 1024), {"attn_mask": masks.sliding_window(64), "score_mod": _tilt},
                           ("tiles", False, "is called as a function")),
    "window, softcap": ((1, 4, 4, 1024, 1024), {"attn_mask": masks.sliding_window(64),
                                                "score_mod": mods.softcap(20.0)},
                        ("bands", True, "softcap(20), fused into the tile [P12]")),
    "documents on the tiles' edges": ((1, 4, 4, 1024, 1024), {"attn_mask": masks.document(_ids(256, 512, 256))},
                                      ("tiles", True, "tiles of 256 x 256")),
    "float mask": ((1, 4, 4, 300, 300), {"attn_mask": "float"}, ("tiles", False, "a float mask can move a score")),
    "decoding": ((1, 4, 4, 1, 4096), {}, ("tiles", False, "1 query row per key head (decoding)")),
    "decoding, GQA": ((1, 8, 2, 1, 4096), {"enable_gqa": True}, ("tiles", True, "block_k widened")),
    "ALiBi, causal": ((1, 4, 4, 1024, 1024), {"is_causal": True, "score_mod": mods.alibi(slopes=torch.tensor(
        [2.0, 1.0, 0.25, 0.01]))}, ("split heads", None, "key head 0 over 128 keys")),
    "ALiBi, causal, not split": ((1, 4, 4, 1024, 1024), {"is_causal": True, "split_heads": False,
                                                         "score_mod": mods.alibi(4)}, ("tiles", True, "alibi(4)")),
    "given sizes": ((1, 4, 4, 512, 512), {"block_q": 64, "block_k": 128}, ("tiles", True, "64 x 128 (given)")),
    "empty": ((1, 4, 4, 0, 64), {}, ("nothing", None, "nothing to compute")),
}


def _call(size, kw):
    N, H, Hkv, L, S = size
    q, k, v = qkv(N, H, Hkv, L, S, 16, dtype=torch.float32, seed=L + S)
    kw = dict(kw)
    if kw.get("attn_mask") == "float":
        kw["attn_mask"] = torch.randn(L, S, generator=torch.Generator().manual_seed(1))
    return (q, k, v), kw


@pytest.mark.parametrize("name", list(CASES))
def test_the_plan_names_the_strategy_each_call_takes(name):
    size, kw, (path, bounded, words) = CASES[name]
    args, kw = _call(size, kw)
    p = flash.plan(*args, **kw)
    print(p)
    assert p.path == path
    if bounded is not None:
        assert (p.bounded is not None) == bounded, p.why_max
        assert bool(p.why_max) == (not bounded)
    assert words in str(p)


@pytest.mark.parametrize("name", [n for n in CASES if n != "empty"])
def test_the_plan_is_what_runs(name, monkeypatch):
    """attention() is run(plan()): the same bits, and the bands run exactly where the plan says bands."""
    size, kw, (path, _, _) = CASES[name]
    args, kw = _call(size, kw)
    banded = []
    forward = flash_band.forward
    monkeypatch.setattr(flash_band, "forward", lambda *a: banded.append(1) or forward(*a))
    torch.manual_seed(0)
    got = flash.run(flash.plan(*args, **kw))
    taken = bool(banded)
    torch.manual_seed(0)
    assert torch.equal(got, flash.attention(*args, **kw))
    if path != "split heads":  # (a split's runs are calls of their own: a windowed run takes the bands)
        assert taken == (path == "bands")


def test_a_bad_option_is_refused_by_the_plan_before_anything_runs():
    q, k, v = qkv(1, 2, 2, 8, 8, 4, dtype=torch.float32)
    with pytest.raises(ValueError, match="half_matmuls must be True, False or None, got 'yes'"):
        flash.plan(q, k, v, half_matmuls="yes")
    with pytest.raises(ValueError, match="block_k"):
        flash.plan(q, k, v, block_k=0)
    with pytest.raises(ValueError, match="score modifier alibi holds 2 heads but the attention has at least 4"):
        flash.plan(*qkv(1, 4, 4, 8, 8, 4), score_mod=mods.alibi(2))


def _printed(text: str) -> list[str]:
    """The lines of a printed plan quoted in a text (a docstring or a markdown page)."""
    at = text.index("flash plan: q (1, 8, 4096, 64) float32")
    return [line.strip() for line in text[at:].splitlines()[:6]]


def test_the_plan_printed_in_the_docs_is_the_real_one():
    """flash_plan's docstring and docs/flash.md show the plan of a causal call: it must be what plan() prints."""
    q, k, v = (torch.zeros(1, 8, 4096, 64) for _ in range(3))
    real = [line.strip() for line in str(flash.plan(q, k, v, is_causal=True)).splitlines()]
    assert _printed(flash_plan.__doc__) == real
    assert _printed((ROOT / "docs" / "flash.md").read_text()) == real


def test_the_plan_reads_the_bound_rule_where_it_lives(monkeypatch):
    """[P2] The bounded rule compares with online.SAFE_LOGIT at each call: made smaller than any bound, every query
    tile takes the running max, and the answer is still the matrix form's."""
    from attnlab.kernels import online

    q, k, v = qkv(1, 2, 2, 40, 40, 8)
    fixed = []
    attend = flash.attend
    monkeypatch.setattr(flash, "attend", lambda *a: fixed.append(a[-1].fixed) or attend(*a))
    flash.attention(q, k, v, is_causal=True, block_q=16)
    assert fixed and all(fixed)
    fixed.clear()
    monkeypatch.setattr(online, "SAFE_LOGIT", -1.0)
    out = flash.attention(q, k, v, is_causal=True, block_q=16)
    assert fixed and not any(fixed)
    want = attnlab.attention(q, k, v, is_causal=True, impl="matrix")
    assert float((out - want).abs().max()) < 1e-12
    assert re.search(r"at most -1, else the running max", str(flash.plan(q, k, v, is_causal=True)))
