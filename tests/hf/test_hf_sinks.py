"""gpt-oss's attention sinks through attnlab's forms: a tiny random GptOssForCausalLM (built from a config, no
download) gives the logits, gradients and greedy tokens of its own eager attention when attnlab's is registered.

gpt-oss has no sdpa implementation (SDPA has no sinks), so the reference is ``eager``: transformers'
eager_attention_forward with its float additive masks, against attnlab's with the bool masks of the sdpa mask
builder. The model's RMSNorm computes in float32 even in a float64 model, so its logits carry float32 rounding:
the attention layers' own outputs are compared in float64 (hooks on each layer), the logits to within float32's.
"""

from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("transformers")

import attnlab  # noqa: E402
import attnlab.hf  # noqa: E402
from attnlab import kernels  # noqa: E402

from . import tiny  # noqa: E402

FORMS = {"attnlab": "flash", "attnlab_matrix": "matrix", "attnlab_loops": "loops"}
GRADS = ("sinks", "q_proj.weight", "k_proj.weight", "v_proj.weight")


def run(model, impl, ids, mask):
    """Logits and each attention layer's output (B, L, C) under ``impl``."""
    model.set_attn_implementation(impl)
    outs = []
    hooks = [layer.self_attn.register_forward_hook(lambda m, i, o: outs.append(o[0].detach().clone()))
             for layer in model.model.layers]
    try:
        with torch.no_grad():
            logits = model(ids, attention_mask=mask).logits
    finally:
        for h in hooks:
            h.remove()
    return logits, outs


def real(x, mask):
    """The positions that hold tokens (what a model writes at a padding position is not defined)."""
    return x[mask.bool()]


def grads(model, impl, ids, mask) -> dict:
    """The gradients of a loss on the logits, for each layer's sinks and q, k, v projections, under ``impl``."""
    model.set_attn_implementation(impl)
    model.zero_grad()
    (real(model(ids, attention_mask=mask).logits, mask) ** 2).sum().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if any(s in n for s in GRADS)}


def generate(model, impl, ids, mask):
    model.set_attn_implementation(impl)
    return model.generate(ids, attention_mask=mask, max_new_tokens=16, do_sample=False, pad_token_id=0)


@pytest.fixture(scope="module")
def ref():
    """The tiny gpt-oss in float64 and float32 (the same weights), a batch of two rows of 12 token ids (the second
    left-padded by 3: its first rows see no key, all their weight on the sink), and what the model's own eager
    attention makes of it: float64 logits and layer outputs, float32 logits, gradients, 16 greedy tokens."""
    attnlab.hf.register()
    ids = torch.randint(3, tiny.VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, :3] = 0
    m64, m32 = tiny.gpt_oss(torch.float64), tiny.gpt_oss(torch.float32)
    logits, layers = run(m64, "eager", ids, mask)
    return SimpleNamespace(m64=m64, m32=m32, ids=ids, mask=mask, logits=logits, layers=layers,
                           logits32=run(m32, "eager", ids, mask)[0], grads=grads(m64, "eager", ids, mask),
                           tokens=generate(m64, "eager", ids, mask))


def test_logits_and_layers_equal_the_models_eager_attention_in_float64(ref):
    top = real(ref.logits, ref.mask).abs().max().item()
    for impl in FORMS:
        got, layers = run(ref.m64, impl, ref.ids, ref.mask)
        err = (real(got, ref.mask) - real(ref.logits, ref.mask)).abs().max().item()
        lerr = max((real(a, ref.mask) - real(b, ref.mask)).abs().max().item()
                   for a, b in zip(layers, ref.layers, strict=True))
        print(f"{impl} ({FORMS[impl]}), float64: attention layers {lerr:.1e}, logits {err:.1e} (max |logit| {top:.2f})")
        assert lerr < 1e-12 and err < 1e-6 * top


def test_a_form_without_the_sinks_fails_the_same_comparison(ref):
    """The comparison judges the sinks: the matrix form handed no sinks misses by far more than the tolerance."""

    def no_sinks(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, sinks=None):
        return attnlab.attention(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, impl="matrix")

    attnlab.register("nosinks", no_sinks, "test: the matrix form, its sinks dropped", sinks=True)
    try:
        attnlab.hf.register()
        got, _ = run(ref.m64, "attnlab_nosinks", ref.ids, ref.mask)
    finally:
        kernels._REGISTRY.pop("nosinks")
    err = (real(got, ref.mask) - real(ref.logits, ref.mask)).abs().max().item()
    print(f"sinks dropped: logits {err:.1e}")
    assert err > 1e-3


def test_float32_within_twice_the_eager_float32_error(ref):
    """The same weights in float32: attnlab's logits against the float64 eager model, within twice the error of the
    float32 eager model, plus float32's rounding of the logits."""
    want = real(ref.logits, ref.mask)
    eager32 = (real(ref.logits32, ref.mask).double() - want).abs().max().item()
    floor = 4 * torch.finfo(torch.float32).eps * want.abs().max().item()
    for impl in FORMS:
        err = (real(run(ref.m32, impl, ref.ids, ref.mask)[0], ref.mask).double() - want).abs().max().item()
        print(f"{impl} float32: logits {err:.1e}, eager float32 {eager32:.1e}, allowed {2 * eager32 + floor:.1e}")
        assert err <= 2 * eager32 + floor


@pytest.mark.parametrize("impl", ["attnlab", "attnlab_matrix"])
def test_gradients_of_the_sinks_and_projections_equal_eager(ref, impl):
    """The loss's gradient reaches each layer's sinks (and q, k, v) through the form's backward as through eager's."""
    got, want = grads(ref.m64, impl, ref.ids, ref.mask), ref.grads
    errs = {n: ((got[n] - want[n]).abs().max() / want[n].abs().max()).item() for n in want}
    sinks = [n for n in errs if n.endswith("sinks")]
    print(f"{impl}: relative gradient errors, sinks {max(errs[n] for n in sinks):.1e}, all {max(errs.values()):.1e}")
    assert len(sinks) == 2 and all(want[n].abs().max() > 0 for n in sinks)
    assert max(errs.values()) < 1e-9


def test_greedy_generation_through_the_cache_equals_eager(ref):
    """16 greedy tokens through transformers' KV cache (the sliding layer's cache and its decoding masks)."""
    got = generate(ref.m64, "attnlab", ref.ids, ref.mask)
    print(f"generated {got[:, 12:].tolist()}")
    assert torch.equal(got, ref.tokens)
