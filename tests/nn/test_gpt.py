"""The tiny GPT: shapes, its documented initialisation, config checks and decoding through the cache."""

import dataclasses
import math

import pytest
import torch

from attnlab.nn import GPT, GPTConfig


def small(**kw):
    return GPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=4, d_model=32, **kw)


def test_forward_shapes_and_first_loss_near_log_vocab():
    torch.manual_seed(0)
    model = GPT(small())
    idx, targets = torch.randint(0, 50, (2, 3, 16))
    logits, loss = model(idx, targets)  # random targets: about log(50) plus half the logit variance
    assert logits.shape == (3, 16, 50)
    assert math.log(50) < loss.item() < math.log(50) + 1.0
    assert model.wte.weight is not None and model.num_params() > 0
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_init_gives_unit_variance_queries_and_keys():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50, block_size=64, n_layer=1, n_head=2, d_model=128))
    x = model.blocks[0].ln_1(model.wte(torch.randint(0, 50, (8, 64))))
    q, k, _ = model.blocks[0].attn.project(x)
    assert 0.7 < q.var().item() < 1.3 and 0.7 < k.var().item() < 1.3


def test_config_is_frozen_and_checked():
    cfg = small()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.n_layer = 3
    assert dataclasses.replace(cfg, n_layer=3).n_layer == 3 and cfg.n_layer == 2
    for kw, word in [({"n_layer": 0}, "n_layer"), ({"position": "abs"}, "position"), ({"scale": "x"}, "scale"),
                     ({"d_model": 30}, "d_model")]:
        with pytest.raises(ValueError, match=word):
            dataclasses.replace(cfg, **kw)


@pytest.mark.parametrize("kw", [{}, {"position": "rope", "n_kv_head": 2}, {"n_kv_head": 1, "tie_kv": True}])
def test_cached_decoding_equals_the_full_forward(kw):
    torch.manual_seed(0)
    model = GPT(small(**kw)).double().eval()
    idx = torch.randint(0, 50, (2, 12))
    full, _ = model(idx)
    caches = model.new_cache()
    steps = [model(idx[:, :5], caches=caches)[0]] + [model(idx[:, t:t + 1], caches=caches)[0] for t in range(5, 12)]
    assert (torch.cat(steps, dim=1) - full).abs().max() < 1e-10


def test_generate_runs_past_the_block_size_and_is_reproducible():
    torch.manual_seed(0)
    model = GPT(small())
    idx = torch.randint(0, 50, (1, 3))
    a = model.generate(idx, 40, generator=torch.Generator().manual_seed(1), top_k=5)
    b = model.generate(idx, 40, generator=torch.Generator().manual_seed(1), top_k=5)
    assert a.shape == (1, 43) and torch.equal(a, b) and torch.equal(a[:, :3], idx)
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="temperature"):
        model.generate(idx, 2, temperature=0)
