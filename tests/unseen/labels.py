"""Which lines name each bug of a blind corpus, set down from the files' truths before their run is read.

``LABELS[name]`` is one entry per bug in the file's TRUTH: the line keys a reader takes as naming that bug (a
cause's key, or ``measured:<kind>`` -- a probe's measured difference of that kind, which says the bug as a fact).
``ALSO[name]`` are lines that are true of the kernel beside its listed bugs (a float32 lse of a float64 call, a
consequence in another quantity): never counted false. A line whose key is in neither is a false line, except the
lines that name nothing (:data:`NEUTRAL`): what the failing cases share, an exception, "no single pattern".
"""

from __future__ import annotations

NEUTRAL = {"raises", "unclear", "bfloat16", "float32", "float64", "precision", "L!=S", "L=1", "Ev!=E", "batch-dims",
           "noncontig", "window", "window-left", "window-right", "softcap", "alibi", "append", "gqa", "mod",
           "lse-only", "gradients-only", "causal", "dead-rows", "precision-unplaced", "large-logits",
           "lse-wrong",  # (the lab's "your lse is not the log-sum-exp ...": the quantity that fails, no cause)
           "sinks"}  # (only cases with sinks fail: what the failing cases share, as "gqa" or "softcap")
MASK = ("measured:visibility",)
PRECISION = ("scores-rounded", "scale-folded", "softmax-half", "exp-half", "kv-half", "pv-half", "lse-half",
             "bwd-half", "precision-unplaced")

DEV = {
    # flash-attn
    "flash-attn/accumulator_rounded_each_block": [PRECISION],
    "flash-attn/alibi_added_before_softcap": [("measured:bias", "measured:scores")],
    "flash-attn/alibi_distance_signed": [("flash-alibi-signed", "measured:bias")],
    "flash-attn/causal_top_left": [("api-top-left", *MASK)],
    "flash-attn/empty_rows_nan_online_softmax": [("dead-rows", "measured:dead-rows", "lse-dead-rows")],
    "flash-attn/exp2_lse_left_in_base2": [("lse-base2",)],
    "flash-attn/exp2_running_sum_in_input_dtype": [PRECISION],
    "flash-attn/gqa_modulo_and_alibi_batch0_slopes": [("gqa", "measured:heads"),
                                                      ("flash-alibi-one-row", "measured:bias")],
    "flash-attn/lse_blh_layout_and_causal_drops_window_left": [("lse-layout", "lse-only", "measured:lse"),
                                                               ("window-left", *MASK)],
    "flash-attn/lse_buffer_in_input_dtype": [("lse-half",)],
    "flash-attn/online_softmax_output_not_rescaled": [("measured:visibility", "measured:bias", "measured:scores",
                                                       "online-not-rescaled")],
    "flash-attn/softcap_after_log2e_fold": [("measured:scores", "softcap")],
    "flash-attn/softcap_backward_missing_tanh_derivative": [("gradients-only", "measured:backward",
                                                             "backward-factor")],
    "flash-attn/softcap_on_unscaled_scores": [("flash-softcap-scale", "measured:scores")],
    "flash-attn/window_left_off_by_one": [("flash-window-edge", *MASK)],
    "flash-attn/window_right_ignored": [("window-right", *MASK)],
    # flash-attn-varlen
    "flash-attn-varlen/alibi_on_packed_positions": [("measured:bias", "alibi")],
    "flash-attn-varlen/causal_offset_from_max_seqlens": [("varlen-diagonal-from-max", *MASK)],
    "flash-attn-varlen/causal_top_left_and_keyless_nan": [("varlen-top-left", *MASK),
                                                          ("dead-rows", "measured:dead-rows", "lse-dead-rows")],
    "flash-attn-varlen/exp_in_input_dtype": [("exp-half", "softmax-half", "precision-unplaced")],
    "flash-attn-varlen/gqa_modulo_and_softcap_ignored": [("gqa", "measured:heads"), ("softcap", "measured:scores")],
    "flash-attn-varlen/keys_sliced_to_max_seqlen_k": [("varlen-max-seqlen-k", *MASK)],
    "flash-attn-varlen/keys_sliced_with_query_offsets": [("varlen-keys-from-q-offsets", *MASK)],
    "flash-attn-varlen/sequence_id_searchsorted_left": [("varlen-queries-shifted", "varlen-keys-early",
                                                         "varlen-keys-late", *MASK)],
    "flash-attn-varlen/softmax_dtype_argument_rounds_scores": [("scores-rounded", "softmax-half",
                                                                "precision-unplaced")],
    "flash-attn-varlen/window_sides_swapped": [("flash-window-swapped", *MASK)],
    # flex
    "flex/block_mask_batch0_and_lse_log2": [("flex-batch0", *MASK), ("lse-base2",)],
    "flex/block_size_unpacked_kv_first": [("flex-block-size", *MASK)],
    "flex/empty_rows_nan_and_score_mod_local_q": [("flex-mod-index", "measured:bias"),
                                                  ("dead-rows", "measured:dead-rows", "lse-dead-rows")],
    "flex/full_blocks_dropped": [("flex-partial-only", *MASK)],
    "flex/gqa_mods_see_kv_head": [("flex-mod-kv-head", "measured:bias")],
    # keys of a block listed twice weigh twice: the probe's weights say it (measured:bias, "counted more than once")
    "flex/kv_num_blocks_ignored": [("flex-padding-blocks", "measured:bias", *MASK)],
    "flex/mask_mod_block_local_kv_index": [("flex-mask-index", *MASK)],
    "flex/score_mod_after_masking": [("mod-after-mask", *MASK)],
    "flex/score_mod_before_scale": [("flex-mod-before-scale", "measured:scores", "measured:bias")],
    "flex/scores_in_input_dtype_for_score_mod": [PRECISION],
    # paged-decode
    "paged-decode/append_page_looked_up_once": [("paged-cache-written", "paged-cache-wrong-slots",
                                                 "paged-new-kv-wrong-slot", *MASK)],
    "paged-decode/append_position_off_by_one": [("paged-new-kv-wrong-slot", "paged-cache-wrong-slots", *MASK)],
    "paged-decode/appended_tokens_not_attended": [("paged-new-kv-unseen", *MASK)],
    "paged-decode/block_table_ignored_contiguous_pages": [("paged-table-ignored", *MASK)],
    "paged-decode/causal_skipped_for_multi_token_queries": [("paged-causal-ignored", "api-mask-ignored", *MASK)],
    "paged-decode/last_page_tail_not_masked": [("paged-stale-slots", *MASK)],
    "paged-decode/page_loop_accumulator_in_cache_dtype": [PRECISION],
    "paged-decode/split_kv_partials_in_input_dtype": [PRECISION + ("lse-half",)],
    "paged-decode/v_cache_gets_keys_and_window_left_exclusive": [("paged-cache-written", "paged-v-from-k"),
                                                                  ("flash-window-edge", *MASK)],
    "paged-decode/window_anchored_before_append_and_softcap_ignored": [("paged-new-kv-unseen", *MASK),
                                                                        ("softcap", "measured:scores")],
    # sdpa
    "sdpa/bool_mask_polarity_inverted": [("mask-inverted", *MASK)],
    "sdpa/causal_mask_bottom_right": [("causal-alignment", *MASK)],
    "sdpa/custom_backward_dq_dk_unscaled": [("gradients-only", "measured:backward", "backward-factor")],
    "sdpa/dead_rows_average_values": [("dead-rows", "measured:dead-rows")],
    "sdpa/default_scale_uses_value_dim": [("Ev!=E", "measured:scores")],
    "sdpa/float_mask_read_as_bool": [("float-mask", "measured:bias", *MASK)],
    "sdpa/gqa_backward_first_head_and_dead_rows_nan": [("gqa", "gradients-only", "backward-factor"),
                                                       ("dead-rows", "measured:dead-rows")],
    "sdpa/gqa_heads_tiled_not_interleaved": [("gqa", "measured:heads")],
    "sdpa/half_scores_overflow_before_scale": [PRECISION + ("scores-rounded",)],
    "sdpa/scores_rounded_in_input_dtype": [PRECISION],
    "sdpa/strict_causal_and_mask_before_scale": [("diagonal", *MASK), ("float-mask", "measured:bias")],
}
DEV_ALSO = {
    "paged-decode/append_position_off_by_one": {"float32-in-float64"},  # its lse is float32 for float64 calls
}

# The learners' files (slips/level-N), set down from their truths before their run was read; the lab's keys (its
# levels' TEXT), the judge's, or a probe's measured difference. A bug no key says (dq gathered from V) has no entry
# that can name it: the file counts as not all named, as it should.
SUMS = ("measured:sums",)
DEV_SLIPS = {
    "level-1/future_skipped_only_in_value_sum": [("mask-after-softmax", "unnormalised", *SUMS)],
    "level-1/mask_lets_next_key_through_and_no_cast": [("peeks-ahead", *MASK), ("dtype",)],
    "level-1/masked_score_set_to_zero": [("mask-zero",)],
    "level-1/query_key_indices_swapped_and_scale_inverted": [("scores-transposed",), ("measured:scores",)],
    "level-1/scale_divides_by_e": [("scale-1/d",)],
    "level-1/scale_from_float32_tensor": [("float32-in-float64", "precision-unplaced")],
    "level-1/value_sum_reads_query_row": [("out-is-v",)],
    "level-2/mask_after_softmax_and_scale_by_key_count": [("mask-after-softmax", *SUMS), ("scale-length",
                                                                                          "measured:scores")],
    "level-2/mask_aligned_bottom_right": [("lower-right", "causal-alignment", *MASK)],
    "level-2/scale_from_value_width": [("Ev!=E",)],
    "level-2/softmax_over_queries": [("softmax-dim",)],
    "level-2/triu_masks_the_diagonal": [("diagonal", *MASK)],
    "level-3/head_features_interleaved": [("heads-split",)],
    "level-3/heads_merged_without_transpose": [("merge-view",)],
    "level-3/heads_reshaped_without_transpose": [("heads-split",)],
    "level-3/mask_after_softmax_and_heads_merged_without_transpose": [("mask-after-softmax", *SUMS), ("merge-view",)],
    "level-3/output_projection_skipped": [("no-proj",)],
    "level-3/scale_by_model_width": [("scale-C",)],
    "level-4/acc_not_rescaled": [("acc-not-rescaled", "online-not-rescaled")],
    "level-4/causal_mask_uses_tile_positions": [("tile-mask",)],
    "level-4/causal_skip_tests_first_query": [("skip-bound", *MASK)],
    "level-4/last_key_tile_dropped_and_skip_off_by_one": [("last-tile-dropped",), ("skip-bound", "diagonal-skipped")],
    "level-4/lse_cast_to_input_dtype": [("lse-dtype", "lse-half")],
    "level-4/lse_missing_running_max": [("lse-no-max",)],
    "level-4/new_max_from_tile_only": [("max-not-carried",)],
    "level-5/D_sliced_with_key_offsets": [("d-wrong", "d-key-tile")],
    "level-5/P_scaled_twice_and_dq_from_values": [("scale-twice",), ()],
    "level-5/dS_parenthesis_dropped": [("ds-precedence",)],
    "level-5/dk_missing_scale": [("scale-missing",)],
    "level-5/dq_overwritten_per_key_tile": [("dq-overwritten",)],
    "level-5/lse_broadcast_along_keys": [("lse-other-row",)],
    # (slot-ahead's line names both readings: written a slot on, or read before writing)
    "level-6/attend_before_writing_the_cache": [("before-write", "slot-ahead")],
    "level-6/attends_whole_cache": [("whole-buffer",)],
    "level-6/cache_rebuilt_not_written_in_place": [("cache-not-written",)],
    "level-6/key_cached_unrotated": [("rope-q-only",)],
    "level-6/own_key_excluded": [("before-write",)],
    "level-6/rotated_at_next_position": [("rope-offset",)],
    "level-6/value_slot_off_by_one_and_no_scale": [("slot-ahead",), ("unscaled",)],
    "level-7/acc_not_rescaled_and_causal_mask_tile_local": [("acc-not-rescaled",), ("tile-mask",)],
    "level-7/causal_loop_stops_before_diagonal": [("bound-short",)],
    "level-7/causal_mask_hides_diagonal": [("diagonal",)],
    "level-7/edge_mask_missing": [("pad-keys",)],
    "level-7/l_not_rescaled": [("sum-not-rescaled",)],
    "level-7/lse_left_in_base_two": [("lse-base2",)],
    "level-7/scores_kept_in_float16": [("scores-rounded", "softmax-half", "lse-half", "precision-unplaced")],
    "level-7/v_feature_mask_uses_key_width": [("Ev!=E",)],
}


# the second learner corpus (tests/unseen/held/slips), set down from its truths before its one run
HELD_SLIPS = {
    "level-1/correct_loops_with_running_max": [],
    "level-1/max_taken_before_mask": [("max-before-mask",)],
    "level-1/output_always_bfloat16": [("dtype",)],
    "level-1/scale_by_e_and_masked_score_zero": [("scale-1/d",), ("mask-zero", *MASK)],
    "level-1/scale_uses_value_width": [("Ev!=E", "measured:scores")],
    "level-1/scores_through_python_floats": [("no-grad", "gradients-only")],
    "level-2/correct_matrix_with_einsum": [],
    "level-2/keys_reshaped_not_transposed": [("measured:scores",)],
    "level-2/manual_softmax_unstable_total_sum": [("max-subtraction",), ("unnormalised", *SUMS)],
    "level-2/mask_hides_diagonal": [("diagonal", *MASK)],
    "level-2/masked_fill_result_dropped": [("causal-ignored", *MASK)],
    "level-2/softmax_over_queries": [("softmax-dim",)],
    "level-3/correct_heads_by_unflatten": [],
    "level-3/heads_merged_without_transpose": [("merge-view",)],
    "level-3/heads_viewed_without_transpose": [("heads-split",)],
    "level-3/mask_multiplied_into_scores": [("mask-zero", *MASK)],
    "level-3/proj_skipped_and_softmax_over_queries": [("no-proj",), ("softmax-dim",)],
    "level-3/scale_by_model_width": [("scale-C",)],
    "level-4/acc_not_rescaled": [("acc-not-rescaled", "online-not-rescaled")],
    "level-4/causal_mask_with_tile_local_indices": [("tile-mask", *MASK)],
    "level-4/correct_online_softmax_break": [],
    "level-4/lse_returned_in_input_dtype": [("lse-dtype", "lse-half")],
    "level-4/partial_key_tile_dropped_and_lse_without_max": [("last-tile-dropped", "tail-dropped", *MASK),
                                                             ("lse-no-max",)],
    "level-4/rescale_after_max_overwritten": [("rescale-after-update", "online-not-rescaled")],
    "level-4/rescale_factor_inverted": [("rescale-inverted",)],
    "level-5/causal_tile_skip_reversed": [("skip-wrong-side",)],
    "level-5/correct_key_tiles_outer": [],
    "level-5/d_rounded_to_float32": [("float32-in-float64", "precision-unplaced")],
    "level-5/dk_missing_scale": [("scale-missing",)],
    "level-5/dq_overwritten_per_key_tile": [("dq-overwritten",)],
    "level-5/ds_missing_p_on_d_and_dq_unscaled": [("ds-precedence",), ("scale-missing",)],
    "level-5/weights_from_exp_ratio": [("max-subtraction",)],
    # (rope-k-only's line: a query not turned against keys turned once, or cached keys turned again by pos)
    "level-6/cache_rebound_not_written_and_query_unrotated": [("cache-not-written",), ("rope-k-only",)],
    # every key turned to the new token's position when read cancels out in q.k: "no-rope" says it in those words
    # (set down after the held run read it as a false line; the line's text names this variant)
    "level-6/cached_keys_rotated_again_and_scale_by_length": [("rope-k-only", "no-rope"), ("scale-length",)],
    "level-6/correct_cache_then_softmax": [],
    "level-6/key_cached_before_rotation": [("rope-q-only",)],
    "level-6/own_key_left_out": [("before-write",)],
    "level-6/positions_counted_from_one": [("rope-offset",)],
    "level-6/whole_cache_attended": [("whole-buffer",)],
    "level-7/acc_not_rescaled": [("acc-not-rescaled", "online-not-rescaled")],
    "level-7/causal_bound_skips_diagonal_and_lse_without_max": [("bound-short", "diagonal-skipped", *MASK),
                                                                ("lse-no-max",)],
    "level-7/causal_by_loop_bound_only": [("diagonal-unmasked", *MASK)],
    "level-7/causal_mask_hides_diagonal_and_l_not_rescaled": [("diagonal", *MASK),
                                                              ("sum-not-rescaled", "online-not-rescaled")],
    "level-7/correct_where_masks": [],
    "level-7/keys_past_end_not_masked": [("pad-keys", *MASK)],
    "level-7/lse_mixes_log2_and_natural_log": [("lse-base2",)],
}



# the second kernel corpus (tests/unseen/held/kernels), set down from its truths (docstring, TRUTH) before its run;
# only keys whose words in `attnlab verify --causes` are true of the bug. A bug no cause's words say (a transposed
# lse, statistics without gradient, an empty sequence that ends the loop, keys sliced by the query offsets, full
# blocks skipped, score_mod before the scale) has only the measured kinds or the tags that are true of it.
HELD = {
    # flash-attn
    "flash-attn/alibi_before_softcap_and_empty_rows_nan": [("measured:bias", "measured:scores"),
                                                           ("dead-rows", "measured:dead-rows")],
    "flash-attn/alibi_distance_not_aligned": [("flash-alibi-offset", "api-top-left", "measured:bias")],
    "flash-attn/causal_mask_top_left": [("api-top-left", *MASK)],
    "flash-attn/correct_exp2_online_softmax": [],
    "flash-attn/correct_tiled_online_softmax": [],
    "flash-attn/exp2_accumulator_in_input_dtype": [PRECISION],
    "flash-attn/exp2_lse_base2_and_window_right_ignored": [("lse-base2", "measured:lse"), ("window-right", *MASK)],
    "flash-attn/lse_left_in_score_layout": [("lse-only", "measured:lse")],
    "flash-attn/lse_returned_in_input_dtype": [("lse-half", "lse-dtype", "lse-only", "precision-unplaced")],
    "flash-attn/running_sum_in_input_dtype": [PRECISION],
    "flash-attn/running_sum_not_rescaled": [("online-not-rescaled", "sum-not-rescaled", "measured:visibility",
                                             "measured:bias", "measured:scores")],
    "flash-attn/softcap_on_unscaled_scores": [("flash-softcap-scale", "measured:scores")],
    "flash-attn/statistics_pass_without_grad": [("gradients-only", "measured:backward")],
    "flash-attn/window_left_edge_exclusive": [("flash-window-edge", "window-left", *MASK)],
    # flash-attn-varlen
    "flash-attn-varlen/causal_offset_from_max_seqlens": [("varlen-diagonal-from-max", "measured:bias", *MASK)],
    "flash-attn-varlen/correct_per_sequence_loop": [],
    "flash-attn-varlen/correct_vectorised_block_diagonal": [],
    "flash-attn-varlen/empty_sequence_breaks_loop": [(*MASK, "measured:lse")],
    "flash-attn-varlen/key_rows_sliced_with_query_offsets": [MASK],
    "flash-attn-varlen/normalised_output_kept_in_out_buffer": [PRECISION],
    "flash-attn-varlen/packed_positions_and_empty_row_lse": [("varlen-causal-packed", "measured:bias", *MASK),
                                                             ("lse-dead-rows", "dead-rows", "measured:dead-rows",
                                                              "measured:lse")],
    "flash-attn-varlen/rows_without_keys_nan": [("dead-rows", "measured:dead-rows")],
    # (searchsorted right=False: sequence b loses its first key row and takes the next one's, b - 1 its first query)
    "flash-attn-varlen/sequence_id_boundary_rows": [("varlen-queries-shifted", "varlen-keys-late",
                                                     "varlen-keys-overrun", *MASK)],
    "flash-attn-varlen/softcap_unnormalised_and_gqa_expand_order": [("softcap", "measured:scores"),
                                                                    ("gqa", "measured:heads")],
    "flash-attn-varlen/softcapped_scores_in_input_dtype": [PRECISION],
    # flex
    "flex/correct_block_sparse_loop": [],
    "flex/full_blocks_skipped": [MASK],
    "flex/kv_block_span_from_q_block_and_score_mod_after_mask": [("flex-block-size", *MASK),
                                                                 ("mod-after-mask", *MASK)],
    "flex/kv_head_modulo_and_empty_rows_nan": [("gqa", "measured:heads"), ("dead-rows", "measured:dead-rows")],
    "flex/partial_blocks_not_masked": [("flex-partial-as-full", *MASK)],
    "flex/running_stats_in_input_dtype": [PRECISION],
    "flex/score_mod_before_scale": [("mod", "measured:scores", "measured:bias")],
    "flex/score_mod_index_order_swapped": [("flex-mod-index", "measured:bias")],
    "flex/score_mod_on_input_dtype_scores": [PRECISION],
    # paged-decode
    "paged-decode/append_one_page_and_kv_head_modulo": [("paged-cache-written", "paged-cache-wrong-slots",
                                                         "paged-cache-touched", *MASK),
                                                        ("gqa", "measured:heads")],
    "paged-decode/append_slot_off_by_one": [("paged-new-kv-wrong-slot", "paged-cache-wrong-slots",
                                             "paged-cache-written", "paged-cache-touched", *MASK)],
    "paged-decode/append_written_to_gathered_copy": [("paged-cache-not-written", "paged-cache-written")],
    "paged-decode/causal_aligned_top_left": [("paged-top-left", "api-top-left", *MASK)],
    "paged-decode/correct_gather_pages": [],
    "paged-decode/correct_page_walk_online_softmax": [],
    "paged-decode/last_page_tail_unmasked": [("paged-stale-slots", *MASK)],
    "paged-decode/new_tokens_written_not_attended": [("paged-new-kv-unseen", *MASK)],
    "paged-decode/page_loop_accumulator_in_cache_dtype": [PRECISION],
    "paged-decode/pages_assumed_contiguous": [("paged-table-ignored", "paged-cache-written", "paged-cache-wrong-slots",
                                               "paged-cache-touched", *MASK)],
    "paged-decode/softcap_before_scale_and_lse_without_max": [("flash-softcap-scale", "measured:scores"),
                                                              ("lse-shift", "lse-no-max", "measured:lse")],
    "paged-decode/split_kv_partial_lse_in_input_dtype": [PRECISION],
    "paged-decode/window_ignores_cache_offset": [("paged-top-left", "api-top-left", *MASK)],
    # sdpa
    "sdpa/bool_mask_polarity_inverted": [("mask-inverted", *MASK)],
    "sdpa/causal_mask_bottom_right": [("causal-alignment", "lower-right", *MASK)],
    "sdpa/correct_dense_float32_softmax": [],
    "sdpa/custom_backward_dk_missing_scale": [("scale-missing", "gradients-only", "measured:backward")],
    "sdpa/default_scale_from_value_dim": [("Ev!=E", "measured:scores")],
    "sdpa/float_mask_scaled_and_masked_rows_uniform": [("float-mask", "measured:bias"),
                                                       ("dead-rows", "measured:dead-rows")],
    "sdpa/fully_masked_row_nan": [("dead-rows", "measured:dead-rows")],
    "sdpa/gqa_kv_heads_tiled": [("gqa", "measured:heads")],
    "sdpa/two_pass_lse_in_input_dtype": [PRECISION],
}

# The sink corpus (tests/unseen/sinks/<api>/, written blind to the judge), set down from its truths before its run
# was read. A sink read at another logit (scaled, given a key's bias or soft-cap, its exp left unshifted by the row
# max) names the bug where its line says how it is read; one hidden by a mask where its line says it is masked.
SINK_HEADS = ("sink-head", "sink-kv-head", "measured:sinks")
SINK_LSE = ("sink-not-in-lse", "lse-dead-rows", "measured:lse")
SINKS = {
    "flash-attn-varlen/causal_top_left_and_sink_per_kv_head": [("varlen-top-left", *MASK), ("sink-kv-head",
                                                                                             "measured:sinks")],
    "flash-attn-varlen/correct_per_sequence_loop": [],
    "flash-attn-varlen/empty_key_sequence_lse_neg_inf": [SINK_LSE],
    "flash-attn-varlen/sink_as_key_before_position_zero": [("sink-masked", "measured:sinks")],
    "flash-attn-varlen/sink_merged_with_plain_exp_log": [("max-subtraction",)],
    "flash-attn-varlen/sink_missing_on_unmasked_fast_path": [("sink-ignored",)],
    "flash-attn/alibi_batch0_slopes_and_softcap_grad_missing": [("flash-alibi-one-row", "measured:bias"),
                                                                ("gradients-only", "measured:backward",
                                                                 "backward-factor", "softcap")],
    "flash-attn/alibi_bias_on_sink_column": [("sink-modified", "measured:sinks")],
    "flash-attn/correct_exp2_dense": [],
    "flash-attn/correct_online_softmax_custom_backward": [],
    "flash-attn/exp2_backward_p_sink_unconverted": [("dsink-form",)],
    "flash-attn/exp2_sink_not_rescaled": [("sink-scaled", "measured:sinks")],
    "flash-attn/lse_omits_sink": [SINK_LSE],
    "flash-attn/lse_stored_in_input_dtype": [("lse-half",)],
    "flash-attn/no_key_rows_lse_nan": [("dead-rows", "lse-dead-rows", "measured:dead-rows", "max-subtraction")],
    "flash-attn/no_key_rows_lse_neg_inf_and_causal_top_left": [SINK_LSE, ("api-top-left", *MASK)],
    "flash-attn/no_max_subtraction_overflow": [("max-subtraction",)],
    "flash-attn/sink_added_every_key_block": [("sink-per-tile", "measured:sinks")],
    "flash-attn/sink_indexed_by_kv_head": [SINK_HEADS],
    "flash-attn/softcap_applied_to_sink": [("sink-modified", "measured:sinks")],
    "flash-attn/window_left_off_by_one_and_lse_base2": [("flash-window-edge", *MASK), ("lse-base2",)],
    "paged-decode/correct_gather_dense": [],
    "paged-decode/correct_split_kv_combine": [],
    "paged-decode/new_keys_written_one_slot_late_and_lse_omits_sink": [
        ("paged-new-kv-wrong-slot", "paged-cache-wrong-slots", "paged-cache-written", "paged-new-kv-stale",
         "paged-cache-touched"), SINK_LSE],
    "paged-decode/sink_dropped_on_append_path": [("sink-ignored",)],
    "paged-decode/sink_seeds_max_but_not_sum": [("sink-ignored",)],
    "paged-decode/split_kv_sink_in_every_split": [("sink-per-tile", "measured:sinks")],
    "paged-decode/token_loop_accumulates_in_input_dtype": [PRECISION],
    "sdpa/backward_uses_keys_only_lse": [("sink-backward",)],
    "sdpa/bool_mask_pads_sink_column_false": [("sink-masked", "sink-ignored")],
    "sdpa/causal_bottom_right_and_dsink_missing_delta": [("causal-alignment", "lower-right", *MASK),
                                                         ("dsink-form",)],
    "sdpa/causal_mask_built_over_sink_column": [("sink-masked", "measured:sinks")],
    "sdpa/correct_eager_concat": [],
    "sdpa/correct_tiled_custom_backward": [],
    "sdpa/dsink_from_one_minus_rowsum": [PRECISION],
    "sdpa/dsink_last_query_block_and_backward_drops_float_mask": [("dsink-axis",), ("backward-mask",)],
    "sdpa/dsink_sign_flipped": [("dsink-sign",)],
    "sdpa/gqa_heads_tiled_and_sink_exp_unshifted": [("gqa", "measured:heads"), ("sink-unshifted",)],
    "sdpa/gqa_sinks_grouped_in_wrong_order": [SINK_HEADS],
    "sdpa/math_forced_to_float32": [("float32-in-float64",)],
    "sdpa/row_max_excludes_sink": [("max-subtraction",)],
    "sdpa/sink_column_dropped_from_wrong_end": [("sink-column-shifted",)],
    "sdpa/sink_path_nan_on_fully_masked_rows": [("dead-rows", "measured:dead-rows")],
    "sdpa/sink_scaled_with_scores": [("sink-scaled", "measured:sinks")],
}
SINKS_ALSO = {  # lines true of a kernel beside its listed bug
    "flash-attn/no_key_rows_lse_nan": {"sink-not-in-lse"},  # its lse is NaN where a row sees no key
    "flash-attn/lse_stored_in_input_dtype": {"gradients-only", "bfloat16"},
    # its truth: rows the sink is hidden from that see no key "get lse -inf instead of the sink"
    "flash-attn-varlen/sink_as_key_before_position_zero": {"lse-dead-rows"},
}

# The second held corpus (tests/unseen/held2: kernels and learners' files written by three new helpers who had read
# neither the judge nor the other corpora), set down from the files' truths before their one run was read.
CACHE = ("paged-cache-written", "paged-cache-wrong-slots", "paged-cache-touched")
HELD2 = {
    # flash-attn-varlen
    "flash-attn-varlen/causal_window_aligned_top_left": [("varlen-top-left", "api-top-left", "measured:bias", *MASK)],
    "flash-attn-varlen/causal_offset_from_max_seqlens": [("varlen-diagonal-from-max", "measured:bias", *MASK)],
    "flash-attn-varlen/correct_loop_per_sequence": [],
    "flash-attn-varlen/correct_packed_block_diagonal": [],
    "flash-attn-varlen/lse_reshaped_instead_of_transposed": [("lse-only", "measured:lse")],
    "flash-attn-varlen/masked_scores_filled_with_finfo_min": [("dead-rows", "measured:dead-rows", "lse-dead-rows",
                                                               "measured:lse")],
    "flash-attn-varlen/output_accumulator_in_input_dtype": [PRECISION],
    "flash-attn-varlen/softcap_applied_before_scaling": [("flash-softcap-scale", "measured:scores")],
    "flash-attn-varlen/softmax_statistics_in_input_dtype": [PRECISION],
    "flash-attn-varlen/window_left_off_by_one_and_zero_lse_for_keyless_sequences": [
        ("flash-window-edge", "window-left", *MASK), ("lse-dead-rows", "measured:lse")],
    # paged-decode
    "paged-decode/append_overflows_into_next_physical_page": [(*CACHE, *MASK)],
    "paged-decode/attends_only_previously_cached_keys": [("paged-new-kv-unseen", *MASK)],
    "paged-decode/correct_gather_pages_dense": [],
    "paged-decode/correct_page_walk_online_softmax": [],
    # (NaN on rows that see keys, in other splits: no cause's words say it; a measured difference may)
    "paged-decode/empty_split_partial_is_nan": [(*MASK, "measured:dead-rows")],
    "paged-decode/gqa_heads_tiled_instead_of_grouped": [("gqa", "measured:heads")],
    "paged-decode/last_page_dropped_when_length_is_page_multiple": [MASK],
    "paged-decode/new_values_written_from_k_and_softmax_nan_on_dead_rows": [(*CACHE, "paged-cache-not-written"),
                                                                           ("dead-rows", "measured:dead-rows")],
    "paged-decode/scores_computed_in_cache_dtype": [PRECISION],
    "paged-decode/split_partials_stored_in_input_dtype": [PRECISION],
    "paged-decode/window_right_bound_ignored": [("window-right", *MASK)],
    # sdpa
    "sdpa/backward_grad_missing_scale": [("scale-missing", "backward-factor", "gradients-only", "measured:backward")],
    "sdpa/causal_mask_aligned_bottom_right": [("causal-alignment", "lower-right", *MASK)],
    "sdpa/causal_strict_and_scale_from_value_dim": [("diagonal", *MASK), ("Ev!=E", "measured:scores")],
    "sdpa/correct_dense_masked_softmax": [],
    "sdpa/dead_rows_finite_fill": [("dead-rows", "measured:dead-rows")],
    "sdpa/float_mask_added_before_scale": [("float-mask", "measured:bias")],
    "sdpa/gqa_kv_head_modulo": [("gqa", "measured:heads")],
    "sdpa/kv_tail_tile_dropped": [("tail-dropped", *MASK)],
    "sdpa/output_accumulator_in_input_dtype": [PRECISION],
    # flash-attn
    "flash-attn/alibi_distance_missing_abs": [("flash-alibi-signed", "measured:bias")],
    "flash-attn/causal_aligned_top_left": [("api-top-left", *MASK)],
    "flash-attn/correct_dense_reference": [],
    "flash-attn/correct_tiled_online_softmax_exp2": [],
    "flash-attn/lse_returned_in_log2_units": [("lse-base2", "measured:lse")],
    "flash-attn/row_sum_accumulated_in_input_dtype": [PRECISION],
    "flash-attn/scores_matmul_in_input_dtype": [PRECISION],
    "flash-attn/softcap_backward_drops_tanh_derivative": [("gradients-only", "backward-factor", "measured:backward")],
    "flash-attn/window_left_off_by_one_and_softcap_unscaled": [("flash-window-edge", "window-left", *MASK),
                                                              ("flash-softcap-scale", "measured:scores")],
    "flash-attn/window_right_side_ignored": [("window-right", *MASK)],
    # flex (full blocks skipped, and a block mask read from batch 0 alone: no cause's words say them; the measured
    # visibility does)
    "flex/block_mask_batch_index_ignored": [MASK],
    "flex/correct_block_sparse_online_softmax": [],
    "flex/full_blocks_skipped": [MASK],
    "flex/gqa_head_modulo_and_dead_rows_nan": [("gqa", "measured:heads"), ("dead-rows", "measured:dead-rows")],
    "flex/partial_blocks_mask_mod_not_applied": [("flex-partial-as-full", *MASK)],
    "flex/score_mod_applied_before_scale": [("mod", "measured:scores", "measured:bias")],
    "flex/score_mod_q_kv_swapped": [("flex-mod-index", "measured:bias")],
    "flex/score_tile_rounded_to_input_dtype": [PRECISION],
}
HELD2_ALSO = {
    # rows that see no key filled with finfo.min weigh every packed key alike: those rows attend other sequences
    "flash-attn-varlen/masked_scores_filled_with_finfo_min": {"varlen-packing-ignored", "mask-zero"},
}

HELD2_SLIPS = {
    "level-1/correct_loops_stable_softmax": [],
    "level-1/masked_score_set_to_zero": [("mask-zero", *MASK)],
    "level-1/scale_one_over_e": [("scale-1/d",)],
    "level-1/mask_hides_own_key": [("diagonal", *MASK)],
    "level-1/returns_work_dtype": [("dtype",)],
    # (scores multiplied by sqrt(E): no slip's words say it; the probe's measured scores do)
    "level-1/scale_times_sqrt_and_mask_hides_past": [("measured:scores",), ("causal-reversed", *MASK)],
    "level-2/correct_matmul_triu_softmax": [],
    "level-2/softmax_over_queries": [("softmax-dim",)],
    "level-2/mask_zeroes_weights_after_softmax": [("mask-after-softmax", *MASK)],
    "level-2/mask_diagonal_offset_by_lengths": [("lower-right", *MASK)],
    "level-2/mask_from_tril": [("causal-reversed", *MASK)],
    "level-2/unscaled_scores_and_diagonal_hidden": [("unscaled",), ("diagonal", *MASK)],
    "level-3/correct_view_transpose_heads": [],
    "level-3/heads_viewed_without_transpose": [("heads-split",)],
    "level-3/heads_merged_without_transpose": [("merge-view",)],
    "level-3/scale_uses_model_width": [("scale-C",)],
    "level-3/output_projection_left_out": [("no-proj",)],
    "level-3/softmax_over_queries_and_scale_times_sqrt": [("softmax-dim",), ("measured:scores",)],
    "level-4/correct_online_softmax_guarded": [],
    "level-4/acc_not_rescaled": [("acc-not-rescaled", "online-not-rescaled")],
    "level-4/causal_mask_in_tile_coordinates": [("tile-mask", *MASK)],
    "level-4/lse_from_total_only": [("lse-no-max", "lse-shift")],
    "level-4/running_stats_in_input_dtype": [(*PRECISION, "lse-dtype")],
    "level-4/max_not_carried_and_last_tile_dropped": [("max-not-carried", "stale-max"),
                                                      ("last-tile-dropped", "tail-dropped", *MASK)],
    "level-5/correct_tiled_from_lse": [],
    "level-5/d_summed_over_tile_keys": [("d-wrong",)],
    "level-5/weights_softmaxed_per_tile": [("second-softmax",)],
    "level-5/dq_without_scale": [("scale-missing",)],
    # (only half-precision inputs round differently; level 5 grades float32 and float64, where it is the right file)
    "level-5/grads_accumulated_in_input_dtype": [PRECISION],
    "level-5/ds_sign_flipped_and_dk_without_scale": [("ds-sign",), ("scale-missing",)],
    "level-6/correct_rotate_write_attend": [],
    "level-6/query_left_unrotated": [("rope-k-only",)],
    "level-6/attends_slots_before_pos": [("before-write",)],
    "level-6/key_cached_before_rotation": [("rope-q-only",)],
    "level-6/attends_whole_cache": [("whole-buffer",)],
    "level-6/scale_by_d_and_softmax_over_query": [("scale-1/d",), ("softmax-dim",)],
    "level-7/correct_masked_online_softmax": [],
    "level-7/causal_bound_stops_before_diagonal": [("bound-short", "diagonal-skipped", *MASK)],
    "level-7/no_mask_past_last_key": [("pad-keys", *MASK)],
    # (the condition transposed inside the diagonal tile: there each query sees the keys after it)
    "level-7/causal_condition_transposed": [("causal-reversed", *MASK)],
    "level-7/running_sum_and_acc_in_output_dtype": [(*PRECISION, "lse-dtype")],
    "level-7/rescale_only_sum_and_lse_without_max": [("acc-not-rescaled", "online-not-rescaled"),
                                                     ("lse-no-max", "lse-shift")],
}

# The third held corpus (tests/unseen/held3: kernels and learners' files written blind by two helpers who had read
# neither the judge nor the other corpora), set down from the files' truths before its one run was read. Its kernels'
# precision bugs keep a fixed half dtype (float16 or bfloat16) for float32 inputs too, float64 exact: PRECISION.
HELD3 = {
    # flash-attn
    "flash-attn/alibi_rows": [("flash-alibi-signed", "measured:bias")],
    "flash-attn/capped_autograd": [("gradients-only", "measured:backward")],
    "flash-attn/capped_scores": [("flash-softcap-scale", "measured:scores")],
    # (the window placed from query i, causal itself aligned bottom-right: the window is aligned top-left)
    "flash-attn/dense_window": [("api-top-left", *MASK)],
    "flash-attn/lse_buffer": [PRECISION],
    "flash-attn/pv_lowp": [PRECISION],
    "flash-attn/rowblock_bias": [("flash-alibi-one-row", "measured:bias"), ("flash-window-edge", "window-left", *MASK)],
    # (a window side of 0 taken as unbounded: no cause's words say it; the side's tag and the measured visibility do;
    # the backward's ALiBi distance without the S - L offset: the offset's line says it, of the gradients)
    "flash-attn/split_paths": [("window-left", "window-right", *MASK),
                               ("flash-alibi-offset", "api-top-left", "gradients-only", "measured:backward")],
    "flash-attn/tiled_fwd_bwd": [],
    # flash-attn-varlen
    # (the last packed sequence never computed, its rows 0 and lse -inf: no cause's words say it; measured only)
    "flash-attn-varlen/cap_after_mask": [("mod-after-mask", *MASK), (*MASK, "measured:sums", "measured:lse")],
    # (ALiBi's slope read by the kv head: flex's line for a per-head bias read by the key head says it; the causal
    # limit dropped under a window: the mask ignored, or the measured visibility)
    "flash-attn-varlen/grouped_bias": [("flex-mod-kv-head", "measured:bias"), ("api-mask-ignored", *MASK)],
    "flash-attn-varlen/lowp_scores": [PRECISION],
    "flash-attn-varlen/lse_buffer_rows": [("lse-only", "measured:lse")],
    "flash-attn-varlen/maxlen_diag": [("varlen-diagonal-from-max", "measured:bias", *MASK)],
    "flash-attn-varlen/packed_positions": [("flash-alibi-offset", "alibi", "measured:bias")],
    # (keys gathered from the query offsets: no cause's words say it; the measured visibility does)
    "flash-attn-varlen/padded_gather": [MASK],
    "flash-attn-varlen/packed_loop": [],
    "flash-attn-varlen/two_pass": [PRECISION],
    # flex
    "flex/base2_online": [("lse-base2", "measured:lse")],
    "flex/block_sparse": [("flex-partial-as-full", *MASK)],
    "flex/broadcast_mods": [("mod", "measured:scores", "measured:bias")],
    "flex/dense_vmap": [],
    "flex/exp2_lowp": [PRECISION],
    # (mask_mod given kv_idx and q_idx swapped in the partial blocks: a causal mask_mod turned round there)
    "flex/grid_masks": [("causal-reversed", *MASK), ("gqa", "measured:heads")],
    "flex/kv_groups": [("flex-mod-kv-head", "measured:bias", *MASK)],
    # (full blocks skipped: no cause's words say it; the measured visibility does)
    "flex/partial_lists": [MASK],
    # (the block mask read at batch 0, head 0, and score_mod given the tile's own query index: no cause's words say
    # them; the measured visibility and bias do)
    "flex/query_tiles": [MASK, ("measured:bias",)],
    # paged-decode
    "paged-decode/append_kv": [(*CACHE, "paged-new-kv-wrong-slot", *MASK), ("scale", "measured:scores")],
    "paged-decode/append_then_attend": [("paged-new-kv-unseen", "paged-top-left", *MASK)],
    "paged-decode/capped_decode": [("lse-only", "measured:lse")],
    "paged-decode/gather_dense": [],
    "paged-decode/half_acc": [PRECISION],
    # (the page looked up once for every new token: those past a page's end are written back into that page, the
    # table read one entry off for them)
    "paged-decode/page_append": [(*CACHE, "paged-table-index-off", *MASK)],
    "paged-decode/split_kv": [PRECISION],
    "paged-decode/whole_pages": [("paged-stale-slots", "paged-seqlens-ignored", *MASK)],
    # (the window's left edge measured from the last key for every query: no cause's words say it)
    "paged-decode/window_decode": [("window-left", *MASK)],
    # sdpa
    "sdpa/einsum_heads": [("gqa", "measured:heads")],
    "sdpa/fill_mask": [("Ev!=E", "measured:scores"), ("dead-rows", "measured:dead-rows")],
    "sdpa/grad_fold": [("grad-mask", "broadcast-mask", "gradients-only"),
                       ("gqa", "gradients-only", "measured:backward")],
    "sdpa/online_tiles": [PRECISION],
    "sdpa/qtile_bias": [("float-mask", "measured:bias")],
    "sdpa/reference_math": [],
    "sdpa/saved_lse": [PRECISION],
    "sdpa/softmax_causal": [("causal-alignment", "lower-right", *MASK)],
    "sdpa/tiled_autograd": [],
}
HELD3_ALSO: dict[str, set[str]] = {}

# (a module that adds the residual itself, dv gathered from O, not dO: no key says them, and an lse whose max is left
# unscaled only the judge's lse line says, which the lab's level 4 does not read: those entries cannot be named)
HELD3_SLIPS = {
    "level-1/attempt_a": [],
    # (score * E ** -1/2 is score / (2E): "divided by d" sends a reader to the scale; the measured scores say it)
    "level-1/attempt_b": [("scale-1/d", "measured:scores")],
    "level-1/attempt_c": [("lower-right", "causal-alignment", *MASK)],
    "level-1/attempt_d": [PRECISION],
    "level-1/attempt_e": [("mask-zero", *MASK), ("dtype",)],
    "level-2/attempt_a": [("softmax-dim", *SUMS)],
    "level-2/attempt_b": [("mask-zero", *MASK)],
    "level-2/attempt_c": [],
    "level-2/attempt_d": [("max-subtraction", "measured:overflow")],
    "level-2/attempt_e": [("scale-1/d",), ("lower-right", "causal-alignment", *MASK)],
    "level-3/attempt_a": [("heads-split",)],
    "level-3/attempt_b": [("mask-after-softmax", *SUMS)],
    "level-3/attempt_c": [],
    "level-3/attempt_d": [("scale-C",)],
    "level-3/attempt_e": [("measured:scores",), ()],
    "level-4/attempt_a": [],
    "level-4/attempt_b": [("acc-not-rescaled", "online-not-rescaled")],
    "level-4/attempt_c": [("skip-bound", *MASK)],
    "level-4/attempt_d": [("lse-unscaled",)],
    "level-4/attempt_e": [("max-subtraction", "measured:overflow")],
    "level-4/attempt_f": [("last-tile-dropped", "tail-dropped", *MASK), ("tile-mask", *MASK)],
    "level-5/attempt_a": [("ds-precedence",)],
    "level-5/attempt_b": [("dq-overwritten",)],
    "level-5/attempt_c": [("d-wrong",)],
    "level-5/attempt_d": [],
    "level-5/attempt_e": [("float32-in-float64", "precision-unplaced")],
    "level-5/attempt_f": [(), ("scale-missing",)],
    "level-6/attempt_a": [],
    "level-6/attempt_b": [("before-write", "slot-ahead")],
    "level-6/attempt_c": [("cache-not-written",)],
    "level-6/attempt_d": [("rope-offset",)],
    # (the scores through float16 for float32 and float64 alike: bfloat16 passes, the line that says so names it)
    "level-6/attempt_e": [(*PRECISION, "precision")],
    "level-6/attempt_f": [("rope-q-only",), ("scale-1/d",)],
    "level-7/attempt_a": [("pad-keys", *MASK)],
    "level-7/attempt_b": [("causal-reversed", *MASK)],
    "level-7/attempt_c": [],
    "level-7/attempt_d": [("lse-base2",)],
    # (each tile's sums over the queries, not the keys: no slip's words say it; the measured sums do)
    "level-7/attempt_e": [SUMS],
    "level-7/attempt_f": [("sum-not-rescaled", "online-not-rescaled"), ("pad-keys", "edge-off-by-one", *MASK)],
}
HELD3_SLIPS_ALSO: dict[str, set[str]] = {}

# The fourth held corpus (tests/unseen/held4: 45 kernels and 39 learners' files written blind by two helpers who had
# read neither the judge nor the earlier corpora), labelled from the files' TRUTH texts alone, before its one run.
HELD4 = {
    # flash-attn
    # (ALiBi signed; the first key tile placed from the query tile's last row: window rows miss their leading keys)
    "flash-attn/alibi_signed_kv_range": [("flash-alibi-signed", "measured:bias"), ("window-left", *MASK)],
    "flash-attn/bwd_recompute_low_precision": [PRECISION],
    # (the softcap's derivative missing from dS: gradients only, a backward factor)
    "flash-attn/bwd_softcap_jacobian": [("gradients-only", "measured:backward")],
    "flash-attn/flash_fwd_bwd_exp2": [],
    "flash-attn/gqa_dkdv_reduce": [("gqa", "gradients-only", "measured:backward", "measured:heads")],
    "flash-attn/pv_fp16": [PRECISION],
    # (the bias capped with the score: only softcap with alibi_slopes; the measured scores or bias say it)
    "flash-attn/softcap_after_alibi": [("measured:bias", "measured:scores")],
    "flash-attn/swapped_window_dead_lse": [("flash-window-swapped", *MASK), ("lse-dead-rows", "measured:lse")],
    "flash-attn/window_left_edge": [("flash-window-edge", "window-left", *MASK)],
    # flash-attn-varlen
    "flash-attn-varlen/alibi_packed_positions": [("flash-alibi-offset", "measured:bias")],
    "flash-attn-varlen/causal_offset_padded": [("varlen-diagonal-from-max", *MASK, "measured:bias")],
    "flash-attn-varlen/kv_staged_half": [PRECISION],
    # (the key loop ends before the diagonal when keys outnumber queries: the measured visibility)
    "flash-attn-varlen/kv_upper_bound_local": [("varlen-top-left", *MASK)],
    "flash-attn-varlen/lse_input_dtype": [PRECISION],
    "flash-attn-varlen/lse_packed_layout": [("lse-only", "measured:lse", "varlen-lse-padded")],
    # (one zero padding key attended by shorter sequences: a key of score 0 and value 0)
    "flash-attn-varlen/padded_batch_gather": [("pad-keys", "varlen-keys-overrun", *MASK, "measured:sums")],
    "flash-attn-varlen/unscaled_softcap_decode_path": [("flash-softcap-scale", "measured:scores"),
                                                       ("window-left", "api-mask-ignored", *MASK)],
    "flash-attn-varlen/varlen_tiled_online": [],
    # flex
    "flex/block_sparse_online": [],
    "flex/dense_tiles_two_pass": [],
    # (h // Hkv for the kv head; rows with no key NaN)
    "flex/gqa_head_div_dead_rows": [("gqa", "measured:heads"), ("dead-rows", "measured:dead-rows", "lse-dead-rows")],
    "flex/mask_batch_broadcast_lse2": [("flex-batch0", *MASK), ("lse-base2", "measured:lse")],
    # (kv_idx from the block's place in the list: mask_mod and score_mod see other keys)
    "flex/partial_block_kv_offset": [("flex-mod-index", *MASK, "measured:bias")],
    "flex/q_idx_tile_local": [("flex-mod-index", *MASK, "measured:bias")],
    "flex/scale_after_score_mod": [("mod", "measured:scores", "measured:bias")],
    "flex/score_mod_input_dtype": [PRECISION],
    "flex/score_mod_kv_head": [("flex-mod-kv-head", "measured:bias")],
    # paged-decode
    "paged-decode/append_slot_offset": [(*CACHE, "paged-new-kv-wrong-slot", "paged-new-kv-stale")],
    "paged-decode/causal_from_cache_len": [("paged-top-left", *MASK)],
    "paged-decode/qk_half_scores": [PRECISION],
    "paged-decode/seqlen_excludes_new": [("paged-new-kv-unseen", *MASK)],
    "paged-decode/softcap_after_mask_window": [("mod-after-mask", *MASK, "measured:sums"), ("window-left", *MASK)],
    "paged-decode/split_dead_row_nan": [("dead-rows", "measured:dead-rows", "window", *MASK)],
    "paged-decode/split_kv_paged": [],
    "paged-decode/split_lse_input_dtype": [PRECISION],
    "paged-decode/whole_pages_softcap_scale": [("paged-stale-slots", "paged-seqlens-ignored", *MASK),
                                               ("flash-softcap-scale", "measured:scores")],
    # sdpa
    "sdpa/bwd_dk_scale": [("gradients-only", "measured:backward")],
    "sdpa/causal_mask_kv_aligned": [("causal-alignment", "lower-right", *MASK)],
    "sdpa/dead_rows_mask_grad": [("dead-rows", "measured:dead-rows"), ("grad-mask", "gradients-only")],
    "sdpa/float_mask_prescale": [("float-mask", "measured:bias")],
    "sdpa/gqa_repeat_heads": [("gqa", "measured:heads")],
    "sdpa/lse_saved_low_precision": [PRECISION],
    "sdpa/qk_in_input_dtype": [PRECISION],
    "sdpa/tiled_flash_sdpa": [],
    "sdpa/value_dim_scale_gqa_dv": [("Ev!=E", "measured:scores"), ("gqa", "gradients-only", "measured:backward")],
}
HELD4_ALSO: dict[str, set[str]] = {}

HELD4_SLIPS = {
    # (score * E ** -1/2 is score / (2E): the scale's line, or the measured scores)
    "level-1/attempt_a": [("scale-1/d", "unscaled", "measured:scores")],
    "level-1/attempt_b": [],
    # (the in-place max subtraction breaks the backward: PyTorch's own error, said in the raises line, names it)
    "level-1/attempt_c": [("raises", "in-place"), ("dtype",)],
    "level-1/attempt_d": [PRECISION],
    "level-1/attempt_e": [("diagonal", *MASK)],
    "level-2/attempt_a": [("causal-ignored", *MASK), ("scale-length",)],
    "level-2/attempt_b": [("softmax-dim", *SUMS)],
    "level-2/attempt_c": [],
    "level-2/attempt_d": [(*PRECISION, "float32-in-float64")],
    "level-2/attempt_e": [("mask-after-softmax", *SUMS)],
    "level-2/attempt_f": [("causal-reversed", *MASK)],
    "level-3/attempt_a": [("heads-split",)],
    "level-3/attempt_b": [],
    "level-3/attempt_c": [("scale-C",)],
    "level-3/attempt_d": [("no-proj",), ("mask-zero", *MASK)],
    "level-3/attempt_e": [("merge-view",)],
    "level-4/attempt_a": [("last-tile-dropped", "tail-dropped", *MASK), ("lse-no-max", "lse-shift", "lse-wrong")],
    "level-4/attempt_b": [("acc-not-rescaled", "online-not-rescaled")],
    "level-4/attempt_c": [(*PRECISION, "lse-dtype")],
    "level-4/attempt_d": [],
    "level-4/attempt_e": [("tile-mask", *MASK)],
    "level-4/attempt_f": [("rescale-inverted", "nan-everywhere")],
    "level-5/attempt_a": [("second-softmax",)],
    "level-5/attempt_b": [("dkdv-overwritten",), ("scale-missing",)],
    "level-5/attempt_c": [("ds-precedence",)],
    "level-5/attempt_d": [],
    "level-5/attempt_e": [(*PRECISION, "float32-in-float64")],
    "level-5/attempt_f": [("dq-overwritten",)],
    "level-6/attempt_a": [("whole-buffer",)],
    "level-6/attempt_b": [],
    "level-6/attempt_c": [("scale-1/d",), ("rope-k-only",)],
    "level-6/attempt_d": [("rope-q-only",)],
    "level-6/attempt_e": [("cache-not-written", "cache-dropped")],
    "level-7/attempt_a": [("pad-keys", *MASK)],
    "level-7/attempt_b": [("causal-reversed", *MASK), ("divide-axis", *SUMS)],
    "level-7/attempt_c": [],
    "level-7/attempt_d": [PRECISION],
    "level-7/attempt_e": [("bound-short", "diagonal-skipped", *MASK)],
    "level-7/attempt_f": [("lse-base2",)],
}
HELD4_SLIPS_ALSO: dict[str, set[str]] = {}

# held5: the fifth corpus written blind (kernels), labelled from its truths before its one run. Precision bugs are
# labelled with the models whose words say the step (not any precision cause: a model that names another step is a
# false line), and "precision lost, not placed"
UNPLACED = ("precision-unplaced",)
HELD5 = {
    # flash-attn
    # (ALiBi without |.|; causal with a right window > 0 lets the window's right side through)
    "flash-attn/fa2_alibi_causal_window": [("flash-alibi-signed", "measured:bias"), ("api-mask-ignored", *MASK)],
    "flash-attn/fa2_bottom_right_offset": [("api-top-left", "flash-alibi-offset", *MASK, "measured:bias")],
    "flash-attn/fa2_bwd_dp_bf16": [UNPLACED],
    # (the backward's query tiles started from a key tile's last key; the running sum stored in float16)
    "flash-attn/fa2_bwd_qrange_f16_rowsum": [("backward-mask", "measured:backward"),
                                             ("softmax-half", "scores-rounded", *UNPLACED)],
    "flash-attn/fa2_gqa_kv_expand": [("gqa", "measured:heads")],
    "flash-attn/fa2_half_pv": [("kv-half", "exp-half", *UNPLACED)],
    "flash-attn/fa2_lse_checkpoint_fp32": [("float32-in-float64", *UNPLACED)],
    "flash-attn/fa2_sliding_window_skip": [MASK],
    "flash-attn/fa2_softcap_backward": [("gradients-only", "measured:backward")],
    "flash-attn/fa2_tiled_reference": [],
    # flash-attn-varlen
    "flash-attn-varlen/varlen_bwd_mask_recompute": [("backward-mask", "gradients-only", "measured:backward")],
    "flash-attn-varlen/varlen_diag_offset": [("varlen-diagonal-from-max", *MASK, "measured:bias")],
    "flash-attn-varlen/varlen_empty_key_lse": [("lse-dead-rows", "lse-only", "measured:lse")],
    "flash-attn-varlen/varlen_exp2_tiled": [],
    "flash-attn-varlen/varlen_lse_base": [("lse-base2", "measured:lse")],
    "flash-attn-varlen/varlen_p_bf16": [("exp-half", "softmax-half", *UNPLACED)],
    "flash-attn-varlen/varlen_qk_fp32": [("float32-in-float64", *UNPLACED)],
    # (the soft-cap after ALiBi and the mask: hidden keys get -softcap; values read at h % Hkv, keys at h // G)
    "flash-attn-varlen/varlen_softcap_mask_order": [("mod-after-mask", *MASK, "measured:bias", "measured:sums"),
                                                    ("gqa", "measured:heads")],
    "flash-attn-varlen/varlen_window_dq_acc": [("flash-window-edge", *MASK), UNPLACED],
    # flex
    "flex/flex_acc_fp16": [UNPLACED],
    "flex/flex_block_size_pair": [("flex-block-size", *MASK)],
    "flex/flex_blocksparse_tiled": [],
    "flex/flex_empty_rows_gqa": [("dead-rows", "measured:dead-rows", "lse-dead-rows"), ("gqa", "measured:heads")],
    "flex/flex_full_blocks": [MASK],
    "flex/flex_gqa_block_head": [MASK],
    "flex/flex_lse_float32": [("float32-in-float64", *UNPLACED)],
    "flex/flex_mask_qidx_scoremod_bf16": [MASK, ("scores-rounded", *UNPLACED)],
    "flex/flex_score_mod_args": [("flex-mod-index", "measured:bias")],
    # paged-decode
    "paged-decode/paged_append_causal_offset": [("paged-new-kv-unseen", *MASK)],
    "paged-decode/paged_append_copy": [("paged-cache-not-written", "paged-cache-written")],
    "paged-decode/paged_append_slot_gqa": [(*CACHE, "paged-new-kv-wrong-slot", "paged-new-kv-stale"),
                                           ("gqa", "measured:heads")],
    "paged-decode/paged_decode_online": [],
    "paged-decode/paged_last_page_tail": [("paged-stale-slots", *MASK)],
    "paged-decode/paged_lse_half_log": [("lse-half", *UNPLACED)],
    "paged-decode/paged_page_count_fp16_scores": [("tail-dropped", *MASK), ("scores-rounded", *UNPLACED)],
    "paged-decode/paged_q_bf16_prescale": [("scale-folded", "scores-rounded", *UNPLACED)],
    "paged-decode/paged_softcap_scale_order": [("flash-softcap-scale", "measured:scores")],
    # sdpa
    "sdpa/sdpa_bf16_qk": [("scores-rounded", *UNPLACED)],
    "sdpa/sdpa_causal_alignment": [("causal-alignment", "lower-right", *MASK)],
    "sdpa/sdpa_default_scale": [("Ev!=E", "measured:scores")],
    "sdpa/sdpa_flash_tiled": [],
    "sdpa/sdpa_gqa_grad_fold": [("gqa", "gradients-only", "measured:backward")],
    "sdpa/sdpa_mask_and_causal": [("causal+mask", *MASK), UNPLACED],
    "sdpa/sdpa_mask_grad": [("grad-mask", "gradients-only")],
    "sdpa/sdpa_masked_rows_bias": [("dead-rows", "measured:dead-rows"), ("float-mask", "measured:bias")],
    "sdpa/sdpa_saved_out_bf16": [UNPLACED],
}
HELD5_ALSO: dict[str, set[str]] = {}

HELD5_SLIPS = {
    # (the max over the hidden keys too: NaN rows at large logits, where a hidden score dwarfs the visible ones)
    "level-1/attempt_a": [("max-before-mask", "measured:overflow")],
    "level-1/attempt_b": [],
    "level-1/attempt_c": [("scale-length", "measured:scores"), ("dtype",)],
    # (the softmax's sum taken through .item(): the forward right, dq and dk wrong)
    "level-1/attempt_d": [("gradients-only", "measured:backward")],
    "level-1/attempt_e": [("float32-in-float64", *UNPLACED)],
    "level-1/attempt_f": [("Ev!=E", "measured:scores")],
    "level-2/attempt_a": [("lower-right", "causal-alignment", *MASK)],
    "level-2/attempt_b": [("max-subtraction", "measured:overflow")],
    "level-2/attempt_c": [],
    "level-2/attempt_d": [("float32-in-float64", *UNPLACED)],
    "level-2/attempt_e": [],
    "level-2/attempt_f": [("softmax-dim", *SUMS), ("dtype",)],
    "level-3/attempt_a": [],
    "level-3/attempt_b": [("heads-split",)],
    "level-3/attempt_c": [("scale-C",)],
    "level-3/attempt_d": [],
    "level-3/attempt_e": [("heads-split",)],
    "level-3/attempt_f": [("softmax-dim", *SUMS), ("no-proj",)],
    "level-4/attempt_a": [("rescale-after-update", "acc-not-rescaled", "sum-not-rescaled")],
    "level-4/attempt_b": [("tile-mask", *MASK), ("acc-not-rescaled", "online-not-rescaled")],
    "level-4/attempt_c": [],
    "level-4/attempt_d": [("skip-bound", *MASK)],
    # (an empty last tile when block_k divides S: the amax over no key raises)
    "level-4/attempt_e": [("raises",)],
    "level-4/attempt_f": [("lse-dtype", "lse-half", *UNPLACED)],
    "level-5/attempt_a": [("dq-overwritten",)],
    "level-5/attempt_b": [("float32-in-float64", *UNPLACED)],
    # (D sliced by the key tile's range: another query's D, or a shape error; dk without its scale)
    "level-5/attempt_c": [("d-wrong", "raises"), ("scale-missing",)],
    "level-5/attempt_d": [],
    "level-5/attempt_e": [("lse-other-row", "raises")],
    "level-5/attempt_f": [("measured:overflow", "max-subtraction")],
    "level-6/attempt_a": [("whole-buffer",), ("rope-v",)],
    "level-6/attempt_b": [],
    # (the key cached before its rotation: every cached key unrotated)
    "level-6/attempt_c": [("rope-q-only",)],
    "level-6/attempt_d": [("float32-in-float64", *UNPLACED)],
    "level-6/attempt_e": [("softmax-dim", "unnormalised", *SUMS)],
    "level-6/attempt_f": [("cache-not-written",)],
    "level-7/attempt_a": [("pad-keys", *MASK)],
    "level-7/attempt_b": [("exp-half", *UNPLACED)],
    "level-7/attempt_c": [("pad-keys", *MASK), ("divide-axis", *SUMS, "raises")],
    "level-7/attempt_d": [("tile-mask", *MASK)],
    "level-7/attempt_e": [],
    "level-7/attempt_f": [("lse-base2",)],
}
HELD5_SLIPS_ALSO: dict[str, set[str]] = {}

# held5 graded again after its one run, on the judge changed since: pv-half (P V's result rounded to half: P and V
# cast down for their product, or the accumulator kept there) came after the labels above were set down, so they
# could not list it; its words are these three files' truths, and it is added to their labels here, and nowhere else
HELD5_AFTER = {**HELD5,
               "flash-attn/fa2_half_pv": [("pv-half", "kv-half", "exp-half", *UNPLACED)],
               "flex/flex_acc_fp16": [("pv-half", *UNPLACED)],
               "sdpa/sdpa_mask_and_causal": [("causal+mask", *MASK), ("pv-half", *UNPLACED)],
               # bwd-half (a backward's step rounded, placed by its pattern) came after them too
               "flash-attn/fa2_bwd_dp_bf16": [("bwd-half", *UNPLACED)],
               "flash-attn/fa2_lse_checkpoint_fp32": [("bwd-half", "float32-in-float64", *UNPLACED)],
               "sdpa/sdpa_saved_out_bf16": [("bwd-half", *UNPLACED)],
               "flash-attn-varlen/varlen_window_dq_acc": [("flash-window-edge", *MASK), ("bwd-half", *UNPLACED)]}
HELD5_AFTER_ALSO: dict[str, set[str]] = {}
# ... and its learners' files: d-key-tile (D sliced at the key tile's range) came after the labels were set down,
# and edge-off-by-one (an edge mask that lets key S through)
HELD5_SLIPS_AFTER = {**HELD5_SLIPS, "level-5/attempt_c": [("d-key-tile", "d-wrong", "raises"), ("scale-missing",)],
                     "level-7/attempt_c": [("edge-off-by-one", "pad-keys", *MASK), ("divide-axis", *SUMS, "raises")]}
HELD5_SLIPS_AFTER_ALSO: dict[str, set[str]] = {}

# held6: the sixth corpus written blind (tests/unseen/held6), labelled from its truths before its one run
HELD6 = {
    # flash-attn
    "flash-attn/fa_01": [("bwd-half", *UNPLACED)],  # dP = dO Vᵀ from operands cast to bfloat16
    "flash-attn/fa_02": [],
    "flash-attn/fa_03": [("lse-base2", "measured:lse")],
    # (the GQA backward's dk/dv summed as if tiled; the default scale a float32 rsqrt in float64)
    "flash-attn/fa_04": [("gqa", "gradients-only", "measured:backward"), ("float32-in-float64", *UNPLACED)],
    "flash-attn/fa_05": [("gradients-only", "measured:backward")],  # the soft-cap's derivative left out
    # (dq overwritten by each key tile's part; ALiBi's distance signed)
    "flash-attn/fa_06": [("gradients-only", "measured:backward"), ("flash-alibi-signed", "measured:bias")],
    "flash-attn/fa_07": [MASK],  # a window's first key tile placed from the query tile's last row
    "flash-attn/fa_08": [("flash-softcap-scale", "measured:scores")],
    # (the running max and sum stored in float32 for float64 inputs; the lse the backward reads with them)
    "flash-attn/fa_09": [("float32-in-float64", "bwd-half", *UNPLACED)],
    # flash-attn-varlen
    # (ALiBi added before the soft-cap; the window's left edge off by one)
    "flash-attn-varlen/varlen_01": [("measured:bias", "measured:scores"), ("flash-window-edge", *MASK)],
    "flash-attn-varlen/varlen_02": [("float32-in-float64", "bwd-half", *UNPLACED)],  # the lse in float32
    "flash-attn-varlen/varlen_03": [("api-mask-ignored", *MASK)],  # causal with a right window > 0: its right side
    "flash-attn-varlen/varlen_04": [("float32-in-float64", *UNPLACED)],  # ALiBi's bias in float32
    "flash-attn-varlen/varlen_05": [MASK],  # each sequence's keys read at cu_seqlens_q's offsets
    "flash-attn-varlen/varlen_06": [("scores-rounded", *UNPLACED)],  # Q Kᵀ from q and k cast to float16
    "flash-attn-varlen/varlen_07": [],
    "flash-attn-varlen/varlen_08": [("lse-dead-rows", "lse-only", "measured:lse")],
    "flash-attn-varlen/varlen_09": [MASK],  # the last key tile placed from the query tile's first row
    # (the backward without the soft-cap's derivative; the output's accumulator in float32 for float64 inputs)
    "flash-attn-varlen/varlen_10": [("gradients-only", "measured:backward"),
                                    ("float32-in-float64", "bwd-half", *UNPLACED)],
    # flex
    # (score_mod on q.k before the scale; the lse of a row with no key 0)
    "flex/flex_01": [("measured:scores", "measured:bias", "flash-softcap-scale"),
                     ("lse-dead-rows", "lse-only", "measured:lse")],
    "flex/flex_02": [("flex-block-size", *MASK)],
    "flex/flex_03": [("float32-in-float64", *UNPLACED)],  # log2(e) a float32 constant
    "flex/flex_04": [("flex-mod-kv-head", "measured:bias", *MASK)],
    "flex/flex_05": [],
    "flex/flex_06": [("softmax-half", *UNPLACED)],  # each block's row sums taken in float16
    # (full blocks visited twice, as partial and as full; the kv head h % Hkv)
    "flex/flex_07": [(*MASK, "measured:bias", "measured:sums"), ("gqa", "measured:heads")],
    "flex/flex_08": [MASK],  # mask_mod on block-local indices
    "flex/flex_09": [MASK],  # the block mask's batch 0 for every batch
    # paged-decode
    "paged-decode/paged_01": [("paged-stale-slots", "paged-seqlens-ignored", *MASK)],
    # (no guard on the running max: NaN rows; the output put back with reshape, scrambling heads and queries)
    "paged-decode/paged_02": [(*MASK, "measured:dead-rows"), ("measured:heads", *MASK)],
    "paged-decode/paged_03": [(*CACHE, "paged-new-kv-stale")],  # appended as if the pages were consecutive
    "paged-decode/paged_04": [MASK],  # the mask reads a key's slot in its page, not its position
    "paged-decode/paged_05": [],
    "paged-decode/paged_06": [("paged-new-kv-unseen", *MASK)],  # queries placed by the length before the append
    "paged-decode/paged_07": [("float32-in-float64", *UNPLACED)],  # log(l) in float32
    "paged-decode/paged_08": [("float32-in-float64", *UNPLACED)],  # tanh in float32
    # (the new keys written into clones of the caches; softcap * tanh(s))
    "paged-decode/paged_09": [("paged-cache-not-written", "paged-cache-written"), ("measured:scores",)],
    # sdpa
    "sdpa/sdpa_01": [("causal-alignment", "lower-right", *MASK)],
    "sdpa/sdpa_02": [],
    # (the running sum not rescaled; the default scale 1/sqrt(Ev))
    "sdpa/sdpa_03": [("online-not-rescaled", "measured:sums", "measured:bias", "measured:scores", *MASK),
                     ("Ev!=E", "measured:scores")],
    "sdpa/sdpa_04": [("pv-half", "kv-half", "exp-half", *UNPLACED)],  # P V in bfloat16
    "sdpa/sdpa_05": [("bwd-half", "float32-in-float64", *UNPLACED)],  # D = rowsum(dO O) in float32
    "sdpa/sdpa_06": [("grad-mask", "gradients-only")],
    # (the backward's NaN where a row sees no key; a bool mask replacing causal instead of joining it)
    "sdpa/sdpa_07": [("dead-rows", "measured:dead-rows", "gradients-only", "measured:backward"),
                     ("causal+mask", *MASK)],
    "sdpa/sdpa_08": [("gqa", "measured:heads")],
    "sdpa/sdpa_09": [("dead-rows", "measured:dead-rows")],  # a bool mask as finfo.min: empty rows the mean of V
}
HELD6_ALSO: dict[str, set[str]] = {}

# ... and its learners' files, labelled the same way before their one run
HELD6_SLIPS = {
    "level-1/attempt_a": [],
    "level-1/attempt_b": [("diagonal", *MASK)],  # j >= i hidden: each query loses its own key
    "level-1/attempt_c": [("max-subtraction", "measured:overflow")],  # scores[0] subtracted, not the max
    "level-1/attempt_d": [("scale-1/d", "measured:scores")],
    "level-1/attempt_e": [("dtype",)],
    # (the scale by sqrt(Ev); the mask aligned bottom-right)
    "level-1/attempt_f": [("Ev!=E", "measured:scores"), ("lower-right", "causal-alignment", *MASK)],
    "level-2/attempt_a": [],
    "level-2/attempt_b": [("softmax-dim", *SUMS)],
    "level-2/attempt_c": [("square-assumed", "raises")],  # the mask built (L, L): raises where L != S
    "level-2/attempt_d": [("mask-zero", *MASK)],  # scores * ~mask: hidden scores 0
    "level-2/attempt_e": [("float32-in-float64", *UNPLACED)],  # sqrt(E) a float32 tensor
    # (no max subtracted; the mask aligned bottom-right)
    "level-2/attempt_f": [("max-subtraction", "measured:overflow"), ("lower-right", "causal-alignment", *MASK)],
    "level-3/attempt_a": [],
    "level-3/attempt_b": [("heads-split",)],
    "level-3/attempt_c": [("merge-view",)],
    "level-3/attempt_d": [("scale-C",)],
    "level-3/attempt_e": [("float32-in-float64", *UNPLACED)],  # the softmax in float32 in a float64 module
    # (tril(diagonal=1): one key ahead; .view on the transposed y raises where H > 1)
    "level-3/attempt_f": [("peeks-ahead", *MASK), ("raises",)],
    "level-4/attempt_a": [],
    "level-4/attempt_b": [("tile-mask", *MASK)],
    "level-4/attempt_c": [("acc-not-rescaled", "online-not-rescaled")],
    "level-4/attempt_d": [("lse-no-max", "lse-shift", "measured:lse")],
    "level-4/attempt_e": [("float32-in-float64", *UNPLACED)],  # the lse rounded to float32 for float64 inputs
    # (the causal skip tested against the tile's first query; the last partial key tile dropped)
    "level-4/attempt_f": [("skip-bound", *MASK), ("last-tile-dropped", "tail-dropped", *MASK)],
    "level-5/attempt_a": [],
    "level-5/attempt_b": [("d-wrong",)],  # D = rowsum(P dP) over one key tile
    "level-5/attempt_c": [("scale-missing",)],
    "level-5/attempt_d": [("ds-precedence",)],
    "level-5/attempt_e": [("float32-in-float64", "bwd-half", *UNPLACED)],  # D in float32
    # (exp(s) / exp(lse) overflowing; dq overwritten by each key tile)
    "level-5/attempt_f": [("measured:overflow", "max-subtraction"), ("dq-overwritten",)],
    "level-6/attempt_a": [],
    "level-6/attempt_b": [("before-write",)],  # the cache read up to pos - 1: the token's own key left out
    "level-6/attempt_c": [("whole-buffer",)],
    "level-6/attempt_d": [("slot-behind",)],
    "level-6/attempt_e": [("float32-in-float64", *UNPLACED)],  # the key rotated in float32
    "level-6/attempt_f": [("rope-k-only",), ("unscaled",)],  # q not rotated; no 1/sqrt(d)
    "level-7/attempt_a": [],
    "level-7/attempt_b": [("bound-short", *MASK)],
    "level-7/attempt_c": [("pad-keys", *MASK)],
    "level-7/attempt_d": [("sum-not-rescaled", "online-not-rescaled")],
    "level-7/attempt_e": [("lse-dtype", "lse-half", *UNPLACED)],
    # (the lse in base 2; the edge mask against L, not S)
    "level-7/attempt_f": [("lse-base2",), ("pad-keys", "square-assumed", *MASK)],
}
HELD6_SLIPS_ALSO: dict[str, set[str]] = {}

# held7: the seventh corpus written blind (tests/unseen/held7), labelled from its truths before its one run
HELD7 = {
    # flash-attn
    "flash-attn/fa_01": [("api-top-left", "flash-alibi-offset", *MASK, "measured:bias")],  # queries placed top-left
    "flash-attn/fa_02": [("measured:bias", "measured:scores")],  # ALiBi before the soft-cap
    "flash-attn/fa_03": [("softmax-half", "exp-half", *UNPLACED)],  # the softmax's sum in bfloat16
    "flash-attn/fa_04": [("gqa", "gradients-only", "measured:backward")],  # dk/dv summed as if tiled
    # (causal drops a left window; tanh in float32 for float64 inputs)
    "flash-attn/fa_05": [MASK, ("float32-in-float64", *UNPLACED)],
    "flash-attn/fa_06": [("float32-in-float64", *UNPLACED)],  # log2(e) a float32 constant
    "flash-attn/fa_07": [],
    "flash-attn/fa_08": [("flash-alibi-signed", "measured:bias")],
    "flash-attn/fa_09": [("flash-window-edge", *MASK), ("lse-base2", "measured:lse")],  # left edge off by one; log2
    # flash-attn-varlen
    "flash-attn-varlen/varlen_01": [("lse-dead-rows", "lse-only", "measured:lse")],
    "flash-attn-varlen/varlen_02": [("float32-in-float64", *UNPLACED)],  # logsumexp of float32 scores
    "flash-attn-varlen/varlen_03": [("varlen-diagonal-from-max", *MASK, "measured:bias")],
    # (a sequence's first query given to the one before: searchsorted's side; the kv heads tiled)
    "flash-attn-varlen/varlen_04": [("varlen-queries-shifted", *MASK), ("gqa", "measured:heads")],
    # (the soft-cap on unscaled scores; the backward's D in float32 for float64 inputs)
    "flash-attn-varlen/varlen_05": [("flash-softcap-scale", "measured:scores"),
                                    ("bwd-half", "float32-in-float64", *UNPLACED)],
    "flash-attn-varlen/varlen_06": [("gradients-only", "measured:backward")],  # the soft-cap's derivative left out
    "flash-attn-varlen/varlen_07": [],
    "flash-attn-varlen/varlen_08": [("lse-half", *UNPLACED)],  # the lse buffer in bfloat16
    "flash-attn-varlen/varlen_09": [("flash-alibi-one-row", "measured:bias")],  # (B, H) slopes: row 0 for all
    # flex
    "flex/flex_01": [("measured:bias", "measured:scores", *MASK)],  # the mods' query index local to its block
    "flex/flex_02": [("float32-in-float64", *UNPLACED)],
    "flex/flex_03": [],
    # (the kv block size read from BLOCK_SIZE[0]; the mods' query index aligned bottom-right)
    "flex/flex_04": [("flex-block-size", *MASK), ("measured:bias", "measured:scores", *MASK)],
    # (the mods given the kv head; the lse buffer in the inputs' dtype)
    "flex/flex_05": [("flex-mod-kv-head", "measured:bias", *MASK), ("lse-half", *UNPLACED)],
    "flex/flex_06": [("float32-in-float64", *UNPLACED)],  # score_mod's result rounded to float32
    "flex/flex_07": [("dead-rows", "measured:dead-rows", "lse-dead-rows")],  # hidden keys finfo.min
    "flex/flex_08": [MASK],  # the full blocks left out
    "flex/flex_09": [("measured:scores", "measured:bias", "flash-softcap-scale")],  # score_mod before the scale
    # paged-decode
    "paged-decode/paged_01": [("softmax-half", "pv-half", *UNPLACED)],  # l and acc in bfloat16
    "paged-decode/paged_02": [(*MASK, "measured:bias")],  # queries placed by the cache's old length
    "paged-decode/paged_03": [("tail-dropped", *MASK)],  # pages counted with //
    # (causal drops a left window; the four splits sized with //: the last keys dropped)
    "paged-decode/paged_04": [MASK, ("tail-dropped", *MASK)],
    "paged-decode/paged_05": [("measured:sums", "measured:bias", *MASK)],  # empty splits merged with lse 0
    # (the appended keys not attended; float32 for float64 inputs)
    "paged-decode/paged_06": [("paged-new-kv-unseen", *MASK), ("float32-in-float64", *UNPLACED)],
    "paged-decode/paged_07": [(*CACHE, "paged-new-kv-stale")],  # appended into the token's index's page
    "paged-decode/paged_08": [],
    "paged-decode/paged_09": [("float32-in-float64", *UNPLACED)],  # the splits' outputs in float32
    # sdpa
    # (a float mask added before the scale; the mask in float32 for float64 inputs)
    "sdpa/sdpa_01": [("float-mask", "measured:bias"), ("float32-in-float64", *UNPLACED)],
    "sdpa/sdpa_02": [("grad-mask", "gradients-only")],
    "sdpa/sdpa_03": [("causal-alignment", "lower-right", *MASK)],
    "sdpa/sdpa_04": [("dead-rows", "measured:dead-rows")],  # NaN where a row sees no key
    "sdpa/sdpa_05": [("pv-half", *UNPLACED)],  # the accumulator in bfloat16
    "sdpa/sdpa_06": [],
    # (a bool mask replacing causal; the default scale 1/sqrt(Ev))
    "sdpa/sdpa_07": [("causal+mask", *MASK), ("Ev!=E", "measured:scores")],
    "sdpa/sdpa_08": [("float32-in-float64", *UNPLACED)],
    "sdpa/sdpa_09": [("gqa", "measured:heads")],
    "sdpa/sdpa_10": [("bwd-half", *UNPLACED)],  # the lse saved for the backward in bfloat16
}
# Added after held7's one run, each checked against its file: paged_05's empty splits enter the merge with lse 0, so
# a row that sees no key (an empty cache) gets lse log 4, not -inf -- the line said of it is true; its truth's words
# left it out.
HELD7_ALSO: dict[str, set[str]] = {"paged-decode/paged_05": {"lse-dead-rows"}}
# held7 after held10's run: the key made then for the full blocks never read, added to the label of held7's flex_08,
# whose bug it is
HELD7_AFTER = {**HELD7, "flex/flex_08": [("flex-full-dropped", *HELD7["flex/flex_08"][0])]}
HELD7_AFTER_ALSO = HELD7_ALSO

# ... and its learners' files, labelled the same way before their one run
HELD7_SLIPS = {
    "level-1/attempt_a": [("diagonal", *MASK)],  # j >= i hidden
    "level-1/attempt_b": [],
    "level-1/attempt_c": [("max-subtraction", "measured:overflow")],
    "level-1/attempt_d": [("softmax-half", "scores-rounded", "exp-half", *UNPLACED)],  # bfloat16 work
    "level-1/attempt_e": [("lower-right", "causal-alignment", *MASK), ("dtype",)],
    "level-1/attempt_f": [("raises", "square-assumed")],  # key i indexed past S where L > S
    "level-2/attempt_a": [("softmax-dim", *SUMS)],
    "level-2/attempt_b": [],
    "level-2/attempt_c": [("square-assumed", "raises")],  # the mask built (S, L)
    "level-2/attempt_d": [("scores-rounded", "softmax-half", *UNPLACED)],  # the scores cast to bfloat16 first
    # (the scale by sqrt(Ev); masked_fill's result thrown away: no mask)
    "level-2/attempt_e": [("Ev!=E", "measured:scores"), ("causal-ignored", *MASK)],
    "level-2/attempt_f": [("raises",)],  # the sum without keepdim: a shape error on every call
    "level-3/attempt_a": [("heads-split",)],
    "level-3/attempt_b": [],
    "level-3/attempt_c": [("scale-C",)],
    "level-3/attempt_d": [("merge-view",)],
    "level-3/attempt_e": [("no-proj",), ("raises",)],  # no projection; a float mask to masked_fill raises
    "level-3/attempt_f": [("causal-reversed", *MASK)],  # torch.where's branches swapped
    "level-4/attempt_a": [("acc-not-rescaled", "online-not-rescaled")],
    "level-4/attempt_b": [],
    "level-4/attempt_c": [("lse-no-max", "lse-shift", "measured:lse")],
    "level-4/attempt_d": [("float32-in-float64", *UNPLACED)],  # float32 work for float64 inputs
    "level-4/attempt_e": [("tile-mask", *MASK), ("lse-dtype", "lse-half", *UNPLACED)],  # tile mask; lse in bf16
    "level-4/attempt_f": [("no-skip",)],
    "level-5/attempt_a": [("ds-precedence",)],
    "level-5/attempt_b": [],
    "level-5/attempt_c": [("dv-not-transposed", "raises")],  # P @ dO for dv
    "level-5/attempt_d": [("float32-in-float64", "bwd-half", *UNPLACED)],  # D in float32
    # (the lse slice without its trailing dim: raises; dk without the scale)
    "level-5/attempt_e": [("raises", "lse-other-row"), ("scale-missing",)],
    "level-5/attempt_f": [("dq-overwritten",)],
    "level-6/attempt_a": [("before-write",)],  # slots 0 .. pos - 1: the token's own key left out
    "level-6/attempt_b": [],
    "level-6/attempt_c": [("rope-q-only",)],  # the key cached before its rotation
    "level-6/attempt_d": [("float32-in-float64", *UNPLACED)],  # the softmax in float32
    "level-6/attempt_e": [("scale-1/d",), ("dtype",)],
    "level-6/attempt_f": [("whole-buffer",)],
    "level-7/attempt_a": [("pad-keys", *MASK)],
    "level-7/attempt_b": [],
    "level-7/attempt_c": [("bound-short", *MASK)],
    "level-7/attempt_d": [("scores-rounded", "softmax-half", *UNPLACED)],  # the masked scores cast to half
    # (acc / l_i along the wrong axis; a base-2 max with a natural log in the lse)
    "level-7/attempt_e": [("divide-axis", *SUMS, "raises"), ("lse-base2", "measured:lse")],
    "level-7/attempt_f": [("stale-max", "max-not-carried")],  # the running max never updated
}
# Added after: the lab's key for attempt_f's very slip (the running max never updated), made after its labels.
HELD7_SLIPS_ALSO: dict[str, set[str]] = {"level-7/attempt_f": {"max-never-updated"}}
HELD7_SLIPS_AFTER = HELD7_SLIPS  # (the same labels: see HELD7_AFTER)
HELD7_SLIPS_AFTER_ALSO = HELD7_SLIPS_ALSO

# held8: written blind by two helpers (tests/unseen/held8/README.md). Its kernels' helper listed each bug in one
# line in its reply, which was read: held8 is a development corpus, labelled here before its first run; the
# untouched measure is held9.
HELD8 = {
    # flash-attn
    # (GQA by repeat; the last partial key tile dropped)
    "flash-attn/fa_01": [("gqa", "measured:heads"), ("tail-dropped", *MASK)],
    "flash-attn/fa_02": [("flash-window-edge", "window-left", *MASK)],  # the left edge exclusive
    "flash-attn/fa_03": [("gradients-only", "softcap", "measured:backward")],  # the soft-cap's derivative left out
    "flash-attn/fa_04": [("float32-in-float64", "kv-half", *UNPLACED)],  # the ALiBi bias in bfloat16
    "flash-attn/fa_05": [("flash-alibi-offset", "alibi", "measured:bias")],  # ALiBi's distance top-left
    # ((B, H) slopes: batch 0's; causal keeps an explicit right window)
    "flash-attn/fa_06": [("flash-alibi-one-row", "alibi", "measured:bias"), ("window-right", "window", *MASK)],
    "flash-attn/fa_07": [("bwd-half", "float32-in-float64", *UNPLACED)],  # dq accumulated in float32
    "flash-attn/fa_08": [("measured:bias", "measured:scores")],  # ALiBi before the soft-cap
    "flash-attn/fa_09": [],
    # flash-attn-varlen
    "flash-attn-varlen/varlen_01": [("dead-rows", "gradients-only", "measured:dead-rows", "measured:backward")],
    "flash-attn-varlen/varlen_02": [],
    # (NaN from the rescale before a row's first key; D per key tile)
    "flash-attn-varlen/varlen_03": [("dead-rows", "measured:dead-rows", "online-not-rescaled", *MASK),
                                    ("gradients-only", "measured:backward")],
    "flash-attn-varlen/varlen_04": [("varlen-top-left", "api-top-left", *MASK, "L!=S")],  # the offset clamped at 0
    "flash-attn-varlen/varlen_05": [("lse-dead-rows", "lse-only", "measured:lse")],  # log(total_k) for empty rows
    "flash-attn-varlen/varlen_06": [("varlen-keys-early", "varlen-keys-late", *MASK, "measured:bias")],  # cu_q offsets
    # (the soft-cap on unscaled q.k; v sliced with the query offsets)
    "flash-attn-varlen/varlen_07": [("flash-softcap-scale", "softcap", "measured:scores"),
                                    ("varlen-keys-early", "varlen-keys-late", "varlen-keys-overrun", *MASK)],
    "flash-attn-varlen/varlen_08": [("float32-in-float64", *UNPLACED)],  # the ALiBi bias in float32
    "flash-attn-varlen/varlen_09": [("exp-half", "softmax-half", "float32-in-float64", *UNPLACED)],  # exp in float16
    # flex
    "flex/flex_01": [("float32-in-float64", *UNPLACED)],
    "flex/flex_02": [("flex-block-size", *MASK)],  # BLOCK_SIZE unpacked swapped
    # (score_mod's kv_idx local to a chunk; NaN from a fully masked chunk)
    "flex/flex_03": [("flex-mod-index", "measured:bias", "measured:scores", *MASK),
                     ("dead-rows", "measured:dead-rows")],
    "flex/flex_04": [],
    "flex/flex_05": [("flash-softcap-scale", "measured:scores", "measured:bias")],  # score_mod before the scale
    "flex/flex_06": [("flex-partial-as-full", "flex-full-only", *MASK)],  # the full blocks hidden
    "flex/flex_07": [("softmax-half", "float32-in-float64", *UNPLACED)],  # the row sum in float16
    "flex/flex_08": [("flex-mod-kv-head", "measured:bias", *MASK)],  # score_mod given the kv head
    # (one padding block entry read; empty rows' lse clamped finite)
    "flex/flex_09": [(*MASK, "flex-partial-as-full"), ("lse-dead-rows", "lse-only", "measured:lse")],
    # paged-decode
    "paged-decode/paged_01": [("paged-top-left", *MASK, "measured:bias")],  # queries placed by the old length
    "paged-decode/paged_02": [],
    "paged-decode/paged_03": [("paged-stale-slots", *MASK)],  # kpos <= S
    "paged-decode/paged_04": [("kv-half", "float32-in-float64", *UNPLACED)],  # the keys through float16
    # (the merge weighted by l alone; a bfloat16 cache copied, so the append is lost)
    "paged-decode/paged_05": [("measured:sums", "measured:bias", *MASK),
                              ("paged-cache-not-written", "paged-new-kv-stale", *CACHE)],
    "paged-decode/paged_06": [("lse-only", "measured:lse")],  # lse reshaped, not transposed
    "paged-decode/paged_07": [("float32-in-float64", *UNPLACED)],  # the merge's logsumexp in float32
    "paged-decode/paged_08": [("gqa", "measured:heads"), ("lse-base2", "measured:lse")],  # GQA by repeat; base 2
    "paged-decode/paged_09": [(*CACHE, "paged-new-kv-wrong-slot", "paged-new-kv-stale")],  # pages taken contiguous
    # sdpa
    "sdpa/sdpa_01": [("scores-rounded", "kv-half", "float32-in-float64", *UNPLACED)],  # q.kᵀ from bfloat16 operands
    "sdpa/sdpa_02": [("gqa", "measured:heads")],
    "sdpa/sdpa_03": [],
    # (a float mask scaled with the scores; is_causal dropped beside a mask)
    "sdpa/sdpa_04": [("float-mask", "measured:bias"), ("causal+mask", "causal-ignored", *MASK)],
    "sdpa/sdpa_05": [("causal-alignment", "lower-right", *MASK)],
    "sdpa/sdpa_06": [("bwd-half", "float32-in-float64", *UNPLACED)],  # D in float32
    "sdpa/sdpa_07": [("grad-mask", "gradients-only")],  # the mask's gradient times the scale
    "sdpa/sdpa_08": [("pv-half", "float32-in-float64", *UNPLACED)],  # P and V through bfloat16
    # (a float mask's -inf row: NaN; the output reshaped with E)
    "sdpa/sdpa_09": [("dead-rows", "measured:dead-rows"), ("Ev!=E", "raises", "shape")],
    "sdpa/sdpa_10": [("Ev!=E", "measured:scores")],  # the default scale from Ev
}
HELD8_ALSO: dict[str, set[str]] = {}
# held8's kernels after its first run: the causes this round made for three of its bugs, which did not exist when the
# labels were set (an ALiBi bias built in bfloat16; queries placed by the cache's length before the append), added to
# those files' labels, as HELD5_AFTER did (held8/README.md)
HELD8_AFTER = {**HELD8,
               "flash-attn/fa_04": [("bias-half", *HELD8["flash-attn/fa_04"][0])],
               "paged-decode/paged_01": [("paged-queries-before-append", *HELD8["paged-decode/paged_01"][0])],
               # (block lists read one entry past their counts: the key made at held9 for lists read to their end,
               # given that variant after)
               "flex/flex_09": [("flex-counts-ignored", *HELD8["flex/flex_09"][0]), HELD8["flex/flex_09"][1]],
               # (the full blocks never read: the key made after held10's run for its flex_07)
               "flex/flex_06": [("flex-full-dropped", *HELD8["flex/flex_06"][0])],
               # (pages merged by their sums alone: the key made after held10's run)
               "paged-decode/paged_05": [("split-max-dropped", *HELD8["paged-decode/paged_05"][0]),
                                         HELD8["paged-decode/paged_05"][1]]}
HELD8_AFTER_ALSO: dict[str, set[str]] = {}

# held8's learners' files: their helper listed each slip in a line in its reply (read): a development corpus too,
# labelled here before its first run.
HELD8_SLIPS = {
    "level-1/attempt_a": [],
    "level-1/attempt_b": [("Ev!=E", "scale-length", "measured:scores")],  # scaled by 1/sqrt(Ev)
    "level-1/attempt_c": [("float32-in-float64", "softmax-half", *UNPLACED)],  # the softmax in float32
    "level-1/attempt_d": [("lower-right", "causal-alignment", *MASK)],
    # (the max taken before the mask: NaN on large scores; the output in float32 for bfloat16)
    "level-1/attempt_e": [("max-before-mask", "max-subtraction", "measured:overflow"), ("dtype",)],
    "level-1/attempt_f": [("autograd", "gradients-only", "measured:backward")],  # torch.tensor cuts the graph
    "level-2/attempt_a": [("square-assumed", "raises")],  # the mask (L, L)
    "level-2/attempt_b": [("softmax-dim", *SUMS)],  # softmax(dim=2) on 4-D inputs
    "level-2/attempt_c": [("scores-rounded", "softmax-half", *UNPLACED)],  # the scores in bfloat16
    "level-2/attempt_d": [("mask-after-softmax", *SUMS), ("dtype",)],
    "level-2/attempt_e": [],
    "level-2/attempt_f": [("diagonal", *MASK)],  # j >= i hidden
    "level-3/attempt_a": [("heads-split",)],
    "level-3/attempt_b": [],
    "level-3/attempt_c": [("scale-C",)],
    "level-3/attempt_d": [("merge-view", "raises"), ("no-proj",)],
    "level-3/attempt_e": [("softmax-dim", *SUMS)],
    "level-3/attempt_f": [("mask-nan", "dead-rows", "measured:dead-rows", "nan-everywhere")],  # 0 * -inf
    "level-4/attempt_a": [("rescale-after-update", "acc-not-rescaled", "online-not-rescaled")],
    "level-4/attempt_b": [("softmax-half", "lse-half", *UNPLACED)],  # the running sum in bfloat16
    # (the skip by the tile's first query; the lse in bfloat16)
    "level-4/attempt_d": [("skip-first-query", "tile-skip", *MASK), ("lse-dtype", "lse-half", *UNPLACED)],
    "level-4/attempt_c": [],
    "level-4/attempt_e": [("no-skip", "work")],  # the skip after the score product
    "level-4/attempt_f": [("raises",)],  # squeeze() on a one-row tile
    "level-5/attempt_a": [("d-key-tile", "d-wrong", "raises")],  # D sliced by the key tile
    "level-5/attempt_b": [("dq-overwritten",)],
    "level-5/attempt_c": [("raises", "lse-other-row"), ("scale-missing",)],  # lse not unsqueezed; dk unscaled
    "level-5/attempt_d": [],
    "level-5/attempt_e": [("float32-in-float64", "bwd-half", *UNPLACED)],  # the accumulators in float32
    "level-5/attempt_f": [("ds-precedence",)],
    "level-6/attempt_a": [("whole-buffer",)],
    "level-6/attempt_b": [],
    "level-6/attempt_c": [("float32-in-float64", *UNPLACED)],
    "level-6/attempt_d": [("rope-offset", "no-rope", "rope-q-only")],  # keys cached unrotated, all turned at pos
    "level-6/attempt_e": [("rope-q-only",), ("dtype",)],  # the unrotated key cached; float32 for bfloat16
    "level-6/attempt_f": [("before-write",)],  # the token's own key left out
    "level-7/attempt_a": [("mask-zero", *MASK)],
    "level-7/attempt_b": [],
    "level-7/attempt_c": [("pv-half", *UNPLACED)],  # P in float16 before P V
    "level-7/attempt_d": [("lse-base2", "measured:lse"), ("edge-off-by-one", "pad-keys", *MASK)],
    "level-7/attempt_e": [("acc-not-rescaled", "divide-axis", *SUMS, "raises")],  # alpha without [:, None]
    "level-7/attempt_f": [("pad-keys", *MASK)],
}
HELD8_SLIPS_ALSO: dict[str, set[str]] = {}
# held8's learners' files after their first run (held8/README.md): the lab's own key for two slips themselves, which
# the labels' words missed -- "skip-bound" says the causal skip compares the tile's first query, "exp-half" that the
# weights P were rounded to half precision before P V (the learner's p.to(float16))
HELD8_SLIPS_AFTER = {**HELD8_SLIPS,
                     "level-4/attempt_d": [("skip-bound", *HELD8_SLIPS["level-4/attempt_d"][0]),
                                           HELD8_SLIPS["level-4/attempt_d"][1]],
                     "level-7/attempt_c": [("exp-half", *HELD8_SLIPS["level-7/attempt_c"][0])]}
HELD8_SLIPS_AFTER_ALSO: dict[str, set[str]] = {}

# held9: the ninth corpus, written blind by two helpers whose replies said nothing of the bugs; labelled here from the
# truths' words before the judge or the lab ran on any of its files, and run once (tests/unseen/held9/README.md).
HELD9 = {
    # flash-attn
    "flash-attn/fa_01": [("lse-dead-rows", "lse-only", "measured:lse")],  # a row with no key: lse log(S)
    "flash-attn/fa_02": [],
    # ((B, H) slopes read as row 0; GQA h % Hkv)
    "flash-attn/fa_03": [("flash-alibi-one-row", "alibi", "measured:bias"), ("gqa", "measured:heads")],
    "flash-attn/fa_04": [("gradients-only", "softcap", "measured:backward")],  # the soft-cap's derivative left out
    # (the last L % 64 query rows never computed)
    "flash-attn/fa_05": [("tail-dropped", *MASK, "dead-rows", "measured:dead-rows")],
    # (causal keeps an explicit right window; float32 out for bfloat16)
    "flash-attn/fa_06": [("window-right", "window", *MASK), ("dtype",)],
    "flash-attn/fa_07": [("float32-in-float64", *UNPLACED)],  # log2(e) a float32 tensor
    "flash-attn/fa_08": [("bias-half", "float32-in-float64", *UNPLACED)],  # the ALiBi bias in float16
    "flash-attn/fa_09": [("flash-alibi-offset", "alibi", "measured:bias")],  # ALiBi's distance top-left
    # flash-attn-varlen
    "flash-attn-varlen/varlen_01": [("bwd-half", "float32-in-float64", *UNPLACED)],  # dS, K, Q in bfloat16 (backward)
    # (lse 0 for a sequence with no keys; the soft-cap on unscaled q.k)
    "flash-attn-varlen/varlen_02": [("lse-dead-rows", "lse-only", "measured:lse"),
                                    ("flash-softcap-scale", "softcap", "measured:scores")],
    "flash-attn-varlen/varlen_03": [("measured:bias", "measured:scores")],  # ALiBi before the soft-cap
    "flash-attn-varlen/varlen_04": [("float32-in-float64", "lse-half", *UNPLACED)],  # the lse cast to float32
    "flash-attn-varlen/varlen_05": [("varlen-diagonal-from-max", *MASK, "measured:bias")],
    "flash-attn-varlen/varlen_06": [],
    # (the backward's scores aligned top-left)
    "flash-attn-varlen/varlen_07": [("gradients-only", "backward-mask", "measured:backward")],
    "flash-attn-varlen/varlen_08": [("gqa", "measured:heads")],
    # (a sequence's first row given to the one before: searchsorted; the window's left edge strict)
    "flash-attn-varlen/varlen_09": [("varlen-queries-shifted", "varlen-keys-overrun", "varlen-keys-early",
                                     "varlen-keys-late", *MASK),
                                    ("flash-window-edge", "window-left", *MASK)],
    # flex
    "flex/flex_01": [],
    "flex/flex_02": [("pv-half", "float32-in-float64", *UNPLACED)],  # the accumulator in bfloat16
    # (the chunks' merge weights in float16)
    "flex/flex_03": [("softmax-half", "exp-half", "pv-half", "lse-half", "float32-in-float64", *UNPLACED)],
    "flex/flex_04": [("flex-mod-kv-head", "measured:bias", *MASK)],  # the mods given the kv head
    "flex/flex_05": [("flex-block-size", *MASK)],  # the kv block size for both
    "flex/flex_06": [("gqa", "measured:heads"), (*MASK,)],  # GQA by repeat; the full blocks never read
    "flex/flex_07": [(*MASK,)],  # the blocks' counts ignored: padding entries read
    "flex/flex_08": [("lse-base2", "measured:lse"), ("dead-rows", "measured:dead-rows")],  # base 2; NaN empty rows
    "flex/flex_09": [("flash-softcap-scale", "measured:scores", "measured:bias")],  # score_mod before the scale
    # paged-decode
    "paged-decode/paged_01": [],
    "paged-decode/paged_02": [("lse-half", "softmax-half", "float32-in-float64", *UNPLACED)],  # pages' lse in bf16
    "paged-decode/paged_03": [("paged-cache-not-written", *CACHE)],  # the new keys written into copies
    "paged-decode/paged_04": [("paged-stale-slots", *MASK)],  # the last page read whole
    "paged-decode/paged_05": [("float32-in-float64", *UNPLACED)],  # tanh in float32
    # (the soft-cap on unscaled q.k; a row with no key: lse of zeros)
    "paged-decode/paged_06": [("flash-softcap-scale", "softcap", "measured:scores"),
                              ("lse-dead-rows", "lse-only", "measured:lse")],
    "paged-decode/paged_07": [("paged-queries-before-append", *MASK, "measured:bias")],  # queries by the old length
    # (the new tokens written into the first new position's page)
    "paged-decode/paged_08": [(*CACHE, "paged-new-kv-wrong-slot", "paged-new-kv-stale")],
    # (the window's left edge strict; the new keys not attended)
    "paged-decode/paged_09": [("flash-window-edge", "window-left", *MASK), ("paged-new-kv-unseen", *MASK)],
    # sdpa
    "sdpa/sdpa_01": [],
    # (the mask's gradient times the scale; is_causal dropped beside a mask)
    "sdpa/sdpa_02": [("grad-mask", "gradients-only"), ("causal+mask", "causal-ignored", *MASK)],
    "sdpa/sdpa_03": [("gqa", "measured:heads")],
    # (a bool mask cast to the inputs' dtype: an additive 0/1 bias)
    "sdpa/sdpa_04": [("bool-mask", "mask-ignored", "api-mask-ignored", *MASK, "measured:bias")],
    "sdpa/sdpa_05": [("Ev!=E", "measured:scores")],  # the default scale from Ev
    "sdpa/sdpa_06": [("pv-half", "float32-in-float64", *UNPLACED)],  # P and V in bfloat16
    "sdpa/sdpa_07": [("causal-alignment", "lower-right", *MASK)],
    "sdpa/sdpa_08": [("bias-half", "float32-in-float64", *UNPLACED)],  # the float mask in float16
    "sdpa/sdpa_09": [("bwd-half", "float32-in-float64", *UNPLACED)],  # the lse saved in float32
    # (hidden keys -1e9: a row with no key gets the values' mean; GQA by tiling)
    "sdpa/sdpa_10": [("dead-rows", "measured:dead-rows"), ("gqa", "measured:heads")],
}
HELD9_ALSO: dict[str, set[str]] = {}

# held9 after its one run (its files read, its results known: development figures from then on): the keys made
# after that run for two of its files' own bugs -- a split merge in half precision (paged_02: the pages' lse in
# bfloat16; flex_03: the chunks' merge weights in float16) and block lists read past their counts (flex_07) --
# added to their labels. The learners' labels need none: the lab's new readings name keys the labels already had.
HELD9_AFTER = {**HELD9,
               "flex/flex_03": [("merge-half", *HELD9["flex/flex_03"][0])],
               "flex/flex_07": [("flex-counts-ignored", *HELD9["flex/flex_07"][0])],
               "paged-decode/paged_02": [("merge-half", *HELD9["paged-decode/paged_02"][0])],
               # (the full blocks never read: the key made after held10's run for its flex_07)
               "flex/flex_06": [HELD9["flex/flex_06"][0], ("flex-full-dropped", *HELD9["flex/flex_06"][1])]}
HELD9_AFTER_ALSO: dict[str, set[str]] = {}

HELD9_SLIPS = {
    "level-1/attempt_a": [("dtype",)],  # the output in float32 for bfloat16
    # (the score times sqrt(E); no max subtracted)
    "level-1/attempt_b": [],
    "level-1/attempt_c": [("measured:scores", "scale-inverted"), ("max-subtraction", "measured:overflow")],
    "level-1/attempt_d": [("Ev!=E", "scale-length", "measured:scores")],  # scaled by 1/sqrt(Ev)
    "level-1/attempt_e": [("scores-rounded", "softmax-half", "exp-half", *UNPLACED)],  # the scores in bfloat16
    "level-1/attempt_f": [("lower-right", "causal-alignment", *MASK)],
    # (the mask (L, L): raises where L != S; the scale from Ev)
    "level-2/attempt_a": [("square-assumed", "raises"), ("Ev!=E", "scale-length", "measured:scores")],
    "level-2/attempt_b": [("raises", "k-T")],  # k transposed as if 3-d: 4-d inputs raise
    "level-2/attempt_c": [("max-subtraction", "measured:overflow", "max-axis")],  # the whole tensor's max
    "level-2/attempt_d": [],
    "level-2/attempt_e": [("softmax-dim", *SUMS)],
    "level-2/attempt_f": [("float32-in-float64", *UNPLACED)],  # the scale a float32 tensor
    "level-3/attempt_a": [("merge-view", "heads-split")],
    "level-3/attempt_b": [("float32-in-float64", "softmax-half", *UNPLACED)],  # the softmax in float32
    "level-3/attempt_c": [("scale-C",)],
    "level-3/attempt_d": [("heads-split",), ("causal-ignored", *MASK)],  # heads by reshape; masked_fill discarded
    "level-3/attempt_e": [],
    "level-3/attempt_f": [("causal-reversed", *MASK)],
    "level-4/attempt_a": [],
    "level-4/attempt_b": [("skip-bound", *MASK)],  # the skip by the tile's first query
    "level-4/attempt_c": [("scores-rounded", "softmax-half", "exp-half", *UNPLACED)],  # q kᵀ in bfloat16
    "level-4/attempt_d": [("acc-not-rescaled", "online-not-rescaled")],
    "level-4/attempt_e": [("tile-mask", *MASK), ("lse-no-max", "lse-shift", "measured:lse")],
    "level-4/attempt_f": [("raises",)],  # squeeze() on a one-row tile
    "level-5/attempt_a": [("dkdv-overwritten",)],  # dv assigned, not added
    "level-5/attempt_b": [("measured:overflow", "max-subtraction")],  # exp(s) / exp(lse)
    "level-5/attempt_c": [],
    "level-5/attempt_d": [("lse-other-row", "raises")],  # the key tile's lse rows
    "level-5/attempt_e": [("scale-missing",), ("ds-precedence",)],
    "level-5/attempt_f": [("raises", "d-wrong", "d-keepdim")],  # the whole D
    "level-6/attempt_a": [("float32-in-float64", *UNPLACED)],
    "level-6/attempt_b": [("whole-buffer",)],
    "level-6/attempt_c": [("rope-q-only",), ("softmax-dim",)],  # the key cached unrotated; softmax over the query
    "level-6/attempt_d": [("rope-offset",)],  # rotated to pos + 1
    "level-6/attempt_e": [("cache-not-written", "cache-dropped")],  # appended to local tensors
    "level-6/attempt_f": [],
    "level-7/attempt_a": [("max-not-carried", "measured:overflow", "nan-everywhere")],  # the tile's max alone
    # (the lse in log2; the causal bound at the tile's first query)
    "level-7/attempt_b": [("lse-base2", "measured:lse"), ("bound-short", "bound-block-n", *MASK)],
    "level-7/attempt_c": [("pad-keys", "edge-off-by-one", *MASK)],  # the edge mask against L
    "level-7/attempt_d": [("lse-half", "lse-dtype", *UNPLACED)],  # the lse rounded to half
    "level-7/attempt_e": [],
    "level-7/attempt_f": [("causal-reversed", "scores-transposed", *MASK)],  # the causal comparison transposed
}
HELD9_SLIPS_ALSO: dict[str, set[str]] = {}

HELD9_SLIPS_AFTER = HELD9_SLIPS  # (the same labels: see HELD9_AFTER)
HELD9_SLIPS_AFTER_ALSO: dict[str, set[str]] = {}

# Keys made after these corpora's labels for their files' very slips (each checked against its file's truth):
# scale-inverted (the scores times sqrt(d)), and held2's running max never updated (max-never-updated).
DEV_SLIPS_ALSO: dict[str, set[str]] = {"level-1/query_key_indices_swapped_and_scale_inverted": {"scale-inverted"}}
HELD2_SLIPS_ALSO: dict[str, set[str]] = {"level-1/scale_times_sqrt_and_mask_hides_past": {"scale-inverted"},
                                         "level-4/max_not_carried_and_last_tile_dropped": {"max-never-updated"}}

# held10: written blind by two more helpers (tests/unseen/held10/README.md), who read neither the judge nor any earlier
# corpus and said nothing of their bugs in their replies. Labelled here from the truths' words before the judge or
# the lab ran on any of its files; run once, on the code as it stood at these labels.
HELD10 = {
    # flash-attn
    # (GQA by repeat; the window's left edge strict)
    "flash-attn/fa_01": [("gqa", "measured:heads"), ("flash-window-edge", "window-left", *MASK)],
    "flash-attn/fa_02": [("flash-alibi-signed", "alibi", "measured:bias")],  # ALiBi's distance signed
    "flash-attn/fa_03": [("window-right", "window", *MASK)],  # causal keeps a window's right side > 0
    # (dK's GQA sum over the wrong heads; NaN gradients for rows with no key)
    "flash-attn/fa_04": [("gradients-only", "gqa", "measured:backward"),
                         ("gradients-only", "dead-rows", "backward-mask", "measured:backward", "measured:dead-rows")],
    "flash-attn/fa_05": [("gradients-only", "softcap", "measured:backward")],  # the soft-cap's derivative 1 - tanh
    "flash-attn/fa_06": [],
    "flash-attn/fa_07": [("float32-in-float64", "bias-half", *UNPLACED)],  # the ALiBi bias in float32
    "flash-attn/fa_08": [(*MASK, "measured:bias")],  # key positions restart at 0 in each split
    "flash-attn/fa_09": [("float32-in-float64", "lse-half", "bwd-half", *UNPLACED)],  # the lse saved in float32
    "flash-attn/fa_10": [("measured:dead-rows", *MASK, "measured:sums")],  # a split with no key: 0/0 into the merge
    # flash-attn-varlen
    "flash-attn-varlen/varlen_01": [(*MASK, "window-left")],  # the window's left side without the S - L offset
    # (the backward without the soft-cap's derivative; the right window edge strict)
    "flash-attn-varlen/varlen_02": [("gradients-only", "softcap", "measured:backward"),
                                    ("flash-window-edge", "window-right", *MASK)],
    # (the soft-cap after ALiBi; NaN for a row with no key)
    "flash-attn-varlen/varlen_03": [("measured:bias", "measured:scores"), ("dead-rows", "measured:dead-rows")],
    "flash-attn-varlen/varlen_04": [],
    "flash-attn-varlen/varlen_05": [("lse-dead-rows", "lse-only", "measured:lse")],  # lse 0 for a sequence, no keys
    "flash-attn-varlen/varlen_06": [("float32-in-float64", "scores-rounded", *UNPLACED)],  # q kᵀ in float32
    "flash-attn-varlen/varlen_07": [("varlen-diagonal-from-max", *MASK, "measured:bias")],
    "flash-attn-varlen/varlen_08": [("float32-in-float64", *UNPLACED)],  # tanh in float32
    "flash-attn-varlen/varlen_09": [("gradients-only", "measured:backward")],  # dK, dV written at cu_seqlens_q
    # flex
    "flex/flex_01": [("flash-softcap-scale", "measured:scores", "measured:bias")],  # score_mod before the scale
    "flex/flex_02": [("lse-half", "lse-only", *UNPLACED)],  # the lse cast to bfloat16
    "flex/flex_03": [("float32-in-float64", "exp-half", *UNPLACED)],  # exp2 in float32
    "flex/flex_04": [("flex-block-size", *MASK)],  # BLOCK_SIZE read as (KV, Q)
    "flex/flex_05": [],
    # (the full blocks counted by kv_num_blocks; a row with no key: lse 0)
    "flex/flex_06": [(*MASK,), ("lse-dead-rows", "lse-only", "measured:lse")],
    "flex/flex_07": [(*MASK,)],  # the full blocks never visited
    "flex/flex_08": [(*MASK,), ("lse-base2", "measured:lse")],  # mask_mod given the tile's q index; lse in base 2
    "flex/flex_09": [("flex-mod-kv-head", "measured:bias", *MASK)],  # score_mod given the kv head
    "flex/flex_10": [],
    # paged-decode
    "paged-decode/paged_01": [("pv-half", "float32-in-float64", *UNPLACED)],  # each page's P V in float16
    # (kv head h // Hkv; the last page read whole)
    "paged-decode/paged_02": [("gqa", "measured:heads", "raises"), ("paged-stale-slots", *MASK)],
    "paged-decode/paged_03": [],
    # (the output reshaped, not transposed, where Lq > 1; the append wipes a page's later slots)
    "paged-decode/paged_04": [("measured:heads", *MASK), ("paged-cache-touched", *CACHE)],
    "paged-decode/paged_05": [("tail-dropped", *MASK)],  # a trailing partial page left out
    "paged-decode/paged_06": [("paged-queries-before-append", *MASK, "measured:bias")],  # queries by the old length
    "paged-decode/paged_07": [("flash-softcap-scale", "softcap", "measured:scores")],  # the soft-cap before the scale
    "paged-decode/paged_08": [("float32-in-float64", *UNPLACED)],  # the splits' lse in float32
    "paged-decode/paged_09": [(*CACHE, "paged-new-kv-wrong-slot", "paged-new-kv-stale")],  # a cross-page append
    "paged-decode/paged_10": [("paged-new-kv-unseen", *MASK)],  # the new keys written, not attended
    # sdpa
    "sdpa/sdpa_01": [("bwd-half", "float32-in-float64", *UNPLACED)],  # dS in float32 (backward)
    "sdpa/sdpa_02": [("gradients-only", "measured:backward"), ("gqa", "measured:heads")],  # delta = sum dP; h % Hkv
    "sdpa/sdpa_03": [],
    "sdpa/sdpa_04": [("grad-mask", "gradients-only", "measured:backward")],  # the mask's gradient times the scale
    "sdpa/sdpa_05": [("dead-rows", "measured:dead-rows")],  # finfo.min: a row with no key gets the mean of V
    "sdpa/sdpa_06": [("Ev!=E", "measured:scores")],  # the default scale from Ev
    "sdpa/sdpa_07": [(*MASK,)],  # the causal skip by the tile's first row
    # (a bool mask replaces the causal one; a float mask only in float32: others raise)
    "sdpa/sdpa_08": [("causal+mask", "causal-ignored", *MASK), ("raises", "float-mask")],
    "sdpa/sdpa_09": [("tail-dropped", *MASK)],  # the last partial key block never visited
    "sdpa/sdpa_10": [("float32-in-float64", *UNPLACED)],  # computed in float32
}
HELD10_ALSO: dict[str, set[str]] = {}
# held10 after its one run (development figures from then on): the keys made after it for three of its kernels'
# own bugs -- the full list read with the partial list's count (flex_06), the full blocks never visited (flex_07),
# and the causal loop that stops a query tile's key tiles at its first query (sdpa_07).
HELD10_AFTER = {**HELD10,
                "flex/flex_06": [("flex-counts-crossed", *HELD10["flex/flex_06"][0]), HELD10["flex/flex_06"][1]],
                "flex/flex_07": [("flex-full-dropped", *HELD10["flex/flex_07"][0])],
                "sdpa/sdpa_07": [("causal-tile-skip", *HELD10["sdpa/sdpa_07"][0])]}
HELD10_AFTER_ALSO: dict[str, set[str]] = {}
HELD10_SLIPS = {
    "level-1/attempt_a": [("Ev!=E", "scale-length", "measured:scores")],  # scaled by 1/sqrt(Ev)
    "level-1/attempt_b": [("lower-right", "causal-alignment", *MASK), ("dtype",)],  # bottom-right; float32 out
    "level-1/attempt_c": [("scores-rounded", "softmax-half", "exp-half", *UNPLACED)],  # bfloat16 never upcast
    "level-1/attempt_d": [],
    "level-1/attempt_e": [("diagonal", *MASK)],  # j >= i hidden
    "level-1/attempt_f": [("max-before-mask", "max-subtraction", "measured:overflow")],  # the max before the mask
    "level-2/attempt_a": [("softmax-dim", *SUMS)],
    "level-2/attempt_b": [("float32-in-float64", *UNPLACED)],  # the scale a float32 tensor
    "level-2/attempt_c": [],
    "level-2/attempt_d": [("measured:scores",), ("causal-reversed", *MASK)],  # E ** -1/2; the past hidden
    "level-2/attempt_e": [("mask-zero", *MASK)],
    "level-2/attempt_f": [("square-assumed", "raises")],  # the mask (L, L)
    # (no projection; the hidden scores -1e-9)
    "level-3/attempt_a": [("no-proj",), ("causal-ignored", "mask-finite", "mask-zero", *MASK)],
    "level-3/attempt_b": [],
    "level-3/attempt_c": [("heads-split",)],
    "level-3/attempt_d": [("float32-in-float64", "softmax-half", *UNPLACED)],  # the softmax in float32
    "level-3/attempt_e": [("merge-view",)],
    "level-3/attempt_f": [("scale-C",)],
    "level-4/attempt_a": [("last-tile-dropped", "tail-dropped", *MASK)],
    "level-4/attempt_b": [("lse-dtype", "float32-in-float64", "lse-half", *UNPLACED)],  # the lse in float32
    # (the causal mask tile-local; the causal stop by block_k)
    "level-4/attempt_c": [("tile-mask", *MASK), ("skip-bound", "bound-block-n", "diagonal-skipped", *MASK)],
    "level-4/attempt_d": [("no-skip",)],  # one hidden tile computed: the work
    "level-4/attempt_e": [],
    "level-4/attempt_f": [("acc-not-rescaled", "online-not-rescaled")],
    "level-5/attempt_a": [("dv-not-transposed", "raises"), ("ds-precedence",)],  # P @ dO; P * dP - D
    "level-5/attempt_b": [("float32-in-float64", "bwd-half", *UNPLACED)],  # dq in float32
    "level-5/attempt_c": [("second-softmax",)],  # a softmax per key tile
    "level-5/attempt_d": [("d-keepdim", "raises")],
    "level-5/attempt_e": [],
    "level-5/attempt_f": [("dq-overwritten",)],
    "level-6/attempt_a": [("float32-in-float64", *UNPLACED)],
    "level-6/attempt_b": [("rope-offset",)],  # rotated to pos + 1
    "level-6/attempt_c": [("rope-q-only",), ("unscaled", "scale-length")],  # k cached unrotated; scale from q.size(-2)
    "level-6/attempt_d": [("whole-buffer",)],
    "level-6/attempt_e": [],
    "level-6/attempt_f": [("before-write", "slot-ahead")],  # slots 0 .. pos - 1
    "level-7/attempt_a": [("pad-keys", "edge-off-by-one", *MASK)],
    "level-7/attempt_b": [("bound-short", *MASK)],
    "level-7/attempt_c": [],
    "level-7/attempt_d": [("lse-base2", "measured:lse")],
    "level-7/attempt_e": [("divide-axis", "raises")],
    # (l_i not rescaled; the edge mask against L)
    "level-7/attempt_f": [("sum-not-rescaled", "online-not-rescaled"), ("pad-keys", "edge-off-by-one", *MASK)],
}
HELD10_SLIPS_ALSO: dict[str, set[str]] = {}
# (level 7's edge mask compared with L, not S: the key made after held10's run for its level-7/f)
HELD10_SLIPS_AFTER = {**HELD10_SLIPS, "level-7/attempt_f": [
    HELD10_SLIPS["level-7/attempt_f"][0], ("edge-length", *HELD10_SLIPS["level-7/attempt_f"][1])]}
HELD10_SLIPS_AFTER_ALSO: dict[str, set[str]] = {}

# held11: written blind by two more helpers (tests/unseen/held11/README.md), who read neither the judge nor any
# earlier corpus and said nothing of their bugs in their replies. Labelled here from the truths' words before the
# judge or the lab ran on any of its files; run once, on the code as it stood at these labels.
HELD11 = {
    # flash-attn
    "flash-attn/fa_01": [("window-left", "window", *MASK)],  # causal drops the window's left bound
    "flash-attn/fa_02": [("window-left", *MASK)],  # the first key tile by a ceiling: the window's left tile skipped
    "flash-attn/fa_03": [("gradients-only", "softcap", "alibi", "measured:backward")],  # tanh' from the biased score
    "flash-attn/fa_04": [("flash-alibi-signed", "alibi", "measured:bias")],  # ALiBi's distance without |.|
    "flash-attn/fa_05": [("dead-rows", "measured:dead-rows", "lse-dead-rows")],  # NaN where a row sees no key
    # (a left window of -1 taken as seqlen_q; ALiBi before the soft-cap)
    "flash-attn/fa_06": [(*MASK, "window-left"), ("measured:bias", "measured:scores", "alibi", "softcap")],
    # (the backward's P from an lse of -inf: NaN; the backward's mask without the window)
    "flash-attn/fa_07": [("dead-rows", "measured:dead-rows", "gradients-only", "measured:backward", "backward-mask"),
                         ("backward-mask", "gradients-only", "measured:backward", "window")],
    "flash-attn/fa_08": [("bias-half", "float32-in-float64", *UNPLACED)],  # the ALiBi bias in float32
    "flash-attn/fa_09": [("scores-rounded", "scale-folded", "bias-half", *UNPLACED)],  # scale, cap, bias in bf16
    "flash-attn/fa_10": [],
    # flash-attn-varlen
    # (a token after an empty sequence given the sequence before it)
    "flash-attn-varlen/varlen_01": [("varlen-queries-shifted", "varlen-keys-early", "varlen-keys-late", *MASK)],
    "flash-attn-varlen/varlen_02": [("varlen-diagonal-from-max", *MASK, "measured:bias")],
    "flash-attn-varlen/varlen_03": [("gradients-only", "measured:backward", "dkdv-overwritten")],  # dK, dV by =
    "flash-attn-varlen/varlen_04": [("lse-dead-rows", "lse-only", "measured:lse")],  # lse 0 for a sequence, no keys
    "flash-attn-varlen/varlen_05": [("flash-softcap-scale", "softcap", "measured:scores")],  # cap before the scale
    # (positions from the packed rows; the window's left edge strict)
    "flash-attn-varlen/varlen_06": [("varlen-causal-packed", *MASK, "measured:bias"),
                                    ("flash-window-edge", "window-left", *MASK)],
    # (the keys' offset not advanced past a sequence of no queries; (H,) slopes read as head b % H's, one scalar)
    "flash-attn-varlen/varlen_07": [("varlen-keys-early", "varlen-keys-late", *MASK),
                                    ("measured:bias", "alibi")],
    "flash-attn-varlen/varlen_08": [("lse-half", "float32-in-float64", *UNPLACED)],  # the lse in float32
    "flash-attn-varlen/varlen_09": [("bwd-half", "float32-in-float64", *UNPLACED)],  # delta in float32 (backward)
    "flash-attn-varlen/varlen_10": [],
    # flex
    "flex/flex_01": [("flex-block-size", *MASK)],  # the query rows' blocks by the KV block size
    "flex/flex_02": [("flex-counts-ignored", *MASK)],  # the full list read whole, its padding too
    "flex/flex_03": [("flex-mod-kv-head", "measured:bias", *MASK)],  # the mods given the kv head
    "flex/flex_04": [("flash-softcap-scale", "measured:scores", "measured:bias", "mod")],  # score_mod before the scale
    "flex/flex_05": [("dead-rows", "measured:dead-rows", "lse-dead-rows", *MASK)],  # NaN from an unguarded rescale
    # (no block mask: the key blocks counted from L; the lse in base 2)
    "flex/flex_06": [(*MASK, "tail-dropped"), ("lse-base2", "measured:lse")],
    # (score_mod's q_idx and kv_idx swapped; a finite lse where a row sees no key)
    "flex/flex_07": [("flex-mod-index", "measured:bias"), ("lse-dead-rows", "lse-only", "measured:lse")],
    "flex/flex_08": [("float32-in-float64", *UNPLACED)],  # everything in float32
    "flex/flex_09": [("lse-half", "lse-only", *UNPLACED)],  # the lse in bfloat16
    "flex/flex_10": [],
    # paged-decode
    "paged-decode/paged_01": [(*CACHE, "paged-new-kv-wrong-slot", "paged-new-kv-stale")],  # the append wraps a page
    "paged-decode/paged_02": [("paged-queries-before-append", *MASK, "measured:bias")],  # queries by the old length
    "paged-decode/paged_03": [("paged-new-kv-unseen", *MASK)],  # the pages counted before the append
    "paged-decode/paged_04": [("gqa", "measured:heads")],  # kv head h % Hkv
    "paged-decode/paged_05": [("lse-only", "measured:lse")],  # the lse reshaped, not transposed
    # (splits of S // 4 keys: the rest dropped; the left window from the last query)
    "paged-decode/paged_06": [("tail-dropped", *MASK), ("window-left", *MASK)],
    # (the offset clamped at 0: queries past S aligned top-left; a right window ignored)
    "paged-decode/paged_07": [("paged-top-left", "dead-rows", "measured:dead-rows", *MASK), ("window-right", *MASK)],
    "paged-decode/paged_08": [("float32-in-float64", "merge-half", *UNPLACED)],  # the splits' workspaces float32
    "paged-decode/paged_09": [("float32-in-float64", *UNPLACED)],  # tanh in float32
    "paged-decode/paged_10": [],
    # sdpa
    "sdpa/sdpa_01": [("causal-alignment", *MASK)],  # is_causal bottom-right
    "sdpa/sdpa_02": [("gradients-only", "gqa", "measured:backward")],  # the backward's GQA sum by h % Hkv
    "sdpa/sdpa_03": [("dead-rows", "measured:dead-rows", "mask-finite")],  # finfo.min, not -inf
    "sdpa/sdpa_04": [("grad-mask", "gradients-only", "measured:backward")],  # dmask times the scale
    "sdpa/sdpa_05": [("tail-dropped", "causal-tile-skip", *MASK)],  # the causal tile count by a floor
    # (the default scale from Ev; is_causal dropped when a mask is given)
    "sdpa/sdpa_06": [("Ev!=E", "measured:scores"), ("causal+mask", *MASK)],
    # (the backward without the float mask; GQA h % Hkv)
    "sdpa/sdpa_07": [("backward-mask", "gradients-only", "float-mask", "measured:backward"), ("gqa", "measured:heads")],
    "sdpa/sdpa_08": [("float32-in-float64", "softmax-half", *UNPLACED)],  # the softmax in float32
    "sdpa/sdpa_09": [("float32-in-float64", "scale-folded", "measured:scores", *UNPLACED)],  # the scale in float32
    "sdpa/sdpa_10": [],
}
HELD11_ALSO: dict[str, set[str]] = {}
HELD11_SLIPS = {
    "level-1/attempt_a": [("lower-right", "causal-alignment", *MASK)],  # bottom-right
    "level-1/attempt_b": [("scores-rounded", "softmax-half", "exp-half", "kv-half", *UNPLACED)],  # q·k in bfloat16
    "level-1/attempt_c": [],
    "level-1/attempt_d": [("max-before-mask", "max-subtraction", "measured:overflow")],  # the max over hidden keys
    # (scaled by 1/sqrt(Ev); the scores cut from autograd)
    "level-1/attempt_e": [("Ev!=E", "scale-length", "measured:scores"),
                          ("gradients-only", "autograd", "requires-grad", "measured:backward")],
    "level-1/attempt_f": [("square-assumed", "raises")],  # range(i + 1): IndexError where L > S
    # (the mask (L, L); masked_fill's result thrown away)
    "level-2/attempt_a": [("square-assumed", "raises"), ("causal-ignored", *MASK)],
    "level-2/attempt_b": [("max-subtraction", "measured:overflow")],
    "level-2/attempt_c": [("softmax-dim", *SUMS)],
    "level-2/attempt_d": [],
    "level-2/attempt_e": [("float32-in-float64", "softmax-half", *UNPLACED)],  # the softmax in float32
    "level-2/attempt_f": [("mask-after-softmax", *SUMS, *MASK)],
    "level-3/attempt_a": [],
    "level-3/attempt_b": [("scores-transposed",)],  # k @ qᵀ
    "level-3/attempt_c": [("scale-C",), ("causal-reversed", *MASK)],  # 1/sqrt(C); triu used as the tril idiom
    "level-3/attempt_d": [("float32-in-float64", "measured:scores", *UNPLACED)],  # the scale a float32 tensor
    "level-3/attempt_e": [("mask-zero", *MASK)],  # the scores times a 0/1 mask
    "level-3/attempt_f": [("merge-view",)],
    "level-4/attempt_a": [("skip-bound", "diagonal-skipped", *MASK)],  # the skip by the tile's first query
    "level-4/attempt_b": [("no-skip",)],
    "level-4/attempt_c": [("lse-dtype", "float32-in-float64", "lse-half", *UNPLACED)],  # the lse in float32
    # (the causal mask tile-local; m overwritten before the rescale)
    "level-4/attempt_d": [("tile-mask", *MASK),
                          ("rescale-after-update", "acc-not-rescaled", "sum-not-rescaled", "online-not-rescaled")],
    "level-4/attempt_e": [],
    "level-4/attempt_f": [("max-subtraction", "measured:overflow", "max-axis")],  # the max over the whole tensor
    "level-5/attempt_a": [("float32-in-float64", "bwd-half", *UNPLACED)],  # the gradients in float32
    "level-5/attempt_b": [],
    "level-5/attempt_c": [("d-key-tile", "d-wrong")],  # D per key tile
    "level-5/attempt_d": [("dq-overwritten",)],
    "level-5/attempt_e": [("scale-missing",)],  # dk without the scale
    "level-5/attempt_f": [("ds-precedence",), ("dkdv-overwritten",)],  # P * dP - D; dk by =
    "level-6/attempt_a": [("rope-offset",)],  # rotated to pos + 1
    "level-6/attempt_b": [("cache-not-written",), ("softmax-dim",)],  # the cache rebound; softmax over one query
    "level-6/attempt_c": [("rope-k-only",)],  # the cached keys rotated again
    "level-6/attempt_d": [],
    "level-6/attempt_e": [("whole-buffer",)],
    "level-6/attempt_f": [("float32-in-float64", *UNPLACED)],
    "level-7/attempt_a": [("bound-short", *MASK)],  # the loop stops at the tile's first query
    "level-7/attempt_b": [("pv-half", "softmax-half", "exp-half", *UNPLACED)],  # p in float16 before p @ v
    "level-7/attempt_c": [("lse-base2", "measured:lse")],
    # (keys past S not masked; l_i not rescaled)
    "level-7/attempt_d": [("pad-keys", "edge-off-by-one", *MASK), ("sum-not-rescaled", "online-not-rescaled")],
    "level-7/attempt_e": [("edge-length", "pad-keys", "edge-off-by-one", *MASK)],  # the edge mask against L
    "level-7/attempt_f": [],
}
HELD11_SLIPS_ALSO: dict[str, set[str]] = {}
