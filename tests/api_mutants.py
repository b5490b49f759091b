"""A corpus of attention kernels for the four APIs verify judges besides SDPA's, right and wrong, written as kernel
authors write them (key tiles under an online softmax, index arithmetic for windows, packed offsets and pages), and
precision bugs on every API, each cause in two or more rounding orders.

CORPUS names each kernel with its function, its API and the bugs it carries (a right kernel carries none):

    CORPUS["flash_window_swapped"] == (flash_window_swapped, "flash-attn", ("window-swapped",))

A label is one of LABELS or a bug outside that list, "new:<short words>". Every function is importable from here, so
`attnlab verify --api flash-attn --impl tests.api_mutants:flash_window_swapped` judges one. The kernels live in
tests/api_corpus/ by API; tests/test_api_mutants_selfcheck.py holds each right one to PyTorch in float64 and shows
each wrong one wrong, apart from the judge.
"""

from __future__ import annotations

from tests.api_corpus.flash import flash_exp2, flash_tiled
from tests.api_corpus.flash_bugs import (
    flash_alibi_one_row,
    flash_alibi_signed,
    flash_causal_top_left,
    flash_dead_rows_mean,
    flash_dead_rows_nan,
    flash_gqa_repeat,
    flash_last_tile_dropped,
    flash_softcap_after_mask,
    flash_softcap_before_scale,
    flash_window_off_by_one,
    flash_window_swapped,
)
from tests.api_corpus.flash_lse import (
    flash_capped_raw_base2,
    flash_fa2,
    flash_gqa_repeat_lse_unscaled,
    flash_lse_base2,
    flash_lse_unscaled,
    flash_lse_without_max,
    flash_one_row_slopes_top_left,
    flash_swapped_window_dead_mean,
)
from tests.api_corpus.flex import flex_dense, flex_tiled
from tests.api_corpus.flex_bugs import (
    flex_block_size_64,
    flex_dead_rows_nan,
    flex_full_blocks_only,
    flex_gqa_repeat,
    flex_lse_base2,
    flex_mod_after_mask,
    flex_mod_after_mask_base2,
    flex_mod_index,
    flex_mod_index_block_64,
    flex_mod_kv_head,
    flex_pad_keys,
    flex_partial_as_full,
    flex_partial_as_full_gqa_repeat,
)
from tests.api_corpus.paged import paged_gather, paged_pages
from tests.api_corpus.paged_bugs import (
    paged_append_missing,
    paged_append_missing_top_left,
    paged_append_wrong_slot,
    paged_causal_top_left,
    paged_empty_nan,
    paged_gqa_repeat,
    paged_page_offset,
    paged_page_offset_raw_cap,
    paged_seqlens_ignored,
    paged_softcap_before_scale,
    paged_stale_slots,
    paged_stale_slots_table_ignored,
    paged_table_ignored,
)
from tests.api_corpus.precision import (
    flash_accumulator_float32,
    flash_alibi_float32,
    flash_exp2_folded_q,
    flash_scores_tile_input_dtype,
    flex_scale_folded_q,
    paged_scores_input_dtype,
    varlen_scale_folded_k,
)
from tests.api_corpus.precision_sdpa import (
    sdpa_scale_float32_tensor,
    sdpa_scale_folded_q,
    sdpa_scale_split_qk,
    sdpa_scores_input_dtype,
    sdpa_scores_rounded_once,
    sdpa_softmax_float16,
    sdpa_softmax_input_dtype,
    sdpa_tiled_accumulator_float32,
)
from tests.api_corpus.sdpa import sdpa_dense, sdpa_tiled
from tests.api_corpus.varlen import varlen_block_diagonal, varlen_tiled
from tests.api_corpus.varlen_bugs import (
    varlen_causal_packed,
    varlen_causal_top_left,
    varlen_empty_nan,
    varlen_gqa_repeat,
    varlen_key_leak,
    varlen_key_leak_top_left,
    varlen_lse_padded,
    varlen_max_seqlen,
    varlen_max_seqlen_capped_raw,
    varlen_offset_from_max,
    varlen_query_leak,
    varlen_query_leak_base2,
)

APIS = ("sdpa", "flash-attn", "flash-attn-varlen", "flex", "paged-decode")
LABELS = (
    "window-swapped", "softcap-before-scale", "softcap-after-mask", "alibi-one-row", "lse-base2", "lse-unscaled",
    "lse-other", "causal-top-left", "dead-rows-mean", "dead-rows-nan", "varlen-key-leak", "varlen-query-leak",
    "varlen-max-seqlen", "varlen-causal-packed", "varlen-causal-top-left", "paged-page-offset", "paged-table-ignored",
    "paged-seqlens-ignored", "paged-stale-slots", "paged-append-wrong-slot", "paged-append-missing",
    "flex-mod-after-mask", "flex-block-size", "flex-partial-as-full", "flex-mod-index", "scores-low-precision",
    "scale-folded-low-precision", "float32-in-float64", "softmax-low-precision",
)
PRECISION = ("scores-low-precision", "scale-folded-low-precision", "float32-in-float64", "softmax-low-precision")

_FA, _VL, _FX, _PD, _SD = "flash-attn", "flash-attn-varlen", "flex", "paged-decode", "sdpa"

CORPUS = {
    # flash_attn_func: right
    "flash_tiled": (flash_tiled, _FA, ()),
    "flash_exp2": (flash_exp2, _FA, ()),
    "flash_fa2": (flash_fa2, _FA, ()),
    # one bug
    "flash_window_swapped": (flash_window_swapped, _FA, ("window-swapped",)),
    "flash_softcap_before_scale": (flash_softcap_before_scale, _FA, ("softcap-before-scale",)),
    "flash_softcap_after_mask": (flash_softcap_after_mask, _FA, ("softcap-after-mask",)),
    "flash_alibi_one_row": (flash_alibi_one_row, _FA, ("alibi-one-row",)),
    "flash_lse_base2": (flash_lse_base2, _FA, ("lse-base2",)),
    "flash_lse_unscaled": (flash_lse_unscaled, _FA, ("lse-unscaled",)),
    "flash_lse_without_max": (flash_lse_without_max, _FA, ("lse-other",)),
    "flash_causal_top_left": (flash_causal_top_left, _FA, ("causal-top-left",)),
    "flash_dead_rows_mean": (flash_dead_rows_mean, _FA, ("dead-rows-mean",)),
    "flash_dead_rows_nan": (flash_dead_rows_nan, _FA, ("dead-rows-nan",)),
    "flash_window_off_by_one": (flash_window_off_by_one, _FA, ("new:window-left-edge-off-by-one",)),
    "flash_last_tile_dropped": (flash_last_tile_dropped, _FA, ("new:last-partial-tile-dropped",)),
    "flash_gqa_repeat": (flash_gqa_repeat, _FA, ("new:gqa-heads-by-repeat",)),
    "flash_alibi_signed": (flash_alibi_signed, _FA, ("new:alibi-signed-distance",)),
    # two bugs
    "flash_swapped_window_dead_mean": (flash_swapped_window_dead_mean, _FA, ("window-swapped", "dead-rows-mean")),
    "flash_capped_raw_base2": (flash_capped_raw_base2, _FA, ("softcap-before-scale", "lse-base2")),
    "flash_one_row_slopes_top_left": (flash_one_row_slopes_top_left, _FA, ("alibi-one-row", "causal-top-left")),
    "flash_gqa_repeat_lse_unscaled": (flash_gqa_repeat_lse_unscaled, _FA, ("new:gqa-heads-by-repeat",
                                                                           "lse-unscaled")),
    # precision
    "flash_scores_tile_input_dtype": (flash_scores_tile_input_dtype, _FA, ("scores-low-precision",)),
    "flash_exp2_folded_q": (flash_exp2_folded_q, _FA, ("scale-folded-low-precision",)),
    "flash_accumulator_float32": (flash_accumulator_float32, _FA, ("float32-in-float64",)),
    "flash_alibi_float32": (flash_alibi_float32, _FA, ("float32-in-float64",)),

    # flash_attn_varlen_func: right
    "varlen_tiled": (varlen_tiled, _VL, ()),
    "varlen_block_diagonal": (varlen_block_diagonal, _VL, ()),
    # one bug
    "varlen_key_leak": (varlen_key_leak, _VL, ("varlen-key-leak",)),
    "varlen_max_seqlen": (varlen_max_seqlen, _VL, ("varlen-max-seqlen",)),
    "varlen_causal_top_left": (varlen_causal_top_left, _VL, ("varlen-causal-top-left",)),
    "varlen_causal_packed": (varlen_causal_packed, _VL, ("varlen-causal-packed",)),
    "varlen_query_leak": (varlen_query_leak, _VL, ("varlen-query-leak",)),
    "varlen_offset_from_max": (varlen_offset_from_max, _VL, ("new:causal-offset-from-max-lengths",)),
    "varlen_lse_padded": (varlen_lse_padded, _VL, ("new:lse-padded-per-sequence",)),
    "varlen_empty_nan": (varlen_empty_nan, _VL, ("dead-rows-nan",)),
    "varlen_gqa_repeat": (varlen_gqa_repeat, _VL, ("new:gqa-heads-by-repeat",)),
    # two bugs
    "varlen_key_leak_top_left": (varlen_key_leak_top_left, _VL, ("varlen-key-leak", "varlen-causal-top-left")),
    "varlen_max_seqlen_capped_raw": (varlen_max_seqlen_capped_raw, _VL, ("varlen-max-seqlen",
                                                                         "softcap-before-scale")),
    "varlen_query_leak_base2": (varlen_query_leak_base2, _VL, ("varlen-query-leak", "lse-base2")),
    # precision
    "varlen_scale_folded_k": (varlen_scale_folded_k, _VL, ("scale-folded-low-precision",)),

    # flex_attention: right
    "flex_tiled": (flex_tiled, _FX, ()),
    "flex_dense": (flex_dense, _FX, ()),
    # one bug
    "flex_mod_after_mask": (flex_mod_after_mask, _FX, ("flex-mod-after-mask",)),
    "flex_block_size_64": (flex_block_size_64, _FX, ("flex-block-size",)),
    "flex_partial_as_full": (flex_partial_as_full, _FX, ("flex-partial-as-full",)),
    "flex_full_blocks_only": (flex_full_blocks_only, _FX, ("new:partial-blocks-skipped",)),
    "flex_mod_index": (flex_mod_index, _FX, ("flex-mod-index",)),
    "flex_mod_kv_head": (flex_mod_kv_head, _FX, ("new:score-mod-given-kv-head",)),
    "flex_gqa_repeat": (flex_gqa_repeat, _FX, ("new:gqa-heads-by-repeat",)),
    "flex_pad_keys": (flex_pad_keys, _FX, ("new:zero-pad-keys-attended",)),
    "flex_dead_rows_nan": (flex_dead_rows_nan, _FX, ("dead-rows-nan",)),
    "flex_lse_base2": (flex_lse_base2, _FX, ("lse-base2",)),
    # two bugs
    "flex_mod_index_block_64": (flex_mod_index_block_64, _FX, ("flex-mod-index", "flex-block-size")),
    "flex_partial_as_full_gqa_repeat": (flex_partial_as_full_gqa_repeat, _FX, ("flex-partial-as-full",
                                                                               "new:gqa-heads-by-repeat")),
    "flex_mod_after_mask_base2": (flex_mod_after_mask_base2, _FX, ("flex-mod-after-mask", "lse-base2")),
    # precision
    "flex_scale_folded_q": (flex_scale_folded_q, _FX, ("scale-folded-low-precision",)),

    # paged decode (flash_attn_with_kvcache): right
    "paged_pages": (paged_pages, _PD, ()),
    "paged_gather": (paged_gather, _PD, ()),
    # one bug
    "paged_page_offset": (paged_page_offset, _PD, ("paged-page-offset",)),
    "paged_table_ignored": (paged_table_ignored, _PD, ("paged-table-ignored",)),
    "paged_seqlens_ignored": (paged_seqlens_ignored, _PD, ("paged-seqlens-ignored",)),
    "paged_stale_slots": (paged_stale_slots, _PD, ("paged-stale-slots",)),
    "paged_append_wrong_slot": (paged_append_wrong_slot, _PD, ("paged-append-wrong-slot",)),
    "paged_append_missing": (paged_append_missing, _PD, ("paged-append-missing",)),
    "paged_causal_top_left": (paged_causal_top_left, _PD, ("causal-top-left",)),
    "paged_gqa_repeat": (paged_gqa_repeat, _PD, ("new:gqa-heads-by-repeat",)),
    "paged_softcap_before_scale": (paged_softcap_before_scale, _PD, ("softcap-before-scale",)),
    "paged_empty_nan": (paged_empty_nan, _PD, ("dead-rows-nan",)),
    # two bugs
    "paged_stale_slots_table_ignored": (paged_stale_slots_table_ignored, _PD, ("paged-stale-slots",
                                                                               "paged-table-ignored")),
    "paged_append_missing_top_left": (paged_append_missing_top_left, _PD, ("paged-append-missing",
                                                                           "causal-top-left")),
    "paged_page_offset_raw_cap": (paged_page_offset_raw_cap, _PD, ("paged-page-offset", "softcap-before-scale")),
    # precision
    "paged_scores_input_dtype": (paged_scores_input_dtype, _PD, ("scores-low-precision",)),

    # F.scaled_dot_product_attention's signature: right, a bfloat16 kernel with float32 statistics
    "sdpa_tiled": (sdpa_tiled, _SD, ()),
    "sdpa_dense": (sdpa_dense, _SD, ()),
    # precision, two rounding orders per cause
    "sdpa_scores_input_dtype": (sdpa_scores_input_dtype, _SD, ("scores-low-precision",)),
    "sdpa_scores_rounded_once": (sdpa_scores_rounded_once, _SD, ("scores-low-precision",)),
    "sdpa_scale_folded_q": (sdpa_scale_folded_q, _SD, ("scale-folded-low-precision",)),
    "sdpa_scale_split_qk": (sdpa_scale_split_qk, _SD, ("scale-folded-low-precision",)),
    "sdpa_scale_float32_tensor": (sdpa_scale_float32_tensor, _SD, ("float32-in-float64",)),
    "sdpa_tiled_accumulator_float32": (sdpa_tiled_accumulator_float32, _SD, ("float32-in-float64",)),
    "sdpa_softmax_input_dtype": (sdpa_softmax_input_dtype, _SD, ("softmax-low-precision",)),
    "sdpa_softmax_float16": (sdpa_softmax_float16, _SD, ("softmax-low-precision",)),
}
