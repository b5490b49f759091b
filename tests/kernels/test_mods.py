"""Score modifiers: gradcheck in float64 for each built-in on loops, matrix and flash; bad input."""

import copy
import math

import pytest
import torch

import attnlab
from attnlab import mods
from attnlab.kernels import mods as kmods
from attnlab.kernels.online import LOG2E
from tests.helpers import qkv

FORMS = {"loops": {}, "matrix": {}, "flash": {"block_q": 2, "block_k": 3}}  # small tiles: several per row


def _inputs(seed=0, H=4, Hkv=2, L=4, S=5, E=3):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (t.requires_grad_() for t in qkv(1, H, Hkv, L, S, E, generator=g))
    return q, k, v, g


def _builtins(H, g):
    table = torch.randn(H, 8, generator=g, dtype=torch.float64, requires_grad=True)
    slopes = torch.rand(H, generator=g, dtype=torch.float64, requires_grad=True)
    return {
        "softcap": mods.softcap(1.5),
        "alibi": mods.alibi(H),
        "alibi slopes": mods.alibi(slopes=slopes),
        "relative_bias": mods.relative_bias(table, max_distance=16),
        "relative_bias causal then softcap": mods.compose(
            mods.relative_bias(table, max_distance=16, bidirectional=False), mods.softcap(2.0)),
    }


@pytest.mark.parametrize("impl", list(FORMS))
@pytest.mark.parametrize("name", ["softcap", "alibi", "alibi slopes", "relative_bias",
                                  "relative_bias causal then softcap"])
def test_gradcheck_each_builtin_each_form(impl, name):
    q, k, v, g = _inputs()
    mod = _builtins(4, g)[name]

    def f(q, k, v, *params):  # params are the modifier's own tensors: gradcheck perturbs them in place
        return attnlab.attention(q, k, v, is_causal=True, enable_gqa=True, impl=impl, score_mod=mod, **FORMS[impl])

    # the loops form in fast mode: the Jacobians compared along random directions (two calls, not two per input
    # element), which any wrong entry of its gradient still changes
    assert torch.autograd.gradcheck(f, (q, k, v, *mod.params), fast_mode=impl == "loops")


@pytest.mark.parametrize("impl", ["loops", "flash"])
def test_forms_agree_with_matrix_under_a_float_mask(impl):
    q, k, v, g = _inputs(seed=3, L=5, S=7)
    bias = torch.randn(1, 4, 5, 7, generator=g, dtype=torch.float64)
    mod = mods.compose(mods.alibi(4), mods.softcap(1.0))
    want = attnlab.attention(q, k, v, bias, enable_gqa=True, impl="matrix", score_mod=mod)
    got = attnlab.attention(q, k, v, bias, enable_gqa=True, impl=impl, score_mod=mod, **FORMS[impl])
    err = (got - want).abs().max().item()
    print(f"{impl} vs matrix: {err:.2e}")
    assert err < 1e-12


def test_modifier_applies_before_the_mask_as_flex_does():
    """softcap of a masked (-inf) score would be -cap, not -inf: the mask must come after the modifier."""
    q, k, v, _ = _inputs(H=2, Hkv=2)
    out = attnlab.attention(q, k, v, is_causal=True, impl="matrix", score_mod=mods.softcap(0.5))
    first = v[:, :, 0]  # query 0 sees only key 0
    assert torch.allclose(out[:, :, 0], first)


def test_alibi_slopes_are_the_papers():
    assert torch.allclose(mods.alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)], dtype=torch.float64))
    s6 = mods.alibi_slopes(6)  # not a power of two: 4 slopes of 4 heads, then every other of 8
    assert torch.allclose(s6[:4], mods.alibi_slopes(4)) and torch.allclose(s6[4:], mods.alibi_slopes(8)[0::2][:2])


def test_t5_buckets_match_transformers():
    T = pytest.importorskip("transformers")
    from transformers.models.t5.modeling_t5 import T5Attention

    rel = torch.arange(-200, 200).view(1, -1)
    for bidirectional in (True, False):
        want = T5Attention._relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=32, max_distance=128)
        got = mods.t5_bucket(rel, 32, 128, bidirectional)
        assert torch.equal(got, want), T.__version__


@pytest.mark.parametrize("impl", list(FORMS))
def test_bad_modifiers_are_named(impl):
    q, k, v, _ = _inputs()
    kw = dict(enable_gqa=True, impl=impl, **FORMS[impl])
    with pytest.raises(TypeError, match="score_mod must be"):
        attnlab.attention(q, k, v, score_mod=3, **kw)
    with pytest.raises(ValueError, match=r"score modifier squash returned shape \(1, .*\) for scores of shape"):
        attnlab.attention(q, k, v, score_mod=mods.Mod.from_fn(lambda s, b, h, i, j: s.sum(-1, keepdim=True),
                                                              "squash"), **kw)
    with pytest.raises(TypeError, match="score modifier to_f32 returned dtype torch.float32"):
        attnlab.attention(q, k, v, score_mod=mods.Mod.from_fn(lambda s, b, h, i, j: s.float(), "to_f32"), **kw)
    with pytest.raises(ValueError, match=r"score modifier alibi holds 2 heads but the attention has at least [34]"):
        attnlab.attention(q, k, v, score_mod=mods.alibi(2), **kw)


def test_sdpa_form_refuses_a_modifier_and_names_the_forms_that_take_one():
    q, k, v, _ = _inputs(H=2, Hkv=2)
    with pytest.raises(ValueError, match="form 'sdpa' takes no score_mod; forms that do: loops, matrix, flash"):
        attnlab.attention(q, k, v, impl="sdpa", score_mod=mods.softcap(1.0))


def test_builtin_arguments_are_checked():
    with pytest.raises(ValueError, match="softcap needs a positive"):
        mods.softcap(0)
    with pytest.raises(ValueError, match="either num_heads or slopes"):
        mods.alibi()
    with pytest.raises(ValueError, match="table of shape"):
        mods.relative_bias(torch.zeros(8))
    with pytest.raises(ValueError, match="max_distance"):
        mods.relative_bias(torch.zeros(2, 8), max_distance=1)
    with pytest.raises(TypeError, match="compose takes one or more"):
        mods.compose()


@pytest.mark.parametrize("name", ["softcap", "softcap 50", "alibi", "alibi slopes", "relative_bias",
                                  "alibi, 8 slopes for 4 heads", "relative_bias, 8 rows for 4 heads"])
@pytest.mark.parametrize("mask", ["causal", "window"])
def test_the_flash_forms_fused_builtins_are_their_functions(name, mask):
    """[P12] flash fuses a built-in (a mods.Fused) instead of calling its function: the same output and every
    gradient (q, k, v and the modifier's tensor) as the function called on each tile under autograd, in float64,
    over several tiles with GQA; and the function is never called on the fused path. (A cap of 1.5 takes the
    bounded path; Gemma 2's 50, on scores made large, the running max.)"""
    q, k, v, g = _inputs(seed=5, L=11, S=11, E=4)
    if name == "softcap 50":
        q, k = (t.detach().mul(6).requires_grad_() for t in (q, k))
    if name.endswith("for 4 heads"):  # a tensor with more heads than the attention: the rest get gradient 0
        more = torch.rand(8, *(() if "alibi" in name else (8,)), generator=g, dtype=torch.float64, requires_grad=True)
        fused = mods.alibi(slopes=more) if "alibi" in name else mods.relative_bias(more, max_distance=16)
    else:
        fused = mods.softcap(50.0) if name == "softcap 50" else _builtins(4, g)[name]
    calls = []

    def counted(*a):
        calls.append(1)
        return fused.fn(*a)

    plain = mods.Mod(counted, fused.name + " as a function", fused.params)  # the same function, no fused form
    spy = copy.copy(fused)  # the fused form, its function spied on
    spy.fn = counted
    kw = dict(enable_gqa=True, impl="flash", block_q=4, block_k=3)
    kw |= {"is_causal": True} if mask == "causal" else {"attn_mask": attnlab.masks.sliding_window(4)}
    go = torch.randn(1, 4, 11, 4, generator=g, dtype=torch.float64)
    wrt = (q, k, v, *fused.params)
    got = attnlab.attention(q, k, v, score_mod=spy, **kw)
    assert not calls  # fused: never called
    g_got = torch.autograd.grad(got, wrt, go)
    want = attnlab.attention(q, k, v, score_mod=plain, **kw)
    assert calls  # the function's path: called on every tile
    g_want = torch.autograd.grad(want, wrt, go)
    errs = [(a - b).abs().max().item() for a, b in zip((got, *g_got), (want, *g_want), strict=True)]
    print(name, mask, [f"{e:.1e}" for e in errs])
    assert max(errs) < 1e-12


@pytest.mark.parametrize("bidirectional", [True, False])
def test_a_t5_block_in_one_bucket_is_a_constant_per_head_and_equals_the_gather(bidirectional):
    """[P12] Far from the diagonal every distance of a block falls into T5's last bucket: the closed form then adds
    one number per head instead of gathering a tile; the blocks it does so for, and the bias, are the gather's."""
    table = torch.randn(4, 8, dtype=torch.float64)
    t5 = mods.relative_bias(table, max_distance=16, bidirectional=bidirectional)
    constant = 0
    for r0 in range(0, 64, 8):
        for c0 in range(0, 64, 8):
            rows, cols = slice(r0, r0 + 8), slice(c0, c0 + 8)
            a, b = t5.bias(4, rows, cols, torch.float64, "cpu")
            assert b is None
            gathered = table[:, t5.bucket(kmods.distance(rows, cols, "cpu")[0, 0])].unsqueeze(0)
            assert torch.equal(a.expand(gathered.shape), gathered)
            constant += a.shape[-1] == 1
    assert 0 < constant < 64  # both ways are taken


def test_a_builtin_says_when_it_bounds_the_scores():
    """[P2] [P12] The flash form skips the running max only where a built-in's ``bounded`` says no modified score can
    pass SAFE_LOGIT and no row's largest can fall below -SAFE_LOGIT; each way it can be wrong is refused."""
    cap, alibi = mods.softcap(30.0), mods.alibi(8)
    assert cap.bounded(1e6, None, 40.0) and not mods.softcap(50.0).bounded(0.0, (0, 0), 40.0)
    assert alibi.bounded(39.0, (0, 0), 40.0)  # causal: every bias <= 0 and each row sees its own key (bias 0)
    assert not alibi.bounded(41.0, (0, 0), 40.0)  # q.k alone may pass the bound
    assert not alibi.bounded(1.0, None, 40.0)  # the mask's reach unknown: a row may see only far keys
    assert not alibi.bounded(1.0, (100, 0), 40.0)  # keys 100 ahead: 0.5 x 100 = 50 above the score
    assert not alibi.bounded(1.0, (0, -100), 40.0)  # a row whose nearest key is 100 back: its largest score -50
    assert alibi.bounded(1.0, (0, -70), 40.0)  # ... 70 back: -35 + -1, inside
    assert not mods.alibi(slopes=torch.tensor([0.5, -0.1])).bounded(1.0, (0, 0), 40.0)  # a negative slope
    table = torch.full((2, 8), 3.0)
    assert mods.relative_bias(table).bounded(37.0, None, 40.0)
    assert not mods.relative_bias(-table).bounded(37.5, None, 40.0)  # |bias| 3 on top of 37.5


def test_alibi_on_the_bounded_path_underflows_exactly(monkeypatch):
    """ALiBi under the causal mask takes the bounded path (no running max): with steep slopes most weights
    underflow to 0 there, and the output and gradients still equal the float64 matrix form (and in float32,
    the oracle's within 1e-5)."""
    from attnlab.judge import oracle, rule
    from attnlab.kernels import flash

    taken = []
    attend = flash.attend
    monkeypatch.setattr(flash, "attend", lambda *a: taken.append(a[-1].fixed) or attend(*a))  # shift fixed at 0?
    slopes = torch.tensor([8.0, 2.0, 0.5, 0.01], dtype=torch.float64, requires_grad=True)  # exp(-8 x 30): 0
    q, k, v = (t.requires_grad_() for t in qkv(1, 4, 4, 40, 40, 8, 8, seed=2))
    mod = mods.alibi(slopes=slopes)
    got = attnlab.attention(q, k, v, is_causal=True, impl="flash", score_mod=mod, block_q=8, block_k=8)
    assert taken and all(taken), "ALiBi under the causal mask must take the bounded path here"
    want = attnlab.attention(q, k, v, is_causal=True, impl="matrix", score_mod=mod)
    wrt = (q, k, v, slopes)
    errs = [(a - b).abs().max().item() for a, b in zip((got, *torch.autograd.grad(got.sum(), wrt)),
                                                     (want, *torch.autograd.grad(want.sum(), wrt)), strict=True)]
    print("bounded ALiBi vs float64 matrix:", [f"{e:.1e}" for e in errs])
    assert max(errs) < 1e-12
    q32, k32, v32 = (t.detach().float() for t in (q, k, v))
    mod32 = mods.alibi(slopes=slopes.detach().float())
    out = attnlab.attention(q32, k32, v32, is_causal=True, impl="flash", score_mod=mod32, block_q=8, block_k=8)
    ref = oracle.reference(q, k, v, is_causal=True, score_mod=mods.alibi(slopes=slopes.detach()))
    print("float32 bounded ALiBi vs float64 oracle:", rule.max_err(out, ref))
    assert rule.max_err(out, ref) < 1e-5


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_alibi_heads_run_over_the_keys_whose_weights_are_not_exactly_0(dtype, monkeypatch):
    """[P13] ALiBi under the causal mask: a steep head runs over a window, the keys beyond it dropped because their
    weights are exactly 0 in the working dtype -- checked here on the weights themselves, forward (exp2(s)) and
    backward (exp2(s - lse)) -- so the output and gradients (slopes' included) are the unsplit form's and the
    float64 matrix form's."""
    from attnlab.judge import rule
    from attnlab.kernels import flash, flash_reach

    monkeypatch.setattr(flash_reach, "QUANTUM", 4)
    calls = []
    attention = flash.attention
    monkeypatch.setattr(flash, "attention", lambda *a, **kw: calls.append(kw.get("attn_mask")) or attention(*a, **kw))
    steep = 8.0 if dtype == torch.float32 else 64.0  # float64's least subnormal is 2^-1074: it takes a steeper one
    slopes = torch.tensor([steep, steep / 4, 0.01, 0.0], dtype=dtype, requires_grad=True)
    q, k, v = (t.to(dtype).requires_grad_() for t in qkv(1, 4, 2, 96, 96, 8, 8, seed=4))
    mod = attnlab.mods.alibi(slopes=slopes)
    kw = dict(is_causal=True, enable_gqa=True, score_mod=mod, block_q=16, block_k=16)
    got = attention(q, k, v, **kw)
    windows = [m for m in calls if m is not None]
    assert len(windows) == 1 and len(calls) == 2, calls  # key head 0 (slopes 8, 2) windowed, key head 1 whole
    w = int(windows[0].name.removeprefix("sliding_window(").removesuffix(")"))
    print(dtype, "key head 0 runs over a window of", w, "of 96 keys")
    assert w < 72
    # the weights dropped are exactly 0 on the bounded path, forward and backward
    s = (q[:, :2] @ k[:, :1].transpose(-1, -2) / math.sqrt(8) + slopes[:2].view(1, 2, 1, 1) *
         kmods.distance(slice(0, 96), slice(0, 96), "cpu").to(dtype)).detach() * LOG2E
    rel = kmods.distance(slice(0, 96), slice(0, 96), "cpu")[0, 0]
    far = rel <= -w
    lse2 = torch.where(rel <= 0, s * math.log(2), -math.inf).logsumexp(dim=-1, keepdim=True) / math.log(2)
    assert far.any() and (torch.exp2(s)[..., far] == 0).all() and (torch.exp2(s - lse2)[..., far] == 0).all()
    whole = attention(q, k, v, split_heads=False, **kw)
    want = attnlab.attention(q.double(), k.double(), v.double(), is_causal=True, enable_gqa=True, impl="matrix",
                             score_mod=attnlab.mods.alibi(slopes=slopes.double()))
    wrt = (q, k, v, slopes)
    grads = [torch.autograd.grad(o.sum(), wrt) for o in (got, whole, want)]
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for name, i in (("unsplit", 1), ("float64 matrix", 2)):
        errs = [rule.max_err(a, b) / float(b.detach().abs().max()) for a, b in zip((got, *grads[0]),
                                                                          ((got, whole, want)[i], *grads[i]),
                                                                          strict=True)]
        print(dtype, "split vs", name, "relative", [f"{e:.1e}" for e in errs])
        assert max(errs) < tol


@pytest.mark.parametrize("doubled", [False, True])
def test_the_soft_caps_tanh_is_accurate_near_0_and_finite_far_out(doubled):
    """online.tanh_ (times * tanh, as expm1): within a few float32 roundings of float64's tanh relative to the value
    itself, near 0 too (where 2 sigmoid(2x) - 1 loses every digit); clamped, a score far out is +-times, not NaN."""
    from attnlab.kernels import online

    y = torch.cat([torch.linspace(-30, 30, 2001), torch.logspace(-20, 0, 200), -torch.logspace(-20, 0, 200)])
    x = (2 * y if doubled else y).float()
    got = online.tanh_(x.clone(), torch.empty_like(x), times=43.3, doubled=doubled)
    want = 43.3 * torch.tanh(y.double())
    rel = ((got.double() - want).abs() / want.abs().clamp(min=1e-300)).max().item()
    print("doubled" if doubled else "plain", "max relative error", rel)
    assert rel < 8 * torch.finfo(torch.float32).eps
    far = torch.tensor([-1e4, -200.0, 200.0, 1e4])
    out = online.tanh_(far.clone(), torch.empty_like(far), times=2.0, doubled=doubled)
    assert torch.equal(out, torch.tensor([-2.0, -2.0, 2.0, 2.0]))
    unclamped = online.tanh_(torch.tensor([200.0]), torch.empty(1), doubled=doubled, clamp=False)
    assert torch.isnan(unclamped).all()  # why the clamp is kept unless the caller's bound rules it out
    assert online.expm1_fits(80.0) and not online.expm1_fits(89.0)


def test_alibi_under_the_causal_mask_vmaps_and_names_too_few_slopes():
    """The head split [P13] reads numbers off the inputs: under torch.func.vmap it stands aside (the form's own
    vmap rule runs), and slopes fewer than the heads get the form's own error, not a reshape's."""
    q, k, v = qkv(3, 4, 4, 200, 200, 8, 8, dtype=torch.float32, seed=1)  # long enough that the split looks
    mod = mods.alibi(4)
    batched = torch.func.vmap(lambda a, b, c: attnlab.attention(a, b, c, is_causal=True, impl="flash",
                                                                score_mod=mod))(q, k, v)
    looped = torch.stack([attnlab.attention(q[i], k[i], v[i], is_causal=True, impl="flash", score_mod=mod)
                          for i in range(3)])
    torch.testing.assert_close(batched, looped)
    with pytest.raises(ValueError, match="holds 2 heads but the attention has at least 4"):
        attnlab.attention(q, k, v, is_causal=True, impl="flash", score_mod=mods.alibi(2))


@pytest.mark.parametrize("name", ["softcap", "softcap 50", "alibi slopes", "relative_bias", "relative_bias far"])
def test_each_builtin_is_one_class_that_says_its_fused_form_and_gradient(name):
    """[P12] SoftCap, ALiBi and T5Bias are each a mods.Fused: its fused form on a tile of base-2 products is its
    function's answer times log2(e), and its ``grad`` is what autograd gets through the function -- dS to the raw
    scores and the held tensor's gradient -- on a tile away from the origin (its rows and columns offset)."""
    g = torch.Generator().manual_seed(11)
    H, rows, cols = 4, slice(40, 46), slice(3, 10) if name != "relative_bias far" else slice(200, 207)
    mod = {"softcap 50": mods.softcap(50.0), "relative_bias far": _builtins(H, g)["relative_bias"]}.get(name) or \
        _builtins(H, g)[name.removesuffix(" far")]
    assert isinstance(mod, mods.Fused) and type(mod) in (mods.SoftCap, mods.ALiBi, mods.T5Bias)
    x = (torch.randn(2, H, 6, 7, generator=g, dtype=torch.float64) * 30).requires_grad_()  # raw scaled scores
    idx = kmods.indices(2, H, rows.start, rows.stop, cols.start, cols.stop, "cpu")
    want = mod.fn(x, *idx)
    s4 = (x.detach() * (mod.alpha(1.0))).contiguous()  # the product the flash form's matmul makes, scale 1
    scratch = torch.empty_like(s4) if mod.scratch else None
    mod.tile(s4, rows, cols, scratch, None, slope=True)
    print(name, "fused form vs function:", float((s4 - want.detach() * LOG2E).abs().max()))
    assert torch.allclose(s4, want.detach() * LOG2E, rtol=1e-12, atol=1e-11)
    dS = torch.randn(x.shape, generator=g, dtype=torch.float64)
    held = list(mod.params)
    auto = torch.autograd.grad(want, [x, *held], dS)
    dS4 = dS.clone()
    got = mod.grad(dS4, rows, cols, scratch, want=bool(held))
    assert torch.allclose(dS4, auto[0], rtol=1e-12, atol=1e-12)  # dS to the raw scores
    if held:
        print(name, "held tensor's gradient vs autograd:", float((got - auto[1]).abs().max()))
        assert torch.allclose(got, auto[1], rtol=1e-12, atol=1e-12)
    else:
        assert got is None


class HeadBias(mods.Additive):
    """A modifier the library does not have, written as one class: ``score + bias[h]``, a learnable number per
    head. Everything the flash form needs to fuse it is here; no kernel file knows it."""

    def __init__(self, bias: torch.Tensor):
        def fn(score, b, h, q_idx, kv_idx):
            return score + bias.to(score.device, score.dtype)[h]

        super().__init__(fn, f"head_bias({bias.shape[0]})", (bias,), bias, "head_bias")

    def bounded(self, qk, reach, safe_logit):
        return qk + float(self.held.detach().abs().max()) <= safe_logit

    def bias(self, H, rows, cols, dtype, device, times=1.0):
        return self.values(H, dtype, device, times).view(1, H, 1, 1), None

    def held_grad(self, dS4, rows, cols):
        g = dS4.new_zeros(self.held.shape)
        g[:dS4.shape[1]] = dS4.sum(dim=(0, 2, 3))
        return g.to(self.held.device, self.held.dtype)

    def band_bias(self, rel, H, dtype, device, budget):
        return self.values(H, dtype, device, LOG2E)

    def band(self, s4, made, hk, scratch=None, bound=None):
        G = s4.shape[1]
        s4.add_(made[hk * G:(hk + 1) * G].view(1, G, 1, 1))


@pytest.mark.parametrize("mask", ["causal", "window"])
def test_a_new_fused_modifier_is_one_class_and_its_test(mask, small_bands, monkeypatch):
    """A subclass of mods.Fused (here mods.Additive) is fused by the flash form -- on the tiles under the causal mask,
    on the key bands under a window -- with its function never called there, and its output and gradients (q, k, v
    and its own tensor) are the float64 matrix form's, which calls the function."""
    from attnlab.kernels import flash, flash_band

    g = torch.Generator().manual_seed(4)
    q, k, v = (t.requires_grad_() for t in qkv(1, 4, 2, 23, 23, 8, generator=g))
    bias = torch.randn(4, generator=g, dtype=torch.float64, requires_grad=True)
    mod, calls = HeadBias(bias), []
    plain = mods.Mod(mod.fn, "head_bias as a function", mod.params)
    spy = copy.copy(mod)
    spy.fn = lambda *a: calls.append(1) or mod.fn(*a)
    kw = {"enable_gqa": True}
    kw |= {"is_causal": True} if mask == "causal" else {"attn_mask": attnlab.masks.sliding_window(5)}
    p = flash.plan(q, k, v, score_mod=spy, block_q=8, block_k=6, **kw)
    print(p)
    assert p.path == ("tiles" if mask == "causal" else "bands") and "fused into the tile" in str(p)
    assert p.bounded is not None  # its own bound: |q.k| scale + max|bias|
    banded = []
    forward = flash_band.forward
    monkeypatch.setattr(flash_band, "forward", lambda *a: banded.append(1) or forward(*a))
    got = flash.run(p)
    assert not calls and bool(banded) == (mask == "window")
    want = attnlab.attention(q, k, v, impl="matrix", score_mod=plain, **kw)
    go = torch.randn(want.shape, generator=g, dtype=want.dtype)
    wrt = (q, k, v, bias)
    errs = [(a - b).abs().max().item() for a, b in zip((got, *torch.autograd.grad(got, wrt, go)),
                                                     (want, *torch.autograd.grad(want, wrt, go)), strict=True)]
    print(mask, "head_bias, flash fused vs float64 matrix:", [f"{e:.1e}" for e in errs])
    assert max(errs) < 1e-12


# The cases of this module measured over 0.3 s of CPU in two runs of make test (tests/costs.py; AMD EPYC, 2 cores),
# where the module's others take hundredths: slow-marked (tests/conftest.py), so make test-fast leaves them to make
# test
SLOW_CASES = {
    "test_gradcheck_each_builtin_each_form[relative_bias causal then softcap-flash]",
    "test_gradcheck_each_builtin_each_form[relative_bias-flash]",
}
