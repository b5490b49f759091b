"""What kernels are given about a mask is derived from its function: the spans of keys each tile of rows sees,
and the closed form (Rule) each mask declares, evaluated in PyTorch and held to the function as FlexAttention
evaluates it, one position at a time.

(The triton form's predicates are checked against both under Triton's interpreter, in
triton_interpreter_cases.py.)
"""

import dataclasses

import pytest
import torch

from attnlab.kernels import masks
from attnlab.kernels.mask_mod import PerIndex


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


def _per_position(mask, N, H, L, S, q0, q1, k0, k1) -> torch.Tensor:
    """The mask function on rows q0:q1, columns k0:k1, asked one position at a time (torch.vmap), as FlexAttention
    asks it: (N, H, r, c)."""
    per_index = PerIndex(lambda b, h, i, j: mask(b, h, i, j, L, S))
    grid = masks.index_grid(N, H, q0, q1, k0, k1)
    return per_index._per_index(*grid).expand(N, H, q1 - q0, k1 - k0)


def _disagreements(mask, rule, N, H, L, S, block=16) -> list:
    """Where ``rule`` and the mask's function differ, tile by tile (blocks of ``block``, the last one short):
    [(b, h, i, j), ...]."""
    found = []
    for _, rows in masks.tile_slices(L, block):
        for _, cols in masks.tile_slices(S, block):
            lims = (rows.start, rows.stop, cols.start, cols.stop)
            want = _per_position(mask, N, H, L, S, *lims)
            got = rule.visible(*masks.index_grid(N, H, *lims)).expand_as(want)
            found += [(b, h, i + rows.start, j + cols.start) for b, h, i, j in (got != want).nonzero().tolist()]
    return found


def _every_rule_mask(L, S, N=2):
    """Every mask kind the library defines that has a closed form, from its spec where it has one, at L x S."""
    out = [masks.from_spec(spec) for spec in ("causal", "causal_lower_right", "sliding_window:1",
                                              "sliding_window:7", "sliding_window:5000", "prefix_lm:0",
                                              "prefix_lm:9", "prefix_lm:5000")]
    if L == S:  # document masks: queries and keys are the same positions
        ids = torch.randint(0, 4, (N, S), generator=torch.Generator().manual_seed(L))  # a document may recur
        out += [masks.from_spec("document:3", S), masks.from_spec(f"document:{S}", S), masks.document(ids),
                masks.causal_lower_right() & masks.sliding_window(6), masks.document(ids) & masks.causal(),
                masks.document(ids.sort(dim=-1).values) & masks.sliding_window(5) & masks.causal(),
                masks.prefix_lm(4) & masks.document(ids[0])]
    return out


@pytest.mark.parametrize("L, S", [(37, 53), (53, 37), (45, 45), (1, 30)])
def test_every_masks_rule_evaluated_in_pytorch_is_its_function(L, S):
    assert {s.partition(":")[0] for s in masks.SPECS} == {"causal", "causal_lower_right", "sliding_window",
                                                          "prefix_lm", "document"}  # a new kind: add it above
    for mask in _every_rule_mask(L, S):
        rule = mask.rule(L, S)
        assert rule is not None, mask
        assert _disagreements(mask, rule, 2, 3, L, S) == [], (mask, L, S)


def _wrong(rule: masks.Rule) -> list:
    """Rules one step off the right one: each part moved by one, or the documents of one position swapped."""
    out = [dataclasses.replace(rule, off=rule.off + 1)] if rule.off is not None else [masks.Rule(off=0, doc=rule.doc)]
    if rule.window is not None:
        out.append(dataclasses.replace(rule, window=rule.window + 1))
    if rule.prefix is not None:
        out.append(dataclasses.replace(rule, prefix=rule.prefix + 1))
    if rule.doc is not None:
        doc = rule.doc.clone()
        doc[:, 10] += 1
        out.append(dataclasses.replace(rule, doc=doc))
    return out


@pytest.mark.parametrize("mask", [masks.causal(), masks.causal_lower_right(), masks.sliding_window(7),
                                  masks.prefix_lm(9), masks.from_spec("document:3", 45),
                                  masks.from_spec("document:3", 45) & masks.sliding_window(5) & masks.causal()],
                         ids=lambda m: m.name)
def test_a_rule_one_step_off_its_function_is_caught(mask):
    L = S = 45
    for wrong in _wrong(mask.rule(L, S)):
        found = _disagreements(mask, wrong, 2, 3, L, S)
        print(mask, wrong.off, wrong.window, wrong.prefix, found[:3])
        assert found, (mask, wrong)
