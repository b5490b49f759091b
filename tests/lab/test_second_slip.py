"""What the lab reads beside a slip it names, and slips it had no model of -- each failing on the lab before it:

- a second slip that only the grid's cases show (values wider or narrower than the keys, a bfloat16 step): the
  learner's function answers the cases of :mod:`attnlab.lab.levels.beside`, and where its outputs are not the named
  slip's answer there, a line says which cases those are (the lab named the first slip alone);
- blind corpora's files (tests/unseen: their truths in their TRUTH dicts) whose slips the lab did not name: a step
  that returns float32 for bfloat16 inputs at level 6 (the level decoded no bfloat16), a module whose output is
  NaN everywhere ("unclear"), a running sum kept in bfloat16 at level 4 ("only the lse fails"), and Triton's
  masked scores set to 0, a base-2 max with a natural log, and a running max never updated.
"""

import functools
import math

import pytest
import torch

from attnlab.judge import Diagnosis
from attnlab.lab.levels import beside, slips, ways
from tests.lab import blind_measure
from tests.unseen.run import HERE

SLOW = pytest.mark.slow  # a blind file's whole check: seconds of CPU (the Triton interpreter's, tens)


def _no_mask_scaled_by(width):
    """The causal mask left out, and the scores scaled by 1/sqrt(width(q, v))."""
    def fn(q, k, v):
        work = torch.float64 if q.dtype == torch.float64 else torch.float32
        s = q.to(work) @ k.to(work).transpose(-2, -1) / math.sqrt(width(q, v))
        return (torch.softmax(s, dim=-1) @ v.to(work)).to(q.dtype)
    return fn


def _second(fn) -> list[Diagnosis]:
    probes = beside.cases(slips.PROBES)
    got = slips.answers(lambda q, k, v, case: fn(q, k, v), probes, 0)
    slip = functools.partial(ways.attention, way=ways.Way(mask="none"))
    return beside.second(got, probes, 0, [slip], [])


def test_a_second_slip_where_the_values_are_wider_is_said_beside_the_first():
    lines = _second(_no_mask_scaled_by(lambda q, v: v.shape[-1]))
    print([(d.key, d.text) for d in lines])
    assert [d.key for d in lines] == ["Ev!=E"] and d_count(lines) == 2
    assert "not that slip's" in lines[0].text and "Ev != E" in lines[0].text


def test_nothing_is_said_beside_a_slip_that_is_the_whole_of_the_outputs():
    lines = _second(_no_mask_scaled_by(lambda q, v: q.shape[-1]))
    assert lines == [], [(d.key, d.text) for d in lines]


def d_count(lines):
    return lines[0].count


def _keys(corpus: str, level: str, name: str) -> list[str]:
    from attnlab.lab import levels

    name_of = levels.LEVELS[int(level.split("-")[1]) - 1].name  # (as the corpus runner finds it)
    found, passed = blind_measure.first_diagnoses(name_of, HERE / corpus / "slips" / level / f"{name}.py")
    print(corpus, level, name, [(d.key, d.text[:90]) for d in found])
    assert not passed
    return [d.key for d in found]


@SLOW
def test_the_value_width_slip_is_read_beside_the_missing_mask_in_a_blind_file():
    assert _keys("held7", "level-2", "attempt_e") == ["causal-ignored", "Ev!=E"]


@SLOW
def test_a_decode_step_that_returns_float32_for_bfloat16_is_said_beside_its_slip():
    assert _keys("held7", "level-6", "attempt_e") == ["scale-1/d", "dtype"]


@SLOW
def test_a_module_whose_output_is_nan_everywhere_is_said_so():
    assert _keys("held8", "level-3", "attempt_f") == ["nan-everywhere"]


@SLOW
def test_a_running_sum_kept_in_bfloat16_is_placed_from_the_lse():
    assert _keys("held8", "level-4", "attempt_b")[:1] == ["softmax-half"]


@SLOW
@pytest.mark.parametrize(("corpus", "name", "first"), [
    ("held7", "attempt_f", "max-never-updated"),  # m = m_new missing
    ("held8", "attempt_a", "mask-zero"),  # tl.where(mask, s, 0.0)
])
def test_triton_slips_of_the_running_max_and_the_masked_scores_are_named(corpus, name, first):
    assert _keys(corpus, "level-7", name)[:1] == [first]


@SLOW
def test_a_base2_max_with_a_natural_log_is_named_beside_an_edge_slip():
    assert {"lse-base2", "edge-off-by-one"} <= set(_keys("held8", "level-7", "attempt_d"))
