"""What kernels are given about a mask is derived from its function: the spans of keys each tile of rows sees.

(The triton form's closed-form predicates are checked against the function under Triton's interpreter,
in triton_interpreter_cases.py.)
"""

import pytest
import torch

from attnlab.kernels import masks


def _ids(g, N, S):
    return torch.randint(0, 4, (N, S), generator=g).sort(dim=-1).values


def _cases(g, N, L, S):
    w, n = int(torch.randint(1, 12, (1,), generator=g)), int(torch.randint(0, 9, (1,), generator=g))
    out = [masks.causal(), masks.causal_lower_right(), masks.sliding_window(w), masks.prefix_lm(n),
           masks.causal_lower_right() & masks.sliding_window(w),
           masks.Mask.from_mod(lambda b, h, i, j: ((i + 2 * j + h) % 7 == 0) & (i % 5 != 1))]  # empty rows
    if L == S:
        ids = _ids(g, N, S)
        out += [masks.document(ids), masks.document(ids[0]) & masks.causal()]
    return out


def _brute(dense: torch.Tensor, block: int, transpose: bool, per_batch: bool) -> torch.Tensor:
    """The spans read off the dense mask, one tile of rows at a time."""
    d = dense.any(dim=1)  # (Nb, L, S): over the heads
    if transpose:
        d = d.transpose(1, 2)
    if not per_batch:
        d = d.any(dim=0, keepdim=True)
    rows = []
    for b in range(d.shape[0]):
        row = []
        for _, r in masks.tile_slices(d.shape[1], block):
            seen = d[b, r].any(dim=0).nonzero()
            row.append([int(seen[0]), int(seen[-1]) + 1] if len(seen) else [0, 0])
        rows.append(row)
    return torch.tensor(rows, dtype=torch.int64).reshape(d.shape[0], -1, 2)


@pytest.mark.parametrize("seed", range(6))
def test_spans_are_the_keys_each_tile_of_rows_sees(seed):
    g = torch.Generator().manual_seed(seed)
    N, H = 2, 3
    L = int(torch.randint(1, 60, (1,), generator=g))
    S = L if seed % 2 else int(torch.randint(1, 60, (1,), generator=g))
    block = int(torch.randint(1, 20, (1,), generator=g))
    for mask in _cases(g, N, L, S):
        dense = mask.dense(N, H, L, S)
        for transpose in (False, True):
            for per_batch in (True, False):
                got = mask.spans(N, H, L, S, block, transpose, per_batch)
                want = _brute(dense, block, transpose, per_batch)
                assert torch.equal(got, want.expand_as(got)) and got.shape[0] in (1, N), (
                    mask, L, S, block, transpose, per_batch, got.tolist(), want.tolist())


def test_spans_are_computed_once_per_sizes():
    calls = []
    mask = masks.Mask.from_mod(lambda b, h, i, j: calls.append(1) or (j <= i))
    first = mask.spans(1, 1, 40, 40, 8)
    n = len(calls)
    assert mask.spans(1, 1, 40, 40, 8) is first and len(calls) == n
    assert first[0].tolist() == [[0, 8], [0, 16], [0, 24], [0, 32], [0, 40]]
    with pytest.raises(ValueError, match="block"):
        mask.spans(1, 1, 40, 40, 0)


def test_a_combined_mask_has_a_closed_form_only_where_one_says_it():
    ids = torch.arange(9) // 3
    r = (masks.document(ids) & masks.sliding_window(4) & masks.causal()).rule(9, 9)
    assert (r.off, r.window, r.prefix) == (0, 4, None) and torch.equal(r.doc[0], ids)
    assert (masks.prefix_lm(3) & masks.document(ids)).rule(9, 9).prefix == 3
    assert (masks.sliding_window(5) & masks.sliding_window(3)).rule(9, 9).window == 3
    assert masks.causal_lower_right().rule(4, 9).off == 5
    assert (masks.document(ids) & masks.document(ids)).rule(9, 9) is None  # two documents
    assert (masks.prefix_lm(2) & masks.sliding_window(3)).rule(9, 9) is None  # an OR beside a causal part
    assert (masks.causal() | masks.sliding_window(3)).rule(9, 9) is None
    assert (masks.Mask.from_mod(lambda b, h, i, j: j <= i) & masks.causal()).rule(9, 9) is None
