"""The attention modules: shapes, gradients, every form, GQA/MQA, tied K/V and the KV cache."""

import math

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab import kernels
from attnlab.nn import CausalSelfAttention, KVCache, MultiHeadAttention, resolve_scale


def x_of(B=2, T=7, C=32, seed=0, dtype=torch.float64):
    return torch.randn(B, T, C, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_shapes_and_gradients():
    torch.manual_seed(0)
    m = CausalSelfAttention(32, 4, dropout=0.1)
    x = x_of(dtype=torch.float32).requires_grad_()
    y = m(x)
    assert y.shape == (2, 7, 32)
    y.square().sum().backward()
    for name, p in [("x", x), *m.named_parameters()]:
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


def test_causal_future_tokens_do_not_change_the_past():
    torch.manual_seed(0)
    m = CausalSelfAttention(32, 4).double()
    x = x_of()
    x2 = x.clone()
    x2[:, 4:] += 1.0
    assert torch.equal(m(x)[:, :4], m(x2)[:, :4])
    assert not torch.allclose(m(x)[:, 4:], m(x2)[:, 4:])


def test_matches_a_hand_written_reference_for_every_scale():
    torch.manual_seed(0)
    x = x_of(T=5)
    for scale, s in [("sqrt", 1 / math.sqrt(8)), ("none", 1.0), ("inv", 1 / 8), (0.3, 0.3)]:
        m = CausalSelfAttention(32, 4, scale=scale).double()
        q, k, v = m.qkv(x).split(32, dim=-1)  # (B, T, C) each
        q, k, v = (t.view(2, 5, 4, 8).transpose(1, 2) for t in (q, k, v))  # (B, H, T, d)
        w = torch.softmax((q @ k.transpose(-2, -1) * s).masked_fill(torch.ones(5, 5).triu(1).bool(), -math.inf), -1)
        ref = m.proj((w @ v).transpose(1, 2).reshape(2, 5, 32))
        assert (m(x) - ref).abs().max() < 1e-12, scale
        assert m.scale == pytest.approx(s)


@pytest.mark.parametrize("form", sorted(attnlab.forms()))
def test_every_form_gives_the_same_module_output(form):
    torch.manual_seed(0)
    ref = MultiHeadAttention(32, 4, 2, rope=True).double()
    m = MultiHeadAttention(32, 4, 2, rope=True, impl=form).double()
    m.load_state_dict(ref.state_dict())
    x = x_of(B=1, T=6)
    xr, xm = x.clone().requires_grad_(), x.clone().requires_grad_()
    out, exp = m(xm), ref(xr)  # (B, T, C) each
    out.sum().backward()
    exp.sum().backward()
    print(form, "max |module(form) - module(sdpa)| =", (out - exp).abs().max().item())
    assert (out - exp).abs().max() < 1e-10
    assert (xm.grad - xr.grad).abs().max() < 1e-10


@pytest.mark.parametrize("n_kv_head", [2, 1])
def test_gqa_and_mqa_equal_full_attention_with_repeated_heads(n_kv_head):
    torch.manual_seed(0)
    H, d = 4, 8
    g = MultiHeadAttention(32, H, n_kv_head).double()
    assert g.qkv.weight.shape == (32 + 2 * n_kv_head * d, 32)
    full = MultiHeadAttention(32, H, H).double()
    wq, wk, wv = g.qkv.weight.split([H * d, n_kv_head * d, n_kv_head * d])
    bq, bk, bv = g.qkv.bias.split([H * d, n_kv_head * d, n_kv_head * d])

    def rep(t):  # each key/value head serves H / n_kv_head consecutive query heads
        return t.view(n_kv_head, d, *t.shape[1:]).repeat_interleave(H // n_kv_head, 0).reshape(H * d, *t.shape[1:])

    with torch.no_grad():
        full.qkv.weight.copy_(torch.cat([wq, rep(wk), rep(wv)]))
        full.qkv.bias.copy_(torch.cat([bq, rep(bk), rep(bv)]))
        full.proj.load_state_dict(g.proj.state_dict())
    x = x_of()
    assert (g(x) - full(x)).abs().max() < 1e-12


def test_tied_kv_uses_the_key_as_the_value():
    torch.manual_seed(0)
    m = MultiHeadAttention(32, 4, tie_kv=True).double()
    assert m.qkv.weight.shape == (64, 32)
    q, k, v = m.project(x_of())
    assert v is k


@pytest.mark.parametrize("kw", [{}, {"n_kv_head": 2, "rope": True}, {"n_kv_head": 1, "rope": True},
                                {"tie_kv": True}])
def test_kv_cache_prefill_then_decode_equals_full_forward(kw):
    torch.manual_seed(0)
    m = MultiHeadAttention(32, 4, **kw).double().eval()
    x = x_of(T=11)
    full = m(x)
    cache = KVCache()
    parts = [m(x[:, :4], cache)] + [m(x[:, t:t + 1], cache) for t in range(4, 8)] + [m(x[:, 8:], cache)]
    assert len(cache) == 11
    assert (torch.cat(parts, dim=1) - full).abs().max() < 1e-12


def test_single_query_decode_step_needs_lower_right_alignment():
    """pytorch#144858: with is_causal=True one new query sees only the first cached key."""
    torch.manual_seed(0)
    m = MultiHeadAttention(32, 4).double().eval()
    x = x_of(T=6)
    full = m(x)
    q, k, v = m.project(x)
    wrong = kernels.attention(q[:, :, -1:], k, v, is_causal=True, impl="sdpa")  # upper-left: sees key 0 only
    assert torch.allclose(wrong, F.scaled_dot_product_attention(q[:, :, -1:], k[:, :, :1], v[:, :, :1]))
    wrong_out = m.proj(wrong.transpose(1, 2).reshape(2, 1, 32))
    assert (wrong_out - full[:, -1:]).abs().max() > 1e-3
    cache = KVCache()
    m(x[:, :5], cache)
    assert (m(x[:, 5:], cache) - full[:, -1:]).abs().max() < 1e-12


def test_bad_arguments_name_themselves():
    for kwargs, word in [({"n_head": 5}, "n_head"), ({"n_kv_head": 3}, "n_kv_head"), ({"scale": "half"}, "scale"),
                         ({"scale": -1.0}, "scale"), ({"impl": "nope"}, "impl"), ({"dropout": 1.5}, "dropout"),
                         ({"d_model": 0}, "d_model")]:
        args = {"d_model": 32, "n_head": 4, **kwargs}
        with pytest.raises(ValueError, match=word):
            MultiHeadAttention(**args)
    with pytest.raises(TypeError, match="scale"):
        resolve_scale(None, 8)
    with pytest.raises(ValueError, match="x must have shape"):
        CausalSelfAttention(32, 4)(torch.zeros(2, 5, 16))
    with pytest.raises(ValueError, match="even head_dim"):
        MultiHeadAttention(30, 2, rope=True)


@pytest.mark.parametrize("T", [1, 6, 17])
def test_the_lessons_module_equals_multi_head_attention(T):
    """The ~20-line CausalSelfAttention and the library's module, on the same weights: the same output and gradients."""
    torch.manual_seed(0)
    lesson = CausalSelfAttention(32, 4).double()
    lib = MultiHeadAttention(32, 4).double()
    lib.load_state_dict(lesson.state_dict())  # the same parameter names and shapes
    x = x_of(B=3, T=T)
    xl, xm = x.clone().requires_grad_(), x.clone().requires_grad_()
    yl, ym = lesson(xl), lib(xm)
    g = torch.randn_like(yl)
    (yl * g).sum().backward()
    (ym * g).sum().backward()
    out_err, grad_err = (yl - ym).abs().max().item(), (xl.grad - xm.grad).abs().max().item()
    w_err = max((a.grad - b.grad).abs().max().item() for a, b in zip(lesson.parameters(), lib.parameters(),
                                                                      strict=True))
    print(f"T={T}: max |lesson - MultiHeadAttention| out {out_err:.1e}, dx {grad_err:.1e}, dweights {w_err:.1e}")
    assert out_err < 1e-12 and grad_err < 1e-12 and w_err < 1e-12


def test_the_lessons_module_is_short():
    """The module the page quotes stays about twenty lines of code (no docstrings, comments or blank lines)."""
    import inspect

    from attnlab.nn import causal

    code = [ln for ln in inspect.getsource(causal.CausalSelfAttention).splitlines()
            if ln.strip() and not ln.strip().startswith(("#", '"""'))]
    assert len(code) <= 26, len(code)
