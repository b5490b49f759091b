"""An overflow on large scores is said as its cause ("subtract each row's max") only where a softmax without the max
overflows in the very rows the learner's did; a max taken but the wrong one (each tile's own, not carried) overflows
in other rows, and is told what was measured, never the cause it does not have."""

import math

import pytest
import torch

from attnlab.lab import levels
from attnlab.lab.levels import slips

FLASH = levels.find("flash")
SLOW = pytest.mark.slow  # level 4's probes through its tiled slips: 2 to 3 s of CPU (level 2's: a tenth of one)


def _tiled(q, k, v, causal, block, carry):
    """A level-4 forward in tiles of keys; ``carry``: "right" (the running max), "tile" (each tile's own max, the
    rescale still taken against it: m can go down), "none" (no max at all)."""
    scale = 1 / math.sqrt(q.shape[-1])
    L, S = q.shape[-2], k.shape[-2]
    m = torch.full((*q.shape[:-1], 1), -math.inf)
    total = torch.zeros(*q.shape[:-1], 1)
    acc = torch.zeros(*q.shape[:-1], v.shape[-1])
    rows = torch.arange(L).unsqueeze(-1)
    for j0 in range(0, S, block):
        s = (q @ k[..., j0:j0 + block, :].transpose(-2, -1)) * scale
        if causal:
            s = s.masked_fill(torch.arange(j0, j0 + s.shape[-1]) > rows, -math.inf)
        top = s.amax(dim=-1, keepdim=True)
        new = {"right": torch.maximum(m, top), "tile": top, "none": torch.zeros_like(m)}[carry]
        safe = torch.where(torch.isinf(new), 0.0, new)
        p = torch.exp(s - safe)
        alpha = torch.exp(m - safe) if carry != "none" else torch.ones_like(m)
        total = alpha * total + p.sum(dim=-1, keepdim=True)
        acc = alpha * acc + p @ v[..., j0:j0 + block, :]
        m = new
    return acc / total, (m + torch.log(total))[..., 0]


def _keys(carry, level=FLASH):
    def fn(q, k, v, is_causal=False, block_q=64, block_k=64):
        dtype = q.dtype
        out, lse = _tiled(q.float(), k.float(), v.float(), is_causal, 16, carry)
        return out.to(dtype), lse

    mod = level.module()
    call = (lambda q, k, v, case: mod.probe_call(fn, q, k, v, case)) if level is FLASH else \
        (lambda q, k, v, case: mod.probe_call(lambda q, k, v: fn(q, k, v, True)[0], q, k, v, case))
    got = slips.answers(call, mod.PROBES, 0)
    return slips.named(got, mod.PROBES, 0, mod.slip_list(), getattr(mod, "NAN", None), mod.slip_pairs())


def test_a_softmax_without_its_max_is_told_to_subtract_the_max():
    keys = _keys("none", levels.find("matrix"))  # level 2: no tiles, no other max to take
    print(keys)
    assert keys[:1] == ["max-subtraction"]


@SLOW
def test_a_max_not_carried_overflows_too_and_is_told_what_was_measured_not_a_cause():
    keys = _keys("tile")
    print(keys)
    assert "max-subtraction" not in keys and "measured:overflow" in keys
    text = slips.TEXT["measured:overflow"]
    assert text.startswith("large scores overflow in your softmax: NaN or inf where") and "not each row's" in text
    assert _keys("none")[:1] in (["max-subtraction"], ["measured:overflow"])  # tiled: named only where rows tell


@SLOW
def test_the_right_tiles_overflow_nowhere():
    assert _keys("right") == []


@SLOW
def test_a_backward_whose_weights_overflow_on_large_scores_is_told_what_was_measured():
    """Level 5: P rebuilt as exp(s) / exp(lse) is right on every case but the one of scores in the hundreds, where
    exp(s) overflows: the line says where the gradients went NaN and what never overflows, not a slip's name."""
    import functools

    from tests.lab import level_corpus as C
    from tests.lab import level_solutions as S

    keys, passed = C.own_keys(levels.find("backward"), functools.partial(S.flash_backward, slip="exp-ratio"), 0)
    print(keys)
    assert not passed and keys[:1] == ["measured:overflow"], keys
    keys, passed = C.own_keys(levels.find("backward"), S.flash_backward, 0)
    assert passed and keys == [], keys
