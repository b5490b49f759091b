"""Attention sinks in the modules: MultiHeadAttention(sinks=True) and GPTConfig(sinks=True).

The module's sinks are a (n_head,) parameter that starts at 0 and reaches the form as ``sinks=``; with them the
module equals gpt-oss's formula written out, every form that takes sinks agrees, the KV cache decodes what the full
forward computes, and the sinks learn.
"""

import math

import pytest
import torch

from attnlab.nn import GPT, GPTConfig, KVCache, MultiHeadAttention


def x_of(B=2, T=7, C=32, seed=0, dtype=torch.float64):
    return torch.randn(B, T, C, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def module(impl="matrix", n_kv_head=2, seed=0, **kw):
    torch.manual_seed(seed)
    m = MultiHeadAttention(32, 4, n_kv_head, impl=impl, sinks=True, **kw).double()
    with torch.no_grad():  # sinks of both signs, one far above the scores: zeros would test only one point
        m.sinks.copy_(torch.tensor([1.5, -2.0, 0.0, 12.0]))
    return m


def gpt_oss_reference(m: MultiHeadAttention, x):
    """The module written out with gpt-oss's eager formula: scores and sink concatenated, the row max subtracted,
    softmax, the sink's column dropped."""
    q, k, v = m.project(x)
    G = m.n_head // m.n_kv_head
    k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
    s = q @ k.transpose(-2, -1) * m.scale
    T = s.shape[-1]
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -math.inf)
    c = torch.cat([s, m.sinks.view(1, -1, 1, 1).expand(*s.shape[:-1], 1)], dim=-1)
    w = torch.softmax(c - c.amax(dim=-1, keepdim=True), dim=-1)[..., :-1]
    B, _, T, _ = s.shape
    return m.proj((w @ v).transpose(1, 2).reshape(B, T, -1))


def test_sinks_are_a_zero_parameter_per_head_and_off_by_default():
    m = MultiHeadAttention(32, 4, impl="flash", sinks=True)
    assert isinstance(m.sinks, torch.nn.Parameter) and m.sinks.shape == (4,) and bool((m.sinks == 0).all())
    assert "sinks" in dict(m.named_parameters()) and "sinks=True" in repr(m)
    plain = MultiHeadAttention(32, 4)
    assert plain.sinks is None and "sinks" not in dict(plain.named_parameters())


@pytest.mark.parametrize("impl", ["loops", "matrix", "flash"])
def test_module_equals_gpt_oss_formula_and_gradients_reach_the_sinks(impl):
    m = module(impl)
    x = x_of(B=1 if impl == "loops" else 2)
    y, want = m(x), gpt_oss_reference(m, x)
    err = (y - want).abs().max().item()
    y.square().sum().backward()
    got = m.sinks.grad.clone()
    m.sinks.grad = None
    gpt_oss_reference(m, x).square().sum().backward()
    gerr = (got - m.sinks.grad).abs().max().item()
    print(f"{impl}: output {err:.1e}, dsinks {gerr:.1e}")
    assert err < 1e-12 and gerr < 1e-11 and got.abs().sum() > 0


def test_the_probes_explicit_path_keeps_the_sinks():
    """keep_scores computes the attention written out (for the probe): with sinks it must be the same function."""
    m = module("matrix")
    x = x_of()
    y = m(x)
    m.keep_scores = True
    err = (m(x) - y).abs().max().item()
    print(f"explicit path vs the form: {err:.1e}")
    assert err < 1e-13


@pytest.mark.parametrize("impl", ["matrix", "flash"])
def test_kv_cache_decoding_equals_the_full_forward(impl):
    m = module(impl)
    x = x_of(T=9)
    full = m(x)
    cache = KVCache()
    steps = [m(x[:, :5], cache)] + [m(x[:, t:t + 1], cache) for t in range(5, 9)]
    err = (torch.cat(steps, dim=1) - full).abs().max().item()
    print(f"{impl}: cached decoding vs full {err:.1e}")
    assert err < 1e-12


def test_attention_weights_drop_the_sinks_column():
    m = module("flash")
    w = m.attention_weights(x_of())
    sums = w.sum(-1)
    assert w.shape == (2, 4, 7, 7) and bool((sums < 1).all())
    assert bool((sums[:, 3] < 1e-4).all())  # head 3's sink (12) is far above its scores: it takes nearly all


def test_a_form_without_sinks_is_refused_at_construction():
    with pytest.raises(ValueError, match=r"sinks=True needs a form that takes sinks; 'sdpa' does not \(forms that "
                                         r"do: loops, matrix, flash, triton\)"):
        MultiHeadAttention(32, 4, sinks=True)
    with pytest.raises(TypeError, match="sinks must be True or False"):
        MultiHeadAttention(32, 4, impl="flash", sinks=1)
    with pytest.raises(ValueError, match="needs a form that takes sinks"):
        GPT(GPTConfig(sinks=True))


def test_gpt_with_sinks_trains_its_sinks_and_decodes_through_the_cache():
    """Each layer's sinks start at 0 (init_weights resets them too), learn, and cached generation equals the full
    forward."""
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=32, block_size=16, n_layer=2, n_head=2, d_model=16, impl="flash", sinks=True)
    model = GPT(cfg)
    sinks = [b.attn.sinks for b in model.blocks]
    assert all(s is not None and bool((s == 0).all()) for s in sinks)
    with torch.no_grad():
        sinks[0].fill_(3.0)
    model.init_weights()
    assert bool((sinks[0] == 0).all())
    idx = torch.randint(0, 32, (2, 12), generator=torch.Generator().manual_seed(1))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(2):
        _, loss = model(idx[:, :-1], idx[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert all(bool((s != 0).any()) for s in sinks)
    logits, _ = model(idx)
    caches = model.new_cache()
    steps = [model(idx[:, :6], caches=caches)[0]] + [model(idx[:, t:t + 1], caches=caches)[0] for t in range(6, 12)]
    err = (torch.cat(steps, dim=1) - logits).abs().max().item()
    print(f"GPT with sinks: cached logits vs full {err:.1e}")
    assert err < 1e-4
