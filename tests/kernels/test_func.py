"""The flash form under torch.func: vmap, jacrev, and gradcheck with its batched-gradient check.

``gradcheck(..., check_batched_grad=True)`` vmaps the backward pass over several output gradients;
``torch.func.jacrev`` vmaps it over a basis; ``torch.func.vmap`` batches the forward. Each must give
what calling the form once per entry gives (and the matrix form's Jacobian), on every path: tiles,
bands, a float mask with its gradient, dropout, GQA, a score modifier with a learnable tensor.
"""

import pytest
import torch

import attnlab
from attnlab import masks, mods
from attnlab.kernels import flash_band
from tests.helpers import qkv

CASES = {  # name: (N, H, Hkv, L, S, E), keywords
    "causal, tiles of 3 x 2": ((1, 2, 2, 5, 6, 3), {"is_causal": True, "block_q": 3, "block_k": 2}),
    "GQA, L != S": ((1, 4, 2, 4, 7, 3), {"enable_gqa": True}),
    "window on bands": ((1, 1, 1, 20, 20, 3), {"attn_mask": masks.sliding_window(2)}),
    "dropout": ((1, 2, 2, 4, 5, 3), {"dropout_p": 0.3, "block_q": 2, "block_k": 2}),
    "float mask (learned)": ((1, 2, 2, 4, 5, 3), {"attn_mask": "bias"}),
    "ALiBi, learned slopes": ((1, 2, 2, 4, 5, 3), {"score_mod": "alibi"}),
}


def build(name):
    """(the function of the inputs, the inputs) for one case; dropout redraws the same seed each call."""
    size, kw = CASES[name]
    kw = dict(kw)
    ins = list(qkv(*size))
    if kw.get("attn_mask") == "bias":
        ins.append(torch.randn(size[1], size[3], size[4], dtype=torch.float64))
    if kw.get("score_mod") == "alibi":
        ins.append(torch.tensor([0.5, -0.25], dtype=torch.float64))
    ins = [t.requires_grad_() for t in ins]

    def f(q, k, v, *extra, impl="flash"):
        args = dict(kw, impl=impl)
        if args.get("attn_mask") == "bias":
            args["attn_mask"] = extra[0]
        if args.get("score_mod") == "alibi":
            args["score_mod"] = mods.alibi(slopes=extra[0])
        if impl != "flash":
            args.pop("block_q", None), args.pop("block_k", None)
        torch.manual_seed(7)  # dropout: one seed, the same weights dropped at every call
        return attnlab.attention(q, k, v, **args)

    return f, ins


@pytest.mark.parametrize("name", list(CASES))
def test_gradcheck_with_batched_gradients(name, small_bands):
    f, ins = build(name)
    if name == "window on bands":
        assert flash_band.bands(masks.sliding_window(2), 1, 1, 20, 20, 4) is not None
    assert torch.autograd.gradcheck(f, ins, check_batched_grad=True)


@pytest.mark.parametrize("name", ["causal, tiles of 3 x 2", "GQA, L != S", "window on bands", "float mask (learned)"])
def test_jacrev_equals_the_matrix_forms_jacobian(name, small_bands):
    f, ins = build(name)
    argnums = tuple(range(len(ins)))
    mine = torch.func.jacrev(f, argnums=argnums)(*ins)
    theirs = torch.autograd.functional.jacobian(lambda *x: f(*x, impl="matrix"), tuple(ins))
    errs = [(a - b).abs().max().item() for a, b in zip(mine, theirs, strict=True)]
    print(name, [f"{e:.1e}" for e in errs])
    assert max(errs) < 1e-12


def test_vmap_equals_one_call_per_entry():
    q, k, v = qkv(5, 2, 2, 6, 7, 4)  # the vmapped dim: 5
    f = torch.func.vmap(lambda q, k, v: attnlab.attention(q, k, v, is_causal=True, impl="flash", block_q=4),
                        in_dims=(0, None, 0))
    got = f(q, k[0], v)
    want = torch.stack([attnlab.attention(q[i], k[0], v[i], is_causal=True, impl="flash") for i in range(5)])
    assert got.shape == want.shape and (got - want).abs().max() < 1e-14
    g = torch.func.vmap(torch.func.grad(lambda q, k, v: attnlab.attention(q, k, v, impl="flash").sum()))(q, k, v)
    ref = torch.func.vmap(torch.func.grad(lambda q, k, v: attnlab.attention(q, k, v, impl="matrix").sum()))(q, k, v)
    assert (g - ref).abs().max() < 1e-12


def test_double_backward_says_which_form_has_one():
    q, k, v = (t.requires_grad_() for t in qkv(1, 1, 1, 3, 3, 2))
    out = attnlab.attention(q, k, v, impl="flash")
    (dq,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="not differentiable.*matrix form"):
        dq.sum().backward()


# The cases of this module measured over 0.3 s of CPU in two runs of make test (tests/costs.py; AMD EPYC, 2 cores),
# where the module's others take hundredths: slow-marked (tests/conftest.py), so make test-fast leaves them to make
# test
SLOW_CASES = {
    "test_gradcheck_with_batched_gradients[GQA, L != S]",
    "test_gradcheck_with_batched_gradients[causal, tiles of 3 x 2]",
    "test_gradcheck_with_batched_gradients[dropout]",
    "test_gradcheck_with_batched_gradients[float mask (learned)]",
    "test_gradcheck_with_batched_gradients[window on bands]",
}
