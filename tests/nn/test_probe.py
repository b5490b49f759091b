"""The entropy probe on cases with a known answer."""

import math

import pytest
import torch

from attnlab.nn import GPT, GPTConfig, MultiHeadAttention, probe
from attnlab.nn.probe import entropy, head_stats, uniform_causal_entropy


def test_uniform_weights_give_log_of_the_number_of_keys():
    for S in (1, 4, 37):
        ent, peak = head_stats(torch.full((2, 3, 5, S), 1.0 / S))
        assert ent == pytest.approx([math.log(S)] * 3)
        assert peak == pytest.approx([1.0 / S] * 3)


def test_one_hot_weights_give_zero_entropy():
    w = torch.zeros(1, 1, 4, 6)
    w[..., 2] = 1.0
    assert entropy(w).abs().max() == 0
    assert head_stats(w) == ([0.0], [1.0])


def test_probe_of_a_layer_with_zero_queries_is_uniform_causal():
    """q = 0 makes every score 0: query i spreads evenly over its i + 1 keys."""
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 2)
    with torch.no_grad():
        m.qkv.weight[:16] = 0
        m.qkv.bias[:16] = 0
    r = probe(m, torch.randn(3, 10, 16))
    assert r.entropy == [pytest.approx([uniform_causal_entropy(10)] * 2)]
    assert r.peak == [pytest.approx([sum(1 / (i + 1) for i in range(10)) / 10] * 2)]


def test_probe_of_a_gpt_has_one_row_per_layer_and_head_and_restores_training_mode():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=20, block_size=8, n_layer=3, n_head=2, d_model=16, impl="sdpa"))
    model.train()
    r = probe(model, torch.randint(0, 20, (2, 8)))
    assert len(r.entropy) == 3 and all(len(h) == 2 for h in r.entropy)
    assert all(0 <= e <= math.log(8) for h in r.entropy for e in h)
    assert len(r.layer_entropy()) == 3 and model.training
    with pytest.raises(ValueError, match="MultiHeadAttention"):
        probe(torch.nn.Linear(2, 2), torch.zeros(1, 2))


def test_score_gradient_vanishes_when_the_softmax_saturates():
    """The explicit path equals the fast one, and d loss / d scores is tiny for a one-hot softmax."""
    from attnlab.nn import MultiHeadAttention
    from attnlab.nn.probe import score_grad_norms

    torch.manual_seed(0)
    x = torch.randn(2, 12, 32, dtype=torch.float64)
    norms = {}
    for scale in (0.01, 1e5):
        m = MultiHeadAttention(32, 4, 2, scale=scale).double()
        fast = m(x)
        m.keep_scores = True
        assert (m(x) - fast).abs().max() < 1e-12
        m.keep_scores = False
        norms[scale] = score_grad_norms(m, lambda m=m: m(x).square().sum())[0]
        assert m.scores is None and not m.keep_scores and m.qkv.weight.grad is not None
    print("||d loss / d scores||: nearly uniform", norms[0.01], "saturated", norms[1e5])
    assert norms[1e5] < 0.05 * norms[0.01]
