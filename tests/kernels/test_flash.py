"""The flash form: equal to the oracle and the matrix form in every configuration, O(L) saved state."""

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab import masks
from attnlab.judge import oracle, rule
from attnlab.kernels import flash, online
from tests.helpers import qkv


def both(size, bq, bk, seed=0, **kw):
    """Run flash (with tiles bq x bk) and the matrix form on the same inputs; return the max errors."""
    a = [t.requires_grad_() for t in qkv(*size, seed=seed)]
    b = [t.detach().clone().requires_grad_() for t in a]
    gqa = size[1] != size[2]
    mask = kw.pop("attn_mask", None)
    ma = mask.clone().requires_grad_() if isinstance(mask, torch.Tensor) and mask.is_floating_point() else mask
    mb = mask.clone().requires_grad_() if isinstance(mask, torch.Tensor) and mask.is_floating_point() else mask
    o1 = attnlab.attention(*a, attn_mask=ma, enable_gqa=gqa, impl="flash", block_q=bq, block_k=bk, **kw)
    o2 = attnlab.attention(*b, attn_mask=mb, enable_gqa=gqa, impl="matrix", **kw)
    g = torch.randn_like(o1)
    o1.backward(g)
    o2.backward(g)
    errs = {"out": rule.max_err(o1, o2)}
    errs.update({n: rule.max_err(x.grad, y.grad) for n, x, y in zip(("dq", "dk", "dv"), a, b, strict=True)})
    if isinstance(ma, torch.Tensor) and ma.requires_grad:
        errs["dmask"] = rule.max_err(ma.grad, mb.grad)
    print(size, bq, bk, {k: f"{v:.1e}" for k, v in errs.items()})
    return errs


SIZES = [  # N, H, Hkv, L, S, E, Ev
    (2, 2, 2, 17, 23, 8, 6),
    (1, 3, 3, 23, 17, 59, 40),
    (1, 6, 2, 30, 30, 16, 16),
    (2, 4, 1, 1, 37, 8, 8),
    (1, 2, 2, 37, 1, 8, 8),
]


@pytest.fixture(params=["bounded", "online max"])
def path(request, monkeypatch):
    """Run a test on both forward paths: rows with provably small scores skip the running max."""
    if request.param == "online max":
        monkeypatch.setattr(online, "SAFE_LOGIT", -1.0)  # what the plan's bounded rule reads at each call
    return request.param


@pytest.mark.parametrize("size", SIZES, ids=lambda s: "N{}H{}/{}L{}S{}E{}Ev{}".format(*s))
@pytest.mark.parametrize("tiles", [(4, 5), (16, 7), (256, 512)])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_equals_matrix(size, tiles, causal, path):
    assert max(both(size, *tiles, is_causal=causal).values()) < 1e-12


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_huge_logits_take_the_online_max_path(dtype):
    """Scores in the hundreds: exp overflows unless the running max is subtracted."""
    q, k, v = qkv(1, 2, 2, 40, 33, 16, 8, dtype=dtype)
    q = q * 40
    mask = torch.rand(40, 33, generator=torch.Generator().manual_seed(0)) > 0.3
    out = attnlab.attention(q, k, v, attn_mask=mask, impl="flash", block_q=8, block_k=8)
    ref = attnlab.attention(q.double(), k.double(), v.double(), attn_mask=mask, impl="matrix")
    err = rule.max_err(out, ref)
    print(dtype, "max |flash - float64 matrix| with scores up to", float((q @ k.transpose(-2, -1)).abs().max() / 4),
          ":", err)
    assert torch.isfinite(out).all()
    assert err < (1e-12 if dtype == torch.float64 else 1e-4)


@pytest.mark.parametrize("name", ["causal_lower_right", "sliding_window", "prefix_lm", "document", "or", "padding",
                                  "bool", "float", "float-broadcast", "dead-rows"])
def test_flash_masks_and_mask_gradients(name, path):
    L = S = 29
    g = torch.Generator().manual_seed(1)
    mask = {
        "causal_lower_right": masks.causal_lower_right(),
        "sliding_window": masks.sliding_window(5),
        "prefix_lm": masks.prefix_lm(6),
        "document": masks.document(torch.tensor([0] * 9 + [1] * 13 + [2] * 7)) & masks.causal(),
        "or": masks.sliding_window(3) | masks.prefix_lm(2),
        "padding": (torch.arange(S) < 20).view(1, 1, 1, S),
        "bool": torch.rand(2, 4, L, S, generator=g) > 0.3,
        "float": torch.randn(2, 4, L, S, generator=g, dtype=torch.float64),
        "float-broadcast": torch.randn(4, 1, S, generator=g, dtype=torch.float64),
        "dead-rows": torch.rand(L, S, generator=g) > 0.5,
    }[name]
    if name == "dead-rows":
        mask[::4] = False
    errs = both((2, 4, 2, L, S, 16, 8), 8, 6, attn_mask=mask)
    assert max(errs.values()) < 1e-12
    if name.startswith("float"):
        assert "dmask" in errs


@pytest.mark.parametrize("source", ["window 1", "window 3", "bool per head", "float", "no mask, S = 1"])
def test_rows_that_see_one_key_get_exactly_zero_gradients(source):
    """D comes from forward's output ([P10]), which rounds unlike dP: a row that sees one key (true dq = 0,
    true d mask = 0) is found from the mask and given dS = 0. Every other row still matches float64."""
    N, H, Hkv, L, E = 2, 4, 2, 29, 16
    S = 1 if source == "no mask, S = 1" else L
    g = torch.Generator().manual_seed(3)
    mask, lone = None, torch.zeros(1, H, L, dtype=torch.bool)
    if source.startswith("window"):
        w = int(source.split()[1])
        mask = masks.sliding_window(w)
        lone[..., :1] = True
        if w == 1:
            lone[:] = True
    elif source in ("bool per head", "float"):
        seen = torch.rand(1, H, L, S, generator=g) > 0.4
        lone = torch.rand(1, H, L, generator=g) > 0.6
        seen[lone] = False
        seen[..., 5][lone] = True  # these (head, row)s see key 5 alone
        seen[..., 6] |= ~lone  # every other row sees at least two keys
        seen[..., 7] |= ~lone
        mask = seen if source == "bool per head" else torch.zeros(seen.shape).masked_fill(~seen, float("-inf"))
        mask = mask.requires_grad_() if source == "float" else mask
    else:
        lone[:] = True
    q, k, v, go = (t.float() for t in qkv(N, H, Hkv, L, S, E, grad_out=True, generator=g))
    ins = [t.clone().requires_grad_() for t in (q, k, v)]
    attnlab.attention(*ins, attn_mask=mask, enable_gqa=True, impl="flash", block_q=8, block_k=8).backward(go)
    _, ref_dq, ref_dk, _ = oracle.reference(q, k, v, attn_mask=mask.detach() if source == "float" else mask,
                                            enable_gqa=True, grad_out=go)[:4]
    dq = ins[0].grad
    print(source, "lone rows:", int(lone.sum()), "|dq| there:", float(dq.masked_select(lone[..., None]).abs().max()),
          "max |dq - oracle|:", rule.max_err(dq, ref_dq))
    assert int(lone.sum()) > 0
    assert torch.equal(dq.masked_select(lone[..., None]), torch.zeros(int(lone.expand(N, H, L).sum()) * E))
    assert rule.max_err(dq, ref_dq) < 1e-5 and rule.max_err(ins[1].grad, ref_dk) < 1e-5
    if lone.all():
        assert torch.equal(ins[1].grad, torch.zeros_like(k))
    if source == "float":
        assert torch.equal(mask.grad.sum(-1).masked_select(lone), torch.zeros(int(lone.sum())))


def test_fully_masked_rows_zero_with_finite_grads():
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, 2, 9, 11, 8, 8))
    mask = torch.ones(9, 11, dtype=torch.bool)
    mask[4] = False
    out = attnlab.attention(q, k, v, attn_mask=mask, impl="flash", block_q=4, block_k=4)
    assert torch.equal(out[:, :, 4], torch.zeros_like(out[:, :, 4]))
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


@pytest.mark.slow
def test_gradcheck_float64():
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, 1, 5, 6, 4, 3))
    bias = torch.randn(2, 5, 6, dtype=torch.float64, requires_grad=True)

    def f(q, k, v, bias):
        return attnlab.attention(q, k, v, attn_mask=bias, enable_gqa=True, impl="flash", block_q=4, block_k=3)

    assert torch.autograd.gradcheck(f, (q, k, v, bias))
    assert torch.autograd.gradcheck(
        lambda q, k, v: attnlab.attention(q, k, v, is_causal=True, enable_gqa=True, impl="flash", block_q=2,
                                          block_k=4), (q, k, v))
    assert torch.autograd.gradcheck(  # dropout too: the per-tile generator makes the function deterministic
        lambda q, k, v: _seeded(lambda: attnlab.attention(q, k, v, dropout_p=0.3, enable_gqa=True, impl="flash",
                                                          block_q=4, block_k=3)), (q, k, v))


def _seeded(fn, seed=7):
    torch.manual_seed(seed)
    return fn()


@pytest.mark.slow
def test_dropout_mean_approaches_no_dropout_output():
    q, k, v = qkv(1, 2, 2, 16, 16, 8, 8, dtype=torch.float32)
    exact = attnlab.attention(q, k, v, is_causal=True, impl="flash")
    torch.manual_seed(0)
    errs = []
    total = torch.zeros_like(exact)
    for n in range(1, 901):
        total += attnlab.attention(q, k, v, is_causal=True, dropout_p=0.25, impl="flash", block_q=16, block_k=8)
        if n in (100, 900):
            errs.append((total / n - exact).abs().mean().item())
    print("mean |average over seeds - no-dropout output| after 100 and 900 seeds:", errs)
    assert errs[1] < errs[0] / 2  # shrinks like 1/sqrt(n): by 3 in expectation
    assert errs[1] < 0.03


def test_dropout_grads_equal_autograd_through_matrix_with_same_keep_mask():
    a = [t.requires_grad_() for t in qkv(2, 4, 2, 21, 19, 8, 8)]
    b = [t.detach().clone().requires_grad_() for t in a]
    torch.manual_seed(5)
    o1 = attnlab.attention(*a, is_causal=True, dropout_p=0.4, enable_gqa=True, impl="flash", block_q=8, block_k=4)
    torch.manual_seed(5)
    o2 = attnlab.attention(*b, is_causal=True, dropout_p=0.4, enable_gqa=True, impl="matrix")
    g = torch.randn_like(o1)
    o1.backward(g)
    o2.backward(g)
    errs = [rule.max_err(o1, o2)] + [rule.max_err(x.grad, y.grad) for x, y in zip(a, b, strict=True)]
    print("flash vs matrix with one keep-mask: out/dq/dk/dv", errs)
    assert max(errs) < 1e-12
    assert rule.max_err(o1, attnlab.attention(*b, is_causal=True, enable_gqa=True)) > 0.1  # dropout did act


def test_saves_only_output_and_log_sum_exp():
    """Nothing of size L x S is kept for backward: the weights are recomputed tile by tile."""
    L = S = 300
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, 2, L, S, 8, 8, dtype=torch.float32))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        out = attnlab.attention(q, k, v, is_causal=True, impl="flash", block_q=64, block_k=64)
    out.sum().backward()
    print("saved tensor sizes:", saved)
    assert saved and max(saved) <= 2 * L * 8 < L * S


def test_block_map_matches_dense_mask_and_skips():
    m = masks.sliding_window(40)
    bm = m.block_map(1, 1, 256, 256, 32, 32)
    dense = m.dense(1, 1, 256, 256)[0, 0]
    for qt in range(8):
        for kt in range(8):
            t = dense[qt * 32:(qt + 1) * 32, kt * 32:(kt + 1) * 32]
            want = masks.FULL if t.all() else masks.PARTIAL if t.any() else masks.EMPTY
            assert int(bm.kind[qt, kt]) == want
    c = bm.counts()
    print("sliding_window(40), 256 x 256, tiles 32:", c)
    assert c["empty"] > c["partial"] + c["full"]  # most of the work is skipped
    assert m.block_map(1, 1, 256, 256, 32, 32) is bm  # compiled once, cached
    assert len(bm.partial) == c["partial"] <= 3 * 8  # O(L) stored, not O(L x S)


def test_block_map_cache_is_bounded():
    m = masks.causal_lower_right()
    for S in range(1, 80):  # decoding: one more key every step
        m.block_map(1, 1, 1, S, 1, 16)
    assert len(m._cache) <= 32
    assert m.block_map(1, 1, 1, 79, 1, 16) is m.block_map(1, 1, 1, 79, 1, 16)


def test_bad_tile_sizes():
    q, k, v = qkv(1, 1, 1, 4, 4, 4, 4)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="block_q must be a positive integer tile size"):
            flash.attention(q, k, v, block_q=bad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_low_precision_within_rule(dtype):
    q, k, v = qkv(1, 4, 4, 97, 97, 40, 40, dtype=dtype)
    ref = oracle.reference(q, k, v, is_causal=True)
    c = rule.compare("out", attnlab.attention(q, k, v, is_causal=True, impl="flash", block_q=32, block_k=16),
                       F.scaled_dot_product_attention(q, k, v, is_causal=True), ref, dtype,
                       rule.rounding_floor(q, k, v, is_causal=True, dtype=dtype)["out"])
    print(dtype, c)
    assert c.passed
