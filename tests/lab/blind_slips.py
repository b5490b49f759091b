"""The slips in the learners' files under tests/lab/blind/, one folder per level.

The files were written blind: by someone who had read the starters, the README and the lesson, and ran
`attnlab lab start` and `attnlab lab check` as a learner does, but never the code that grades them or names
their slips. Each file is a learner's whole answer to a level, with the learner's own names and style. Its
labels say in plain words what the learner did wrong (two labels: two slips at once); () marks a correct
solution. The lab's slip-naming is measured on them: every slip file should fail and be named, every correct
file should pass with no slip named.
"""

SLIPS = {
    "loops": {
        "correct_starter_filled.py": (),
        "correct_row_at_a_time.py": (),
        "mask_off_by_one_ahead.py": ("mask-off-by-one-ahead",),
        "mask_hides_diagonal.py": ("mask-hides-diagonal",),
        "causal_lower_right.py": ("causal-lower-right",),
        "no_scale.py": ("no-scale",),
        "scale_by_E.py": ("scale-by-E",),
        "scale_by_sqrt_S.py": ("scale-by-sqrt-S",),
        "scale_after_softmax.py": ("scale-after-softmax",),
        "masked_score_zero.py": ("masked-scores-zero",),
        "masked_score_minus_100.py": ("masked-scores-finite",),
        "no_max_subtraction.py": ("no-max-subtraction",),
        "max_before_mask.py": ("max-taken-before-mask",),
        "weights_not_normalised.py": ("weights-not-normalised",),
        "value_index_i.py": ("value-of-query-index",),
        "dtype_from_upcast_q.py": ("output-dtype-not-input",),
        "two_no_scale_no_dtype.py": ("no-scale", "output-dtype-not-input"),
        "two_mask_ahead_scale_by_E.py": ("mask-off-by-one-ahead", "scale-by-E"),
    },
    "matrix": {
        "correct_masked_fill.py": (),
        "correct_einsum_manual_softmax.py": (),
        "mask_off_by_one_ahead.py": ("mask-off-by-one-ahead",),
        "mask_hides_diagonal.py": ("mask-hides-diagonal",),
        "mask_inverted.py": ("mask-inverted",),
        "mask_square_L.py": ("mask-shape-L-by-L",),
        "masked_fill_not_assigned.py": ("mask-result-discarded",),
        "causal_lower_right.py": ("causal-lower-right",),
        "mask_after_softmax.py": ("mask-after-softmax",),
        "masked_score_zero.py": ("masked-scores-zero",),
        "no_scale.py": ("no-scale",),
        "scale_by_E.py": ("scale-by-E",),
        "scale_by_sqrt_S.py": ("scale-by-sqrt-S",),
        "softmax_wrong_dim.py": ("softmax-over-queries",),
        "k_dot_T_batched.py": ("k-T-on-batched",),
        "no_max_subtraction.py": ("no-max-subtraction",),
        "weights_not_normalised.py": ("weights-not-normalised",),
        "no_dtype_back.py": ("output-dtype-not-input",),
        "two_mask_after_softmax_no_scale.py": ("mask-after-softmax", "no-scale"),
        "two_softmax_dim_scale_by_E.py": ("softmax-over-queries", "scale-by-E"),
    },
    "module": {
        "correct_nanogpt_style.py": (),
        "correct_einsum_heads.py": (),
        "split_heads_view_no_transpose.py": ("split-heads-view-without-transpose",),
        "split_heads_interleaved.py": ("split-heads-interleaved",),
        "merge_heads_view_before_transpose.py": ("merge-heads-view-before-transpose",),
        "merge_heads_wrong_permute.py": ("merge-heads-wrong-permute",),
        "no_output_projection.py": ("no-output-projection",),
        "q_k_swapped.py": ("q-k-swapped",),
        "v_from_k.py": ("v-from-k-projection",),
        "no_causal_mask.py": ("no-causal-mask",),
        "mask_off_by_one_ahead.py": ("mask-off-by-one-ahead",),
        "mask_inverted.py": ("mask-inverted",),
        "mask_after_softmax.py": ("mask-after-softmax",),
        "scale_by_d_model.py": ("scale-by-d-model",),
        "scale_by_head_dim.py": ("scale-by-d",),
        "softmax_wrong_dim.py": ("softmax-over-queries",),
        "two_no_proj_merge_view.py": ("no-output-projection", "merge-heads-view-before-transpose"),
        "two_no_mask_scale_by_d_model.py": ("no-causal-mask", "scale-by-d-model"),
    },
}
