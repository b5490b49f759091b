"""The causes a verdict can name: one table, each cause's line, the hints and case tags that point to it, its scope.

A failing row carries facts and hints (:mod:`attnlab.judge.facts`, :mod:`attnlab.judge.hypotheses`);
:mod:`attnlab.judge.diagnose` groups the rows by cause and says each cause in one line. Everything it
needs to know of a cause is here, in one :class:`attnlab.judge.facts.Cause`:

* ``text`` -- the line, in the user's terms: what the function does and what it should do;
* ``hints`` -- the keys of the wrong semantics (hypotheses) whose rows this line speaks for, beside its own key
  (``scale-ignored`` is said as "fails only where scale= is passed");
* ``tags`` -- the case tags (:attr:`attnlab.judge.cases.Case.tags`) whose failing cases, when nothing else
  explains them, are this cause (every failing bfloat16 case: "fails only in bfloat16");
* ``scope`` -- the tags of the cases a hint speaks of: where the hint's rows are only part of its scope, the
  narrower tag that holds them all is said first (a 0-d tensor scale, not every ``scale=``).

The APIs other than SDPA's add their own causes beside their semantics (``CAUSES`` in each module of
:mod:`attnlab.judge.apis`), and attention sinks theirs (:mod:`attnlab.judge.sink_causes`); :func:`table` is all of
them, and the only table anything reads.
"""

from __future__ import annotations

import functools

from attnlab.judge import apis
from attnlab.judge.facts import Cause

SDPA = (
    Cause('oracle', 'the oracle and PyTorch disagree on {n} case(s): those cases judge nothing (report it: it is the '
                    "judge's bug, not yours)"),
    Cause('exit', 'calls sys.exit: a function must return its answer, never end the process'),
    Cause('ended', 'ended the process during case {case!r} (os._exit, or a crash): a function must return its answer'),
    Cause('hangs', 'a case timed out: is there an endless loop, or a loop over every element in Python?'),
    Cause('busy', 'not a cause in your function: {said}, twice -- run it again, or allow more time (lab check '
                  '--max-seconds N, verify --timeout N)'),
    Cause('raises', 'raises {type}: {message}'),
    Cause('not-a-tensor', 'returns something that is not a tensor'),
    Cause('shape', "the output's shape is not PyTorch's (..., H, L, Ev)"),
    Cause('dtype', "the output's dtype is not the inputs' dtype: compute in higher precision if you like, but return "
                   'q.dtype'),
    Cause('device', "the output (or its log-sum-exp, or a gradient) is not on the inputs' device"),
    Cause('in-place', "changes the caller's tensors in place: work on new tensors (no masked_fill_, mul_, div_ on "
                      'inputs)'),
    Cause('requires-grad', "changes the inputs' requires_grad"),
    Cause('no-lse', "no log-sum-exp comes back: the API returns it when asked (flash-attn's return_attn_probs=True, "
                    "flex's return_lse=True, paged decode's return_softmax_lse=True), as (out, lse, ...)"),
    Cause('no-grad', 'no gradient flows back to q, k, v: is something detached, or computed under torch.no_grad()?'),
    Cause('unscaled', 'the output is attention without the scale: multiply the scores by 1/sqrt(E) (or by scale=)'),
    Cause('scale-1/d', 'the output is attention scaled by 1/E: the default scale is 1/sqrt(E)'),
    Cause('scale', 'fails only where scale= is passed: is the scale argument used (1/sqrt(E) only when it is None)?',
          hints=('scale-ignored',), tags=('scale',), scope=('scale',)),
    Cause('scale-tensor', 'fails only where scale is a 0-d tensor: PyTorch accepts one (use float(scale))',
          tags=('scale-tensor',)),
    Cause('dead-rows', 'rows that see no key are wrong: PyTorch returns zeros there (and zero gradients){returned}',
          tags=('dead-rows',), scope=('dead-rows',)),
    Cause('max-subtraction', "large scores overflow: subtract each row's max before exp (exp overflows float32 near "
                             '88)',
          tags=('large-logits',), scope=('large-logits',)),
    Cause('causal-ignored', 'is_causal=True is ignored: the output matches attention with no causal mask',
          scope=('causal',)),
    Cause('diagonal', 'the causal mask hides the diagonal: query i sees keys j <= i, itself included',
          scope=('causal',)),
    Cause('causal-reversed', 'the causal mask is turned round: query i sees itself and the keys after it (j >= i), '
                             'not the keys up to it; hide the keys after each query (j > i) instead',
          scope=('causal',)),
    Cause('mask-zero', 'the masked scores are set to 0, not -inf: a future key still gets weight exp(0) (use -inf)',
          scope=('causal',)),
    Cause('causal-alignment', "only L != S causal cases fail{yours}: PyTorch's is_causal is aligned upper-left "
                              '(query i sees keys j <= i)',
          hints=('lower-right-for-upper-left',), tags=('upper-left L!=S',), scope=('upper-left L!=S',)),
    Cause('lower-right', 'only the lower-right causal masks fail (query i sees keys j <= i + S - L, as in KV-cache '
                         'decoding)',
          hints=('upper-left-for-lower-right',), tags=('lower-right',), scope=('lower-right',)),
    Cause('mask-ignored', 'attn_mask is ignored: the output matches attention with no mask',
          scope=('bool-mask', 'float-mask')),
    Cause('mask-inverted', 'the bool mask is read backwards: True means the key takes part',
          scope=('bool-mask',)),
    Cause('causal+mask', 'fails only where is_causal=True comes with attn_mask: PyTorch keeps the keys both allow',
          hints=('mask-dropped-with-causal', 'causal-dropped-with-mask'), tags=('causal+mask',),
          scope=('causal+mask',)),
    Cause('gqa', 'only GQA cases fail{yours}: query head h must use key head h // (H / Hkv) (repeat_interleave, '
                 'not repeat)',
          hints=('gqa-repeat',), tags=('gqa',), scope=('gqa',)),
    Cause('dropout-scale', 'dropout rows: kept weights must be divided by 1 - p',
          hints=('dropout-unscaled',), scope=('dropout',)),
    Cause('dropout', 'only dropout cases fail: drop each weight with probability p and scale the rest by 1/(1 - p)',
          tags=('dropout',)),
    Cause('softmax-dim', "the softmax is taken over the wrong dim: each query's weights over the keys (dim=-1) sum to"
                         ' 1'),
    Cause('noncontig', 'fails only on non-contiguous inputs (transposed, expanded or sliced views, as transformers '
                       'passes them): use reshape or .contiguous(), not view',
          tags=('noncontig', 'transposed', 'expanded', 'sliced')),
    Cause('float-mask', 'only float masks fail: a float attn_mask is added to the scores',
          tags=('float-mask',)),
    Cause('bool-mask', 'only bool masks fail: False hides a key (-inf before the softmax), True keeps it',
          tags=('bool-mask',)),
    Cause('broadcast-mask', 'only masks that broadcast fail: an (L, S), (N, 1, 1, S) or (H, 1, S) mask broadcasts to '
                            '(N, H, L, S)',
          tags=('broadcast-mask',)),
    Cause('mask-fn', "only attnlab's mask functions fail",
          tags=('mask-fn',)),
    Cause('mod', 'only score-modifier cases fail: score_mod(score, b, h, q_idx, kv_idx) changes the scaled score '
                 'before the mask',
          tags=('mod',)),
    Cause('grad-mask', 'only cases with a learnable float mask fail: its gradient is dS summed over broadcast dims',
          tags=('grad-mask',)),
    Cause('batch-dims', 'only inputs with no batch dim, or several, fail: take any leading dims (..., H, L, E)',
          tags=('batch-dims',)),
    Cause('Ev!=E', "only cases where value's last dim Ev differs from E fail",
          tags=('Ev!=E',)),
    Cause('L=1', 'only single-query cases (L = 1) fail',
          tags=('L=1',)),
    Cause('L!=S', 'only cases with L != S fail: queries and keys may differ in number',
          tags=('L!=S',)),
    Cause('window', 'only cases with window_size= fail: the window (its sides, their edges, where it is placed)',
          tags=('window',)),
    Cause('window-left', "only cases whose window_size= bounds the left side (left >= 0) fail: the window's left "
                         'edge, key i + S - L - left', tags=('window-left',)),
    Cause('window-right', "only cases whose window_size= bounds the right side (right >= 0, causal=False) fail: the "
                          "window's right edge, key i + S - L + right", tags=('window-right',)),
    Cause('softcap', 'only cases with softcap= fail: the soft-cap, softcap * tanh(s / softcap) on the scaled score',
          tags=('softcap',)),
    Cause('alibi', "only cases with alibi_slopes= fail: ALiBi's bias, -slope * |i + S - L - j|", tags=('alibi',)),
    Cause('append', 'only cases that pass k=, v= fail: the new keys, written into the cache at positions '
                    'cache_seqlens[b] ... and attended', tags=('append',)),
    Cause('bfloat16', 'fails only in bfloat16{ratio}', tags=('bfloat16',)),
    Cause('float64', 'fails only in float64{ratio}', tags=('float64',)),
    Cause('float32', 'fails only in float32{ratio}', tags=('float32',)),
    Cause('precision', 'fails in float32 and float64 but passes in bfloat16: something is rounded through half '
                       'precision (the scores, the weights)',
          tags=('precision',)),  # a tag diagnose gives the full-precision rows when half passes
    Cause('over-ratio', "the error is more than --max-ratio times PyTorch's own on the same cases: {ratio}"),
    Cause('precision-unplaced', 'precision lost, not placed: {ratio}; {passing}, and no rounding the judge models '
                                'fits the error'),
    Cause('gradients-only', 'only gradients fail: the output is right; check the backward (a custom '
                            'autograd.Function?)'),
    Cause('unclear', 'fails with no single pattern (worst: {worst})'),
    Cause('causal-offset-sign', 'the causal offset has the wrong sign for S > L: query i sees keys j <= i - (S - L); '
                                'is_causal is upper-left (j <= i), lower-right is j <= i + (S - L)'),
    Cause('scores-rounded', "the error is the size of scores kept in half precision (the inputs' dtype, or a fixed "
                            "float16 or bfloat16 for full-precision inputs too: the scores stored there, or Q Kᵀ taken "
                            "from q and k cast down) before the softmax (or its running sum): keep the scores, the max "
                            "and the sum in float32",
),
    Cause('scale-folded', "the error is the size of the scale folded into q or k (or its square root into each) in "
                          "the inputs' dtype: scale the float32 scores instead (or fold it where the dtype holds it "
                          "exactly)"),
    Cause('softmax-half', "the error is the size of a softmax taken in half precision (exp and its sum in the "
                          "inputs' dtype, or a fixed half dtype): take it in float32 and round only the weights "
                          "before P V"),
    Cause('exp-half', "the error is the size of exp taken in half precision (the inputs' dtype, or a fixed float16 "
                      "or bfloat16): its argument or its result -- the weights P -- rounded there; take exp, its sum "
                      'and the max in float32'),
    Cause('kv-half', "the error is the size of the keys and values (or the keys or the values alone, or q, k and v) "
                     "rounded to a fixed float16 or bfloat16 before the matmuls, whatever the inputs' dtype: a tile or "
                     "a cache staged there, an operand cast down (.half()); keep them in the inputs' dtype"),
    Cause('bias-half', "the error is the size of what is added to the scaled scores (ALiBi's bias, a float mask) "
                       "rounded to a fixed float16 or bfloat16 before it is added, whatever the inputs' dtype: build "
                       "the bias in the inputs' dtype, float32 at least"),
    Cause('pv-half', "the error is the size of P V's result rounded to a fixed float16 or bfloat16, whatever the "
                     "inputs' dtype: P and V cast down for their product, or the running output (the accumulator) "
                     "kept there between key tiles -- the error cannot tell the two apart; take P V and keep the "
                     "accumulator in float32 or better"),
    Cause('merge-half', "the error is the size of a split-KV merge done in half precision: each split's (each "
                        "page's, each chunk's) log-sum-exp, or its merge weight exp(lse_j - lse), rounded to a fixed "
                        "float16 or bfloat16 before the splits are combined, whatever the inputs' dtype; keep the "
                        "splits' lse and the merge in float32"),
    Cause('bwd-half', "the output is right and the gradients' error is, entry by entry, that of one step of the "
                      "backward rounded down: {steps}; keep the backward's intermediates in float32 (float64 for a "
                      "float64 call)"),
    Cause('lse-half', "the log-sum-exp's error is the size of its own rounding to half precision (the inputs' "
                      "dtype, or a fixed float16 or bfloat16): it is stored (or finished) there; keep it in float32, "
                      'as the API returns it'),
    Cause('eps-in-sum', "every row is the right answer times l / (l + eps): the softmax's sum has a constant added "
                        "(a guard against an empty row); divide by the sum alone and set the rows that see no key "
                        "apart"),
    Cause('float32-in-float64', "the error is float32's size in a float64 case: a float32 constant (the scale as "
                                "a float32 tensor) or a float32 accumulator is in the float64 path"),
    Cause('dropout-renormalised', 'dropout renormalises over the kept weights: divide the kept weights by 1 - p, not '
                                  'by their sum'),
    Cause('online-not-rescaled', "the online softmax does not rescale what it has summed when a key tile raises the "
                                 "running max: the accumulator (or the running sum, or both) must be multiplied by "
                                 "exp(m_old - m_new) before the tile's p V (and p's sum) are added"),
    Cause('split-max-dropped', "the key tiles' (or splits', pages') partial sums are merged as they are: each "
                               "split's exps are taken against its own max, and never brought to a common one -- "
                               "weight split i's sum and output by exp(m_i - m) (m the largest m_i), or merge the "
                               "splits by their lse"),
    Cause('pad-keys', "zero keys padded to a block's multiple are attended: mask the padding (-inf) when S is not a "
                      'multiple of the block'),
    Cause('mod-after-mask', "the score modifier is applied after the mask: masked scores come out finite (a soft-cap "
                            "turns -inf into -softcap) and those keys get weight; modify the scores, then mask"),
    Cause('tail-dropped', "the keys of the last partial tile are never seen: a tile count taken with // drops them; "
                          "count the tiles with a ceiling division and mask the tile's end"),
    Cause('causal-tile-skip', "the causal loop stops a query tile's key tiles too early: a key tile is visited only "
                              "when it starts at or before the tile's first query (or less than one key tile past "
                              "it), so the tile's later queries lose keys they see; stop at the tile's last query, "
                              "and mask inside the tile"),
    Cause('backward-mask', 'the output is right but the gradients are those of attention under another mask: the '
                           "backward must use the forward's attn_mask and is_causal"),
    # the inference path (attnlab.judge.inference): the same call, forward only, on inputs that do not require grad
    Cause('no-grad-output', 'under torch.no_grad() the output differs from the one computed with gradients, over the '
                            'limit: the road taken when no gradient is wanted is wrong'),
    Cause('inference-mode-output', 'under torch.inference_mode() the output differs from the one computed with '
                                   'gradients, over the limit: the road taken when no gradient is wanted is wrong'),
    Cause('no-grad-in-place', 'changes its inputs in place under torch.no_grad(), where they do not require grad: work '
                              'on new tensors there too'),
    Cause('inference-mode-in-place', 'changes its inputs in place under torch.inference_mode(): work on new tensors '
                                     'there too'),
    Cause('no-grad-raises', 'raises under torch.no_grad() where it runs with gradients (the rows say what): the road '
                            'taken when no gradient is wanted must run too'),
    Cause('inference-mode-raises', 'raises under torch.inference_mode() where it runs with gradients (the rows say '
                                   'what): the road taken when no gradient is wanted must run too'),
)


@functools.cache
def table() -> dict[str, Cause]:
    """Every cause by key: SDPA's and each API's (an API's key may not repeat another's)."""
    out: dict[str, Cause] = {}
    from attnlab.judge import sink_causes

    for c in (*SDPA, *sink_causes.CAUSES, *apis.causes()):
        if c.key in out:
            raise ValueError(f"cause {c.key!r} defined twice")
        out[c.key] = c
    return out


def line_of(hint: str) -> str:
    """The key of the line that says a hint (itself, or the cause that lists it in ``hints``)."""
    return _hint_lines().get(hint, hint)


def of_tag(tag: str) -> str | None:
    """The cause a case tag is read as (None: a tag that names no cause)."""
    return _tag_causes().get(tag)


@functools.cache
def _hint_lines() -> dict[str, str]:
    return {h: c.key for c in table().values() for h in c.hints}


@functools.cache
def _tag_causes() -> dict[str, str]:
    return {t: c.key for c in table().values() for t in c.tags}
