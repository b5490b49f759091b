"""Attention sinks (gpt-oss's ``sinks=``): every form against a float64 reference and transformers' own eager function.

A sink is one logit per query head that joins each row's softmax as one more column and is then dropped:
``w = softmax([s_i0 .. s_i,S-1, sink_h])[:S]``, ``out = w @ v``. The reference below is gpt-oss's eager formula
(transformers.models.gpt_oss.modeling_gpt_oss.eager_attention_forward), written out: the scores and the sink
concatenated, the row max over both subtracted, softmax, the sink's column dropped.

Tolerances follow the project's rule (:mod:`attnlab.judge.rule`): a form's error against the float64 reference is
at most twice PyTorch's own -- here the gpt-oss formula run by PyTorch in the input dtype -- plus a rounding floor.
The floor is the rule's own :func:`~attnlab.judge.rule.rounding_floor`, taken on the problem the sink *is*: S + 1
keys, the last with key 0 and value 0, and a float mask that adds the sink to its score. The sinks' gradient is
that mask column's gradient summed over the N * L rows of a head, so its floor is N * L times the mask's.
"""

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import attnlab
from attnlab import masks, mods
from attnlab.judge import oracle, rule
from attnlab.kernels import Unsupported, flash
from tests.helpers import qkv

ROOT = Path(__file__).resolve().parents[2]
TILES = {"flash": {"block_q": 4, "block_k": 4}}  # several tiles per row, edge tiles cut short
N, H, L, S, E = 2, 4, 7, 9, 8


# ---- the reference: gpt-oss's eager formula, in the dtype it is given ------------------------------------------------


def dense(attn_mask, is_causal, n, h, l, s):
    """The mask as one tensor (bool or float) broadcastable to (n, h, l, s), or None."""
    m = attn_mask.dense(n, h, l, s) if isinstance(attn_mask, masks.Mask) else attn_mask
    if is_causal:
        keep = torch.ones(l, s, dtype=torch.bool).tril()
        m = keep if m is None else (m & keep if m.dtype == torch.bool else m.masked_fill(~keep, -math.inf))
    return m


def gpt_oss(q, k, v, sinks, attn_mask=None, is_causal=False, scale=None, score_mod=None):
    """gpt-oss's eager attention on (N, H, L, E) inputs, in their dtype: (out, lse). GQA by repeating k and v."""
    G = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
    s = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if score_mod is not None:
        b, h, i, j = (torch.arange(n).view(*[-1 if d == x else 1 for d in range(4)]) for x, n in enumerate(s.shape))
        s = score_mod(s, b, h, i, j)
    m = dense(attn_mask, is_causal, *s.shape)
    if m is not None:
        s = s.masked_fill(~m, -math.inf) if m.dtype == torch.bool else s + m.to(s.dtype)
    combined = torch.cat([s, sinks.to(s.dtype).reshape(1, -1, 1, 1).expand(*s.shape[:-1], 1)], dim=-1)
    lse = torch.logsumexp(combined, dim=-1)
    combined = combined - combined.max(dim=-1, keepdim=True).values
    probs = torch.softmax(combined, dim=-1, dtype=combined.dtype)
    return probs[..., :-1].to(v.dtype) @ v, lse


def grads(fn, inputs, g):
    """fn(*inputs) and the gradients of inputs (q, k, v, sinks) for output gradient g."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*leaves)
    out = out[0] if isinstance(out, tuple) else out
    return (out, *torch.autograd.grad(out, leaves, g.to(out.dtype)))


def floors(q, k, v, sinks, g, attn_mask, is_causal, scale, dtype, score_mod=None) -> dict:
    """The rule's rounding floor of out, dq, dk, dv and dsinks, on the problem the sink is: key S with key 0, value 0
    and a float mask that adds the sink to its score. The rule bounds out, dq, dk and dv
    (:func:`attnlab.judge.rule.rounding_floor`); dsinks_h sums that key's dS = P_sink (0 - D) over the head's N * L
    rows, so its floor is the rule's bound of dS at that column (P_sink's relative error and D's), summed, plus the
    sum's own rounding."""
    q, k, v, sinks, g = (t.detach().double() for t in (q, k, v, sinks, g))
    n, h, l, s = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    zero = k.new_zeros(n, k.shape[1], 1, k.shape[3])
    m = dense(attn_mask, is_causal, n, h, l, s)
    bias = torch.zeros(n, h, l, s, dtype=torch.float64)
    if m is not None:
        bias = bias.masked_fill(~m, -math.inf) if m.dtype == torch.bool else bias + m.double()
    bias = torch.cat([bias, sinks.view(1, h, 1, 1).expand(n, h, l, 1)], dim=-1)
    args = (q, torch.cat([k, zero], 2), torch.cat([v, zero[..., :v.shape[3]]], 2), bias, False, scale, h != k.shape[1])
    f = oracle.forward(*args, score_mod=score_mod)
    fl = rule.rounding_floor(*args, grad_out=g, dtype=dtype, score_mod=score_mod, fwd=f)
    o_err = rule.rounding_floor(*args, dtype=dtype, score_mod=score_mod, fwd=f, elementwise=True)["out"]
    u = torch.finfo(torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype).eps  # as the rule takes them
    eps = torch.finfo(dtype).eps
    p_sink, D = f.P[..., -1], (g * f.out).sum(-1)  # (N, H, L)
    rel = 2 * rule.score_error(f, u)[..., 0] + u * math.sqrt(s + 1) + eps  # P's relative error, as the rule's
    dD = u * math.sqrt(v.shape[3]) * g.norm(dim=-1) * f.out.norm(dim=-1) + (g.abs() * o_err).sum(-1)
    per_row = p_sink * ((rel + eps + u) * D.abs() + dD) + u * math.sqrt(n * l) * (p_sink * D).abs()
    return {**fl, "dsinks": float(per_row.sum(dim=(0, 2)).max())}


def judge(form, q, k, v, sinks, g, dtype=torch.float32, attn_mask=None, is_causal=False, scale=None, score_mod=None,
          **form_kw):
    """The form, PyTorch running gpt-oss's formula in ``dtype`` and the float64 reference, on the same inputs cast to
    ``dtype``: the rule's comparisons of out, dq, dk, dv and dsinks, printed."""
    ins = [t.to(dtype) for t in (q, k, v, sinks)]
    gqa = q.shape[1] != k.shape[1]

    def mine(q, k, v, s):
        return attnlab.attention(q, k, v, attn_mask, 0.0, is_causal, scale, gqa, impl=form, sinks=s,
                                 score_mod=score_mod, **{**TILES.get(form, {}), **form_kw})

    def formula(q, k, v, s):
        return gpt_oss(q, k, v, s, attn_mask, is_causal, scale, score_mod)

    got = grads(mine, ins, g)
    theirs = grads(formula, ins, g)
    ref = grads(formula, [t.double() for t in ins], g.to(dtype).double())
    fl = floors(*ins, g.to(dtype), attn_mask, is_causal, scale, dtype, score_mod)
    names = ("out", "dq", "dk", "dv", "dsinks")
    comps = [rule.compare(n, a, b, r, dtype, fl[n]) for n, a, b, r in zip(names, got, theirs, ref, strict=True)]
    print(form, dtype, " ".join(f"{c.quantity} {c.err:.1e} (torch {c.torch_err:.1e}, allowed {c.allowed:.1e})"
                                for c in comps))
    return comps


def assert_pass(comps):
    bad = [c for c in comps if not c.passed]
    assert not bad, "; ".join(f"{c.quantity}: error {c.err:.2e} > allowed {c.allowed:.2e}" for c in bad)


def inputs(n=N, h=H, hkv=H, l=L, s=S, e=E, seed=0, sink_scale=1.0):
    """Seeded q, k, v, an output gradient and sinks (h,) -- float64, cast by the caller."""
    q, k, v, g = qkv(n, h, hkv, l, s, e, seed=seed, grad_out=True)
    sinks = torch.randn(h, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64) * sink_scale
    return q, k, v, g, sinks


def bool_mask(seed=0):
    """A random (N, 1, L, S) bool mask in which row 0 sees no key and row 1 exactly one (its gradient is not 0:
    with a sink, one key does not take all the weight)."""
    m = torch.rand(N, 1, L, S, generator=torch.Generator().manual_seed(seed)) > 0.4
    m[:, :, 0] = False
    m[:, :, 1] = False
    m[:, :, 1, 3] = True
    return m


def float_mask(seed=0):
    """A (1, H, L, S) float mask with -inf in places and a row of -inf (no key) in head 2."""
    gen = torch.Generator().manual_seed(seed)
    m = torch.randn(1, H, L, S, generator=gen, dtype=torch.float64)
    m = m.masked_fill(torch.rand(1, H, L, S, generator=gen) > 0.7, -math.inf)
    m[0, 2, 4] = -math.inf
    return m


CASES = {  # name: (input sizes, attention keywords)
    "plain": ({}, {}),
    "causal": ({}, {"is_causal": True}),
    "bool mask, dead and one-key rows": ({}, {"attn_mask": bool_mask()}),
    "float mask with dead rows": ({}, {"attn_mask": float_mask()}),
    "sliding window": ({}, {"attn_mask": masks.sliding_window(3)}),
    "gqa causal, L != S, scale": ({"hkv": 2, "l": 5, "s": 11}, {"is_causal": True, "scale": 0.7}),
    "large logits (running max)": ({"seed": 3}, {"scale": 4.0}),
    "softcap": ({}, {"score_mod": mods.softcap(2.0)}),
}


FORMS = ("loops", "matrix", "flash")  # the loops form at one batch row: still a fraction of a second a case


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case", list(CASES))
def test_every_form_matches_the_float64_reference(form, case):
    """float32, forward and gradients of q, k, v and the sinks, within the rule against gpt-oss's formula."""
    sizes, kw = CASES[case]
    if kw.get("attn_mask") is not None and isinstance(kw["attn_mask"], torch.Tensor) \
            and kw["attn_mask"].is_floating_point():
        kw = {**kw, "attn_mask": kw["attn_mask"].float()}  # a float mask in the inputs' dtype
    q, k, v, g, sinks = inputs(**sizes)
    if form == "loops":  # one batch row: Python loops
        q, k, v, g = q[:1], k[:1], v[:1], g[:1]
        if isinstance(kw.get("attn_mask"), torch.Tensor):
            kw = {**kw, "attn_mask": kw["attn_mask"][:1]}
    assert_pass(judge(form, q, k, v, sinks, g, **kw))


@pytest.mark.parametrize("path", ["tiles", "bands"])
def test_flash_on_the_band_path(path, small_bands):
    """A sliding window on the flash form's band forward (and on the tiles), sinks folded in after the band."""
    q, k, v, g, sinks = inputs(n=1, h=4, hkv=2, l=41, s=41, seed=5)
    tiles = {} if path == "bands" else {"block_q": 8, "block_k": 8}  # the default tiles: one, which the bands beat
    plan = flash.plan(q, k, v, attn_mask=masks.sliding_window(5), enable_gqa=True, sinks=sinks,
                      bands=path == "bands", **tiles)
    assert plan.path == path and "sinks     4, one per query head" in str(plan)
    assert_pass(judge("flash", q, k, v, sinks, g, attn_mask=masks.sliding_window(5), bands=path == "bands", **tiles))


def test_flash_split_heads_slices_the_sinks():
    """ALiBi under the causal mask splits the heads into calls of their own [P13]: each gets its heads' sinks."""
    q, k, v, g, sinks = inputs(n=1, h=4, hkv=4, l=128, s=128, seed=2, sink_scale=3.0)
    mod = mods.alibi(slopes=torch.tensor([2.0, 1.0, 0.25, 0.01]))  # steep heads: far keys' weights exactly 0
    plan = flash.plan(q.float(), k.float(), v.float(), is_causal=True, score_mod=mod, sinks=sinks, block_q=32,
                      block_k=32)
    assert plan.path == "split heads", plan
    assert_pass(judge("flash", q, k, v, sinks, g, is_causal=True, score_mod=mod, block_q=32, block_k=32))


@pytest.mark.slow(first="importing transformers' gpt-oss model: about two seconds")
def test_matches_transformers_gpt_oss_eager_attention():
    """transformers' own eager_attention_forward of gpt-oss, called with a stand-in module (its ``sinks``, its
    ``num_key_value_groups``, ``training``), in float64: the loops, matrix and flash forms give its output and its
    gradients of q, k, v and the sinks, GQA and a causal float mask with -inf (as the eager mask holds)."""
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    q, k, v, g, sinks = inputs(n=1, h=4, hkv=2, l=6, s=6, seed=7, sink_scale=2.0)
    mask = torch.zeros(1, 1, 6, 6, dtype=torch.float64).masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(),
                                                                      -math.inf)
    mask[..., 2, :] = -math.inf  # a row that sees no key: all its weight on the sink

    def theirs(q, k, v, s):
        module = SimpleNamespace(sinks=s, num_key_value_groups=2, training=False)
        out, _ = eager_attention_forward(module, q, k, v, mask, scaling=0.3)
        return out.transpose(1, 2)  # (B, L, H, d) -> (B, H, L, d)

    want = grads(theirs, (q, k, v, sinks), g)
    for form in ("loops", "matrix", "flash"):
        got = grads(lambda q, k, v, s, form=form: attnlab.attention(
            q, k, v, mask, scale=0.3, enable_gqa=True, impl=form, sinks=s, **TILES.get(form, {})), (q, k, v, sinks), g)
        errs = [rule.max_err(a, b) for a, b in zip(got, want, strict=True)]
        print(f"{form} vs gpt-oss eager, float64: out {errs[0]:.1e} dq {errs[1]:.1e} dk {errs[2]:.1e} "
              f"dv {errs[3]:.1e} dsinks {errs[4]:.1e}")
        assert max(errs) < 1e-13
        assert rule.max_err(got[0][:, :, 2], torch.zeros(1)) == 0.0


def lse_of(form, q, k, v, sinks, **kw):
    """A row's log-sum-exp as the form computes it: the flash form's tile walk (what ring attention and its backward
    read), gpt-oss's formula in float64 for the rest."""
    if form != "flash":
        return gpt_oss(q.double(), k.double(), v.double(), sinks.double(), **kw)[1]
    p = flash.plan(q, k, v, sinks=sinks, **kw, **TILES["flash"])
    a = p.args
    q5 = a.q.reshape(a.N, a.Hkv, a.groups, a.L, a.E)
    _, lse = flash.forward_tiles(q5, a.k, a.v, a.scale, p.tiles, bounded=p.bounded, sinks=a.sinks.to(a.work))
    return lse.reshape(a.N, a.H, a.L)


@pytest.mark.parametrize("sink", [0.5, -120.0, 120.0])
def test_rows_that_see_no_key_give_zero_and_lse_is_the_sink(sink):
    """Every key masked: the sink takes all the weight -- out 0, lse = sink (to float32's rounding of sink * log2(e),
    even where exp(sink) underflows or overflows float32), gradients finite, and those rows add nothing to the sinks'
    gradient."""
    q, k, v, g, _ = inputs(seed=4)
    q, k, v, g = (t.float() for t in (q, k, v, g))
    sinks = torch.full((H,), sink)
    mask = bool_mask()
    for form in ("loops", "matrix", "flash"):
        n = 1 if form == "loops" else N
        out, dq, dk, dv, ds = grads(lambda q, k, v, s, form=form, n=n: attnlab.attention(
            q, k, v, mask[:n], impl=form, sinks=s, **TILES.get(form, {})), (q[:n], k[:n], v[:n], sinks), g[:n])
        assert all(bool(torch.isfinite(t).all()) for t in (out, dq, dk, dv, ds))
        assert out[:, :, 0].abs().max() == 0 and dq[:, :, 0].abs().max() == 0
        only_dead = grads(lambda q, k, v, s, form=form: attnlab.attention(
            q, k, v, torch.zeros(1, 1, L, S, dtype=torch.bool), impl=form, sinks=s, **TILES.get(form, {})),
            (q[:1], k[:1], v[:1], sinks), g[:1])
        assert only_dead[0].abs().max() == 0 and only_dead[4].abs().max() == 0  # no weight moves: dsink = 0
        print(f"{form} sink {sink}: dead rows 0, finite gradients")
    lse = lse_of("flash", q, k, v, sinks, attn_mask=mask)
    ref = lse_of("reference", q, k, v, sinks, attn_mask=mask)
    err = rule.max_err(lse, ref)
    print(f"flash lse: dead rows {lse[:, :, 0].unique().tolist()} (sink {sink}), max error {err:.1e}")
    assert rule.max_err(lse[:, :, 0], torch.full((1,), sink)) <= 2 * torch.finfo(torch.float32).eps * abs(sink)
    assert err < 1e-5 * (1 + ref.abs().max().item())


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("sinks", [[300.0, -300.0, 0.0, 35.0], [-math.inf] * 4, [88.0, 89.0, 90.0, 200.0]],
                         ids=["far above and below", "minus infinity", "past float32's exp"])
def test_sinks_far_above_and_below_the_scores(form, sinks):
    """A sink hundreds above the scores takes all the weight (out ~ 0, no overflow); far below, or -inf, it takes
    none: the output is attention without sinks. The max is over the scores and the sink, as gpt-oss takes it."""
    q, k, v, g, _ = inputs(n=1, seed=6)
    sinks = torch.tensor(sinks, dtype=torch.float64)
    assert_pass(judge(form, q, k, v, sinks, g, is_causal=True))
    if bool(torch.isneginf(sinks).all()):
        ins = [t.float() for t in (q, k, v)]
        kw = dict(is_causal=True, impl=form, **TILES.get(form, {}))
        with_sinks = attnlab.attention(*ins, sinks=sinks.float(), **kw)
        assert rule.max_err(with_sinks, attnlab.attention(*ins, **kw)) == 0.0


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("seed", [0, 1])
def test_bfloat16_within_pytorch_level_error(form, seed):
    """bfloat16 inputs and sinks: within twice the error of PyTorch running gpt-oss's formula in bfloat16 (which
    takes its softmax in bfloat16, as gpt-oss does), plus the rule's bfloat16 rounding floor."""
    q, k, v, g, sinks = inputs(n=1 if form == "loops" else 2, hkv=2, seed=seed, sink_scale=2.0)
    assert_pass(judge(form, q, k, v, sinks, g, dtype=torch.bfloat16, is_causal=True))


@pytest.mark.parametrize("form", FORMS)
def test_gradcheck_in_float64(form):
    """gradcheck of q, k, v and the sinks: GQA, the causal mask and a row that sees no key, small tiles."""
    q, k, v, _, sinks = inputs(n=1, h=4, hkv=2, l=4, s=5, e=3, seed=8)
    mask = torch.ones(4, 5, dtype=torch.bool).tril()
    mask[1] = False

    def f(q, k, v, s):
        return attnlab.attention(q, k, v, mask, enable_gqa=True, impl=form, sinks=s,
                                 **({"block_q": 2, "block_k": 3} if form == "flash" else {}))

    ins = [t.requires_grad_() for t in (q, k, v, sinks)]
    assert torch.autograd.gradcheck(f, ins, fast_mode=form == "loops", check_batched_grad=form == "flash")


@pytest.mark.parametrize("form", ["matrix", pytest.param("flash", marks=pytest.mark.slow)])  # flash: about 1 s
def test_gradcheck_beside_a_learned_float_mask_and_bias_table(form):
    """Every differentiable input at once: q, k, v, a float mask, a score modifier's learned table and the sinks --
    the flash backward returns their gradients in one tuple, the sinks' between the mask's and the table's."""
    q, k, v, _, sinks = inputs(n=1, h=4, hkv=2, l=4, s=5, e=3, seed=12)
    gen = torch.Generator().manual_seed(12)
    bias = torch.randn(1, 4, 4, 5, generator=gen, dtype=torch.float64)
    table = torch.randn(4, 8, generator=gen, dtype=torch.float64)

    def f(q, k, v, bias, table, s):
        mod = mods.relative_bias(table, max_distance=16)
        return attnlab.attention(q, k, v, bias, enable_gqa=True, impl=form, sinks=s, score_mod=mod,
                                 **({"block_q": 2, "block_k": 3} if form == "flash" else {}))

    ins = [t.requires_grad_() for t in (q, k, v, bias, table, sinks)]
    assert torch.autograd.gradcheck(f, ins)


def test_dsink_is_minus_p_sink_times_d():
    """The flash form's dsink is -sum_i P_sink,i (dO_i . O_i) per head, from its own per-row numbers: checked
    against that formula written out from the float64 reference (P_sink = exp(sink - lse))."""
    q, k, v, g, sinks = inputs(seed=9, hkv=2)
    out, *_, ds = grads(lambda q, k, v, s: attnlab.attention(q, k, v, is_causal=True, enable_gqa=True, impl="flash",
                                                              sinks=s, **TILES["flash"]), (q, k, v, sinks), g)
    ref_out, lse = gpt_oss(q, k, v, sinks, is_causal=True)
    want = -(torch.exp(sinks.view(1, H, 1) - lse) * (g * ref_out).sum(-1)).sum(dim=(0, 2))
    print(f"dsink {ds.tolist()} vs formula: {rule.max_err(ds, want):.1e}")
    assert rule.max_err(ds, want) < 1e-13


def test_dropout_drops_the_same_weights_with_sinks():
    """attnlab's counter-based dropout: for one seed loops, matrix and flash drop the same weights, sinks or not."""
    q, k, v, g, sinks = inputs(n=1, seed=10)
    outs = {}
    for form in ("loops", "matrix", "flash"):
        torch.manual_seed(0)
        outs[form] = grads(lambda q, k, v, s, form=form: attnlab.attention(
            q, k, v, dropout_p=0.3, is_causal=True, impl=form, sinks=s, **TILES.get(form, {})), (q, k, v, sinks), g)
    for form in ("loops", "flash"):
        errs = [rule.max_err(a, b) for a, b in zip(outs[form], outs["matrix"], strict=True)]
        print(f"{form} vs matrix with dropout: {max(errs):.1e}")
        assert max(errs) < 1e-12


@pytest.mark.parametrize("form", ["loops", "matrix", "flash"])
@pytest.mark.parametrize("bad, error, words", [
    (torch.zeros(H + 1), ValueError, r"sinks has shape \(5\) but must have shape \(H,\) = \(4,\)"),
    (torch.zeros(N, H), ValueError, r"sinks has shape \(2, 4\) but must have shape \(H,\) = \(4,\), one logit per "
                                    r"query head \(query \(2, 4, 7, 8\)\)"),
    (torch.zeros(()), ValueError, r"sinks has shape \(\) but must have shape \(H,\)"),
    ([0.0] * H, TypeError, r"sinks must be a torch.Tensor of shape \(H,\) = \(4,\).*got list"),
    (torch.zeros(H, dtype=torch.long), TypeError, r"sinks has dtype torch.int64"),
])
def test_bad_sinks_are_refused(form, bad, error, words):
    q, k, v = qkv(N, H, H, L, S, E)
    with pytest.raises(error, match=words):
        attnlab.attention(q, k, v, impl=form, sinks=bad)


def test_a_form_without_sinks_says_which_forms_have_them():
    q, k, v = qkv(1, 2, 2, 3, 3, 4)
    with pytest.raises(Unsupported, match="form 'sdpa' takes no sinks; forms that do: loops, matrix, flash, triton"):
        attnlab.attention(q, k, v, impl="sdpa", sinks=torch.zeros(2))
    assert {n for n, f in attnlab.forms(device=None).items() if f.sinks} == {"loops", "matrix", "flash", "triton"}


def test_sinks_in_another_dtype_are_computed_in_the_inputs():
    """float64 sinks with float32 inputs (and bfloat16 with float32): cast to the working dtype, as gpt-oss casts;
    the gradient comes back in the sinks' own dtype."""
    q, k, v, g, sinks = inputs(seed=11)
    q, k, v, g = (t.float() for t in (q, k, v, g))
    for form in ("matrix", "flash"):
        for dt in (torch.float64, torch.bfloat16):
            s = sinks.detach().to(dt).requires_grad_()
            out = attnlab.attention(q, k, v, is_causal=True, impl=form, sinks=s, **TILES.get(form, {}))
            out.backward(g)
            want = attnlab.attention(q, k, v, is_causal=True, impl="matrix", sinks=s.detach().float())
            assert out.dtype == torch.float32 and s.grad.dtype == dt
            assert rule.max_err(out, want) < 1e-6


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_triton_under_the_interpreter():
    """The triton form with sinks under Triton's CPU interpreter (a process of its own: TRITON_INTERPRET is read when
    a kernel is defined): tests/kernels/triton_sink_cases.py, forward, gradients and lse, tiny sizes."""
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-s",
                        str(ROOT / "tests/kernels/triton_sink_cases.py")],
                       capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    print(r.stdout[-6000:], r.stderr[-2000:])
    assert r.returncode == 0, r.stdout[-3000:]
    assert " passed" in r.stdout and "failed" not in r.stdout
