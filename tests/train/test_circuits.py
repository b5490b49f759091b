"""The head measurements behind the lesson's named heads, on weights built to have (or lack) each pattern; the
induction share is the head view's (one definition), and the measured text is the reader's kind."""

import json

import pytest
import torch

from attnlab.nn import GPT, GPTConfig
from attnlab.train import circuits, repeats
from attnlab.train.circuits import Circuits

CHARS = [chr(c) for c in range(32, 127)]


def _maps(n: int, kind: str) -> torch.Tensor:
    """(1, 1, 2n, 2n) causal weights with all of each row's weight on one key: one step back, after the earlier copy,
    or on the query itself."""
    T = 2 * n
    w = torch.zeros(1, 1, T, T)
    for i in range(T):
        j = {"previous": max(0, i - 1), "induction": i - n + 1 if i >= n else i, "self": i}[kind]
        w[0, 0, i, j] = 1.0
    return w


def _distinct(n: int) -> torch.Tensor:
    return torch.arange(n).repeat(2)[None]  # (1, 2n): n distinct tokens written twice


def test_scores_on_constructed_heads():
    n = 10
    prev, ind, same = (circuits.score([_maps(n, k)], _distinct(n))[0] for k in ("previous", "induction", "self"))
    assert prev.previous == pytest.approx(1.0) and prev.induction == 0.0
    assert ind.induction == pytest.approx(1.0) and ind.previous == 0.0
    assert same.previous == 0.0 and same.induction == 0.0
    uniform = torch.ones(1, 2, 2 * n, 2 * n).tril()
    uniform = uniform / uniform.sum(-1, keepdim=True)
    u = circuits.score([uniform], _distinct(n))
    assert u[0].previous < 0.3 and u[1].induction < 0.1 and (u[0].layer, u[1].head) == (0, 1)


def test_the_induction_share_is_the_head_views_on_any_text():
    from attnlab.lesson import heads

    g = torch.Generator().manual_seed(3)
    ids = torch.randint(5, (3, 24), generator=g)  # few symbols: most tokens have several earlier copies
    w = torch.rand(3, 2, 24, 24, generator=g).tril()
    w = w / w.sum(-1, keepdim=True)
    got = circuits.score([w], ids)
    for h in range(2):  # the batch mean of heads.induction, sequence by sequence
        want = sum(heads.induction(ids[b].tolist(), w[b, h].tolist()) for b in range(3)) / 3
        assert got[h].induction == pytest.approx(want, abs=1e-6)
    assert circuits.after_copies([7, 8, 7, 8, 7]) == {2: [1], 3: [2], 4: [1, 3]}  # every earlier copy counts
    assert heads.induction(list("abcd"), w[0, 0].tolist()) is None  # no token appeared before


def test_the_rules_decide_found():
    heads = [circuits.HeadScore(0, 0, 0.62, 0.01), circuits.HeadScore(1, 0, 0.03, 0.88)]
    c = Circuits(24, 16, 0, "abc", heads, loss_first=4.5, loss_repeat=0.2)
    assert c.previous_found and c.induction_found and c.copies and c.found
    assert c.best("induction").layer == 1
    weak = Circuits(24, 16, 0, "abc", [circuits.HeadScore(0, 0, 0.49, 0.5)], loss_first=4.5, loss_repeat=2.3)
    assert not weak.previous_found and weak.induction_found and not weak.copies and not weak.found
    assert Circuits.from_dict(json.loads(json.dumps(c.to_dict()))) == c


def test_an_untrained_model_has_no_such_heads():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=len(CHARS), block_size=48, n_layer=2, n_head=2, d_model=32))
    c = circuits.measure(model, CHARS)
    print(f"untrained: previous {c.best('previous').previous:.2f}, induction {c.best('induction').induction:.2f}, "
          f"loss {c.loss_first:.2f} -> {c.loss_repeat:.2f}; {c.describe()}")
    assert c.lengths == [10, 12, 14, 16, 18, 20, 22, 24] and c.segment == 24 and len(c.by_length) == 8  # 2n <= 48
    assert len(c.heads) == 4 and len(c.example) == 10 and set(c.example) <= set("abcdefghijklmnopqrstuvwxyz")
    said = "16 sequences of random lowercase letters, repeats allowed, 10 to 24 long, each written twice"
    assert c.describe() == said
    assert not c.found and not c.copies and c.best("induction").induction < 0.2 and c.lowest() < 0.2
    assert c.loss_first > 3.0  # about log(95): nothing predicts a random character


def test_repeated_rows_and_the_mix():
    ids = repeats.pool(CHARS)
    assert len(ids) == 94 and " " not in [CHARS[i] for i in ids]  # printable, no space
    g = torch.Generator().manual_seed(0)
    lower = repeats.letters(CHARS)
    assert [CHARS[i] for i in lower] == list("abcdefghijklmnopqrstuvwxyz")
    r = repeats.rows(50, 65, ids, g, lower)
    assert r.shape == (50, 65)
    repeated = 0
    for k, row in enumerate(r):  # each row a segment repeated: distinct characters, or (odd rows) letters drawn
        n = next(p for p in range(repeats.MIN_SEGMENT, 33) if torch.equal(row[p:], row[:-p]))
        if k % 2:
            assert set(row.tolist()) <= set(lower.tolist())
            repeated += len(set(row[:n].tolist())) < n
        else:
            assert len(set(row[:n].tolist())) == n
    assert repeated >= 10  # letters drawn with repeats: most of those segments repeat one
    x, y = torch.zeros(8, 64, dtype=torch.long), torch.ones(8, 64, dtype=torch.long)
    mx, my = repeats.mix(x, y, 0.5, ids, g)
    assert torch.equal(mx[4:], x[4:]) and torch.equal(mx[:4, 1:], my[:4, :-1])  # targets: the next character
    assert (mx[:4] != 0).any() and torch.equal(x, torch.zeros(8, 64, dtype=torch.long))  # the caller's batch kept
    with pytest.raises(ValueError, match="printable ASCII"):
        repeats.pool(["a", "b"])
