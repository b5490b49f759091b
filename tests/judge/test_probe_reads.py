"""Probes that reach what the small ones could not, each shown on a kernel with the bug it measures: the head map
without GQA (a kv head read as h // Hkv reads head 0 for every head there, and raises under GQA), a soft-cap's form
read as its constants (cap * tanh(s) against cap * tanh(s / cap)), a window over a sequence longer than a kernel's
tiles (a window's first key tile placed from a query tile's last row), a sequence of a single query (a decode fast
path that drops the window) and a block mask whose blocks differ from one batch row to the next (the block lists of
batch row 0 read for every row). Each line is a measurement, checked against the function's own output."""

import pytest
import torch

from attnlab.judge import apis, diagnose, verify
from tests import api_functions as R


def _lines(fn, api: str, names: tuple[str, ...], dtypes=("float32", "float64")):
    cases = [c for c in apis.cases(api, list(dtypes), long=False, sinks=False) if c.name in names]
    assert {c.name for c in cases} == set(names), [c.name for c in cases]
    r = verify.verify({"f": apis.Adapted(fn, api)}, cases, timeout=None, check_dropout=False, backward=False)
    assert not r.passed
    lines = diagnose.diagnose(r, "f")
    for d in lines:
        print(d.key, d.text)
    return lines


def _measured(lines, key: str) -> list[str]:
    return [d.text for d in lines if d.key == f"measured:{key}"]


def _kv_head_over_hkv(q, k, v, **kw):
    """Wrong: query head h reads kv head h // Hkv (the count of kv heads, not the group size)."""
    H, Hkv = q.shape[2], k.shape[2]
    idx = (torch.arange(H) // Hkv).clamp(max=Hkv - 1)
    return R.flash_attn_func(q, k[:, :, idx], v[:, :, idx], **kw)


def test_a_kv_head_read_as_h_over_hkv_is_measured_without_gqa():
    said = _measured(_lines(_kv_head_over_hkv, "flash-attn", ("probe: heads, 4 heads, no GQA",)), "heads")
    assert said and "query heads read kv heads [0, 0, 0, 0]; the spec's [0, 1, 2, 3]" in said[0], said


def _tanh_of_s(q, k, v, softmax_scale=None, softcap=0.0, **kw):
    """Wrong: the soft-cap is softcap * tanh(s), not softcap * tanh(s / softcap)."""
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    if softcap > 0:
        return R.flash_attn_func(q, k, v, softmax_scale=scale * softcap, softcap=softcap, **kw)
    return R.flash_attn_func(q, k, v, softmax_scale=scale, **kw)


def test_a_soft_cap_is_read_as_its_form_with_both_constants():
    said = _measured(_lines(_tanh_of_s, "flash-attn", ("probe: scores, softcap",)), "scores")
    assert said and "is 2 * tanh(s / 1) of the scaled score s" in said[0] and "the spec's 2 * tanh(s / 2)" in said[0], \
        said


def test_a_score_function_of_no_tanh_form_is_not_given_one():
    """A score function that is neither a factor nor a soft-cap (a cap of |s|) is said to differ, with no form."""
    def capped_abs(q, k, v, softmax_scale=None, softcap=0.0, **kw):
        out = _tanh_of_s(q, k, v, softmax_scale=softmax_scale, softcap=softcap, **kw)
        return R.flash_attn_func(q.abs(), k.abs(), v, softmax_scale=softmax_scale, softcap=softcap, **kw) \
            if softcap > 0 else out

    said = _measured(_lines(capped_abs, "flash-attn", ("probe: scores, softcap",), dtypes=("float64",)), "scores")
    assert said and "tanh" not in said[0] and "not by one factor" in said[0], said


def _window_from_last_row(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                          softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Wrong: a query tile of 64 rows starts its keys at the tile of 32 that holds its *last* row's first key."""
    B, L, H, D = q.shape
    S = k.shape[1]
    seen = R._flash_seen(L, S, causal, window_size, q.device).clone()
    if window_size[0] >= 0:
        for m0 in range(0, L, 64):
            m1 = min(m0 + 64, L)
            lo = max(m1 - 1 + S - L - window_size[0], 0)
            seen[m0:m1, :lo - lo % 32] = False
    scale = D ** -0.5 if softmax_scale is None else softmax_scale
    out, lse = R._attend(*(t.transpose(1, 2) for t in (q, k, v)), scale, seen, None, softcap)
    out = out.transpose(1, 2)
    return (out, lse, None) if return_attn_probs else out


def test_a_windows_first_key_tile_placed_from_a_tiles_last_row_is_measured_on_a_long_window():
    said = _measured(_lines(_window_from_last_row, "flash-attn", ("probe: weights, window (3, 2), L=S=150: tiles of "
                                                                   "32 to 128",)), "visibility")
    assert said and "query 0 sees keys none; the spec's sees keys 0-2" in said[0], said


def _decode_path_without_window(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, window_size=(-1, -1),
                                **kw):
    """Wrong: a sequence of one query takes a fast path that attends every key of its sequence (no window)."""
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    outs, lses = [], []
    for b in range(len(cq) - 1):
        one = cq[b + 1] - cq[b] == 1
        out, lse, _ = R.flash_attn_varlen_func(q[cq[b]:cq[b + 1]], k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]],
                                               cu_seqlens_q[b:b + 2] - cq[b], cu_seqlens_k[b:b + 2] - ck[b],
                                               max_seqlen_q, max_seqlen_k,
                                               window_size=(-1, -1) if one else window_size,
                                               **{**kw, "return_attn_probs": True})
        outs.append(out)
        lses.append(lse)
    out, lse = torch.cat(outs), torch.cat(lses, dim=-1)
    return (out, lse, None) if kw.get("return_attn_probs") else out


def test_a_decode_path_that_drops_the_window_is_measured_on_a_sequence_of_one_query():
    said = _measured(_lines(_decode_path_without_window, "flash-attn-varlen",
                            ("probe: weights, window (3, 2), a sequence of 140 and one of a single query",)),
                     "visibility")
    assert said and "query 140" in said[0] and "sees keys 140-148; the spec's sees keys 145-148" in said[0], said


def _blocks_of_row_zero(query, key, value, score_mod=None, block_mask=None, **kw):
    """Wrong: the block mask's block lists are read at batch row 0 for every row; mask_mod still runs (with the
    row's own b) on the blocks listed partial, and a block listed full skips it."""
    if block_mask is None or block_mask.kv_num_blocks.shape[0] == 1:
        return R.flex_attention(query, key, value, score_mod=score_mod, block_mask=block_mask, **kw)
    B, L, S = query.shape[0], query.shape[-2], key.shape[-2]
    bq, bk = block_mask.BLOCK_SIZE
    dense = block_mask.to_dense()  # (B, H, L / bq, S / bk): 1 where a block is visited
    full = torch.zeros_like(dense)
    if block_mask.full_kv_num_blocks is not None:
        for i in range(dense.shape[2]):
            n = int(block_mask.full_kv_num_blocks[0, 0, i])
            full[:, :, i, block_mask.full_kv_indices[0, 0, i, :n].long()] = 1

    def mask_mod(b, h, i, j):
        visited = dense[0, 0, i // bq, j // bk] > 0
        return visited & ((full[0, 0, i // bq, j // bk] > 0) | block_mask.mask_mod(b, h, i, j))

    from torch.nn.attention.flex_attention import create_block_mask

    wrong = create_block_mask(mask_mod, B, 1, L, S, device="cpu", BLOCK_SIZE=(bq, bk))
    return R.flex_attention(query, key, value, score_mod=score_mod, block_mask=wrong, **kw)


def test_a_block_mask_read_at_batch_row_zero_is_measured_where_the_rows_blocks_differ():
    said = _measured(_lines(_blocks_of_row_zero, "flex",
                            ("probe: weights, documents per batch row, causal, B=2, L=S=256: blocks differ by row",),
                            dtypes=("float32",)), "visibility")
    assert said and "(batch 1)" in said[0], said


def _window_side_zero_unbounded(q, k, v, window_size=(-1, -1), **kw):
    """Wrong: a window side of 0 is read as unbounded (`if left > 0`), as -1."""
    return R.flash_attn_func(q, k, v, window_size=tuple(-1 if w == 0 else w for w in window_size), **kw)


def test_a_window_side_of_zero_read_as_unbounded_is_measured():
    said = _measured(_lines(_window_side_zero_unbounded, "flash-attn", ("probe: weights, window (4, 0), L<S",)),
                     "visibility")
    assert said and "query 0 sees keys 12-28; the spec's sees keys 12-16" in said[0], said


def _alibi_top_left_in_backward(q, k, v, return_attn_probs=False, **kw):
    """Wrong: the forward right; its gradients those of ALiBi aligned top-left, |i - j| (the backward recomputes the
    bias without the S - L shift)."""
    out, lse, _ = R.flash_attn_func(q, k, v, return_attn_probs=True, **kw)
    slopes = kw.get("alibi_slopes")
    if slopes is not None:
        L, S, H = q.shape[1], k.shape[1], q.shape[2]
        bias = -slopes.double().view(1, H, 1, 1) * (torch.arange(L)[:, None] - torch.arange(S)[None, :]).abs()
        scale = kw.get("softmax_scale") or q.shape[-1] ** -0.5
        wrong = R._attend(*(t.transpose(1, 2) for t in (q, k, v)), scale, None, bias.to(q.dtype))[0].transpose(1, 2)
        out = out.detach() + (wrong - wrong.detach())
    return (out, lse, None) if return_attn_probs else out


def test_a_backward_whose_alibi_is_top_left_is_measured_as_its_bias():
    cases = [c for c in apis.cases("flash-attn", ["float64"], long=False, sinks=False)
             if c.name == "probe: gradients, ALiBi (H,), L<S"]
    assert len(cases) == 1
    r = verify.verify({"f": apis.Adapted(_alibi_top_left_in_backward, "flash-attn")}, cases, timeout=None,
                      check_dropout=False)
    said = _measured(diagnose.diagnose(r, "f"), "backward")
    assert said and "their bias is -0.0625 * |i - j|; the spec's -0.0625 * |i + S - L - j|" in said[0], said


def _block_mask_of_kv_head(query, key, value, score_mod=None, block_mask=None, enable_gqa=False, **kw):
    """Wrong: under GQA the block mask (its lists and its mask_mod) is read at the query head's kv head."""
    if block_mask is None or not enable_gqa or block_mask.kv_num_blocks.shape[1] == 1:
        return R.flex_attention(query, key, value, score_mod=score_mod, block_mask=block_mask, enable_gqa=enable_gqa,
                                **kw)
    from torch.nn.attention.flex_attention import create_block_mask

    B, H, L, S = query.shape[0], query.shape[1], query.shape[-2], key.shape[-2]
    G = H // key.shape[1]
    wrong = create_block_mask(lambda b, h, i, j: block_mask.mask_mod(b, h // G, i, j), B, H, L, S, device="cpu",
                              BLOCK_SIZE=block_mask.BLOCK_SIZE)
    return R.flex_attention(query, key, value, score_mod=score_mod, block_mask=wrong, enable_gqa=enable_gqa, **kw)


@pytest.mark.slow  # a block mask of four heads made twice over 256 keys: over 2 s of CPU
def test_a_block_mask_read_at_the_kv_head_is_measured_as_another_heads_mask():
    said = _measured(_lines(_block_mask_of_kv_head, "flex", ("probe: weights, documents per head, causal, GQA 4/2, "
                                                             "L=S=256: blocks differ by head",), dtypes=("float32",)),
                     "visibility")
    assert said and "head 1 sees head 0's, head 2 head 1's, head 3 head 1's" in said[0], said


def _held6(name: str):
    """A kernel of the sixth blind corpus (tests/unseen/held6), after its one run."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "unseen" / "held6" / "kernels" / "flash-attn-varlen" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"held6_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.kernel


@pytest.mark.slow  # verify on a probe: over 0.3 s of CPU
def test_a_varlen_alibi_added_before_the_soft_cap_is_measured_as_a_bias():
    """held6's varlen_01 adds ALiBi before the soft-cap: its weights' bias is no slope times a distance (varlen had no
    case of the two together)."""
    said = _measured(_lines(_held6("varlen_01"), "flash-attn-varlen",
                            ("probe: weights, ALiBi (H,), softcap, 3 sequences",)), "bias")
    assert said and "the spec's bias" in said[0], said
