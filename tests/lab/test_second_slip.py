"""What the lab reads beside a slip it names, and slips it had no model of -- each failing on the lab before it:

- a second slip that only the grid's cases show (values wider or narrower than the keys, a bfloat16 step): the
  learner's function answers the cases of :mod:`attnlab.lab.levels.beside`, and where its outputs are not the named
  slip's answer there, a line says which cases those are (the lab named the first slip alone);
- blind corpora's files (tests/unseen: their truths in their TRUTH dicts) whose slips the lab did not name: a step
  that returns float32 for bfloat16 inputs at level 6 (the level decoded no bfloat16), a module whose output is
  NaN everywhere ("unclear"), a running sum kept in bfloat16 at level 4 ("only the lse fails"), and Triton's
  masked scores set to 0, a base-2 max with a natural log, and a running max never updated;
- read after held9's one run (development files from then on): a scale times sqrt(d) hidden by a softmax with no
  max subtracted (the overflow was all that was said), a value-width scale beside a mask built (L, L) (square-assumed
  alone), and at level 7 a running max taken from the tile alone with the rescale kept, log2 of the sum in a
  natural lse beside a short causal loop bound ("the lse is wrong" alone), and held7's running max never updated,
  which got a false "causal mask inside the tiles" beside it (its causal loop runs past S).
"""

import functools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnlab.judge import Diagnosis
from attnlab.lab.levels import beside, slips, ways
from tests.lab import blind_measure
from tests.unseen.run import HERE

SLOW = pytest.mark.slow  # a blind file's whole check: seconds of CPU (the Triton interpreter's, tens)
ROOT = Path(__file__).resolve().parents[2]


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


def _triton_keys(corpus: str, names: str, tmp_path) -> dict[str, list[str]]:
    """The corpus runner's keys for level 7's files, in a process of its own under TRITON_INTERPRET=1 (Triton reads
    it when a kernel is defined)."""
    out = tmp_path / "run.json"
    r = subprocess.run([sys.executable, "-W", "ignore", "-m", "tests.unseen.run", corpus, "--slips", "--only", names,
                        "--json", str(out)], capture_output=True, text=True, timeout=900, cwd=ROOT,
                       env={**os.environ, "TRITON_INTERPRET": "1"})
    assert r.returncode in (0, 1), r.stderr[-3000:]
    rows = json.loads(out.read_text())
    print({row["name"]: [line[0] for line in row["lines"]] for row in rows})
    return {row["name"]: [line[0] for line in row["lines"]] for row in rows}


@SLOW
def test_triton_slips_of_the_running_max_the_masked_scores_and_a_base2_max_are_named(tmp_path):
    held8 = _triton_keys("held8", "level-7/attempt_a,level-7/attempt_d", tmp_path)
    assert held8["level-7/attempt_a"][:1] == ["mask-zero"]  # tl.where(mask, s, 0.0)
    assert {"lse-base2", "edge-off-by-one"} <= set(held8["level-7/attempt_d"])  # beside an edge slip
    assert _triton_keys("held7", "level-7/attempt_f", tmp_path)["level-7/attempt_f"] == ["max-never-updated"]


@SLOW
def test_a_scale_hidden_by_an_overflow_is_read_on_the_probes_left_finite():
    assert _keys("held9", "level-1", "attempt_c") == ["measured:overflow", "scale-inverted"]


@SLOW
def test_beside_a_square_mask_the_value_width_shows_where_most_cases_share_it():
    assert _keys("held9", "level-2", "attempt_a") == ["square-assumed", "raises", "Ev!=E"]


@SLOW
def test_triton_max_from_the_tile_alone_and_log2_of_the_sum_are_named(tmp_path):
    held9 = _triton_keys("held9", "level-7/attempt_a,level-7/attempt_b", tmp_path)
    assert held9["level-7/attempt_a"][:1] == ["max-not-carried"]
    assert set(held9["level-7/attempt_b"][:2]) == {"bound-short", "lse-base2"}


@SLOW
def test_a_float32_lse_of_a_float64_call_is_held_to_the_levels_own_float64():
    """held10's level-4 file whose lse buffer is float32 for float64 inputs passed its one run: the judge's
    allowance of a float32 lse (FlashAttention's interface) was applied to the level, whose starter asks float64."""
    assert _keys("held10", "level-4", "attempt_b") == ["float32-in-float64"]


def _reversed_scaled(scale):
    """The causal mask turned round (key j seen when j >= i), and the scores multiplied by ``scale(E)``."""
    def fn(q, k, v):
        L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
        s = (q.double() @ k.double().transpose(-2, -1)) * scale(E)
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).tril(-1), -math.inf)
        return (torch.softmax(s, dim=-1) @ v.double()).to(q.dtype)
    return fn


def _named(fn) -> tuple[list[str], dict]:
    got = slips.answers(lambda q, k, v, case: fn(q, k, v), slips.PROBES, 0)
    measured: dict = {}
    keys = slips.named(got, slips.PROBES, 0, slips.common(True), pairs=slips.common_pairs(True), measured=measured)
    print(keys, measured)
    return keys, measured


def test_a_scale_of_no_slip_beside_a_mask_slip_is_measured_with_its_law():
    keys, measured = _named(_reversed_scaled(lambda E: E ** -1 / 2))  # E ** -1/2: (1/E)/2
    assert keys == ["causal-reversed", "measured:scores"]
    assert "0.5/d" in measured["measured:scores"]
    keys, measured = _named(_reversed_scaled(lambda E: 0.3))  # a constant
    assert keys == ["causal-reversed", "measured:scores"] and "multiplied by 0.3," in measured["measured:scores"]


def test_a_scale_that_follows_no_law_of_the_width_is_not_said():
    """A scale that is another number at each head width (here 1 / (d + 3)) fits each probe alone, and no one law:
    nothing is said of it, nor of the mask beside it."""
    keys, measured = _named(_reversed_scaled(lambda E: 1 / (E + 3)))
    assert "measured:scores" not in keys and "causal-reversed" not in keys and not measured, keys


@SLOW
def test_a_scale_parsed_as_one_over_2e_beside_a_reversed_mask_is_said_both():
    """held10's level-2/d (read after its one run): ``E ** -1/2`` beside a mask turned round was "unclear"."""
    assert _keys("held10", "level-2", "attempt_d") == ["causal-reversed", "measured:scores"]


@SLOW
def test_a_causal_stop_one_key_tile_past_the_first_query_is_read_beside_a_tile_local_mask():
    """held10's level-4/c (read after its one run): ``stop = i0 + block_k`` with no skip, beside a causal mask that
    compares places inside the tiles, was "unclear"; the stop is a loop bound of its own, short where Bq > Bk."""
    assert _keys("held10", "level-4", "attempt_c") == ["tile-mask", "skip-bound"]


@SLOW
def test_an_edge_mask_against_l_is_read_beside_a_sum_not_rescaled(tmp_path):
    """held10's level-7/f (read after its one run): ``offs_n < L`` for the edge, beside a running sum not rescaled,
    was "the lse is wrong" alone."""
    keys = _triton_keys("held10", "level-7/attempt_f", tmp_path)["level-7/attempt_f"]
    assert set(keys[:2]) == {"edge-length", "sum-not-rescaled"}, keys


@SLOW
def test_k_at_q_transposed_in_a_module_is_said_as_scores_transposed_not_a_wrong_split():
    """held11's level-3/b (read after its one run): k @ qᵀ gives the scores q and k swapped in the split give; the
    line said only the split ("q, k and v from the wrong thirds"), a cause the file does not have."""
    assert _keys("held11", "level-3", "attempt_b") == ["scores-transposed"]
