"""Readings of the blind corpora's kernels that the judge got wrong or missed before this change, each on the file
itself (tests/unseen: its truth in its TRUTH dict), through the corpus runner's own verify call:

- a softmax sum kept in bfloat16 (held7's fa_03): its lse was said "stored in half"; the lse's bits refute that,
  and the sum's own model points where its error does. An lse that *is* stored in bfloat16 (held7's varlen_08)
  is still said so;
- keys cast to float16 before q·kᵀ (held8's paged_04): read as scores rounded, for want of a model of the keys
  alone;
- an ALiBi bias built in bfloat16 (held8's fa_04): placed nowhere, for want of a model of the bias rounded;
- GQA by repeat beside a tile loop that drops the last partial tile (held8's fa_01): the head-map probe, at S = 7,
  saw no key at all; one of whole tiles reads it;
- NaN where an additive float mask's row is all -inf (held8's sdpa_09): no case of the grid asked;
- read after held9's one run (its files are development files from then on): pages' lse kept in bfloat16 before
  the split merge (paged_02) was said "scores kept in half" where pages of 1 make the two alike, and merge weights
  exp(lse_j - max) taken in float16 over chunks of 48 keys (flex_03) were not placed; a flex kernel that
  reads the block lists' padding (flex_07) was said "the mask is ignored", as torch's padding lists every other
  block; a varlen kernel whose row-to-sequence lookup is off at each boundary (varlen_09) got readings that fit two
  of the ~40 cases they change, each excused by a partner reading that was itself out;
- held7's paged_04, whose splits drop the last keys, got "the new keys unseen" and "... stale" on the one case
  where the last keys are the new ones.
"""

import pytest

from tests.unseen import run

SLOW = pytest.mark.slow  # a kernel's whole quick grid in three dtypes: seconds of CPU


def _keys(corpus: str, name: str) -> list[str]:
    entry = next(e for e in run.entries(corpus) if e.name == name)
    got = run.judge_kernel(entry)
    print(name, [line[:2] for line in got["lines"]])
    assert got["failed"]
    return [line[0] for line in got["lines"]]


@SLOW
def test_a_softmax_sum_kept_in_bfloat16_is_not_said_an_lse_stored_there():
    keys = _keys("held7", "flash-attn/fa_03")
    assert "softmax-half" in keys and "lse-half" not in keys, keys


@SLOW
def test_an_lse_stored_in_bfloat16_is_still_said_stored_there():
    keys = _keys("held7", "flash-attn-varlen/varlen_08")
    assert keys[0] == "lse-half", keys


@SLOW
def test_keys_cast_to_float16_are_read_as_the_keys_rounded():
    keys = _keys("held8", "paged-decode/paged_04")
    assert keys[0] == "kv-half" and "scores-rounded" not in keys, keys


@SLOW
def test_an_alibi_bias_built_in_bfloat16_is_placed():
    keys = _keys("held8", "flash-attn/fa_04")
    assert keys[0] == "bias-half", keys


@SLOW
def test_gqa_by_repeat_is_read_beside_a_dropped_last_tile():
    keys = _keys("held8", "flash-attn/fa_01")
    assert {"tail-dropped", "gqa"} <= set(keys), keys


@SLOW
def test_nan_where_a_float_mask_hides_a_whole_row_is_read():
    keys = _keys("held8", "sdpa/sdpa_09")
    assert "dead-rows" in keys, keys


@SLOW
def test_pages_lse_kept_in_bfloat16_is_a_merge_in_half_not_scores_rounded():
    keys = _keys("held9", "paged-decode/paged_02")
    assert "merge-half" in keys and "scores-rounded" not in keys, keys


@SLOW
def test_merge_weights_taken_in_float16_over_chunks_of_48_are_a_merge_in_half():
    assert _keys("held9", "flex/flex_03")[0] == "merge-half"


@SLOW
def test_block_lists_read_past_their_counts_are_not_said_a_mask_ignored():
    keys = _keys("held9", "flex/flex_07")
    assert keys[0] == "flex-counts-ignored" and "api-mask-ignored" not in keys, keys


@SLOW
def test_block_lists_read_one_entry_past_their_counts_are_said_so():
    keys = _keys("held8", "flex/flex_09")
    assert keys[0] == "flex-counts-ignored", keys


@SLOW
def test_exp_in_float16_is_not_said_a_merge_in_half():
    keys = _keys("held8", "flash-attn-varlen/varlen_09")
    assert keys[0] == "exp-half" and "merge-half" not in keys, keys


@SLOW
def test_readings_that_fit_two_of_the_cases_they_change_are_not_said():
    keys = _keys("held9", "flash-attn-varlen/varlen_09")
    assert not {"varlen-max-seqlen-k", "flash-window-swapped", "varlen-queries-shifted"} & set(keys), keys
    assert "measured:visibility" in keys, keys


@SLOW
def test_dropped_last_keys_are_not_said_new_keys_unseen_or_stale():
    keys = _keys("held7", "paged-decode/paged_04")
    assert not {"paged-new-kv-unseen", "paged-new-kv-stale"} & set(keys), keys


# read after held10's one run: its files are development files from then on


@SLOW
def test_the_full_list_read_with_the_partial_lists_count_is_said_so_and_nothing_else():
    keys = _keys("held10", "flex/flex_06")
    assert keys[0] == "flex-counts-crossed", keys
    assert not {"flex-partial-as-full", "flex-counts-ignored"} & set(keys), keys


@SLOW
def test_full_blocks_never_visited_are_said_so():
    assert _keys("held10", "flex/flex_07")[0] == "flex-full-dropped"


@SLOW
def test_a_causal_tile_skip_by_the_tiles_first_row_is_not_said_a_dropped_tail():
    keys = _keys("held10", "sdpa/sdpa_07")
    assert keys[0] == "causal-tile-skip" and "tail-dropped" not in keys, keys
    # (its bfloat16 case of L < S, where one row loses one key, met attention at scale 0.1813 within bfloat16's
    # rule: a scale of no simple form is said only in float32 and float64)
    assert "measured:scores" not in keys, keys


@SLOW
def test_an_alibi_bias_built_from_a_slope_rounded_to_float16_is_placed():
    """held9's fa_08 (slope and product in float16): the bias rounded once did not fit it, "unclear"."""
    assert _keys("held9", "flash-attn/fa_08")[0] == "bias-half"


@SLOW
def test_a_varlen_backward_whose_ds_k_and_q_are_cast_to_bfloat16_is_placed():
    """held9's varlen_01: dQ = dS K and dK = dSᵀ Q from operands cast to bfloat16 -- "only gradients fail": an API
    case's backward was modelled without its mask, and no step cast the GEMMs' operands."""
    assert _keys("held9", "flash-attn-varlen/varlen_01")[0] == "bwd-half"


@SLOW
def test_pages_merged_by_their_sums_alone_are_said_so():
    """held8's paged_05: each page's output weighted by its sum, its max never brought to a common one -- "unclear"
    beside its second bug (the append lost to a copy of a bfloat16 cache)."""
    keys = _keys("held8", "paged-decode/paged_05")
    assert {"split-max-dropped", "paged-cache-not-written"} <= set(keys[:2]), keys


@SLOW
def test_a_reading_that_fits_only_within_bfloat16s_rule_is_not_said():
    """held7's flex_04 (its kv block size read from BLOCK_SIZE[0]): "the full blocks left out" fit its bfloat16
    probe of BLOCK_SIZE (32, 64) within bfloat16's rule, and not the same probe in float32 or float64."""
    keys = _keys("held7", "flex/flex_04")
    assert "flex-full-dropped" not in keys, keys
