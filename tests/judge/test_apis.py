"""verify on the APIs kernel authors write to (attnlab.judge.apis): FlashAttention's flash_attn_func and its
varlen form, FlexAttention's flex_attention, decode over a paged KV cache -- each case put in the API's own layout
and arguments, the output, the gradients and the log-sum-exp judged against the one oracle.

The functions judged are tests/api_functions.py (written from the APIs' documentation, independently of
the semantics in attnlab.judge.apis), right and with one bug each, and PyTorch's own flex_attention. The APIs'
semantics are checked against PyTorch where PyTorch has the feature: the bottom-right causal mask, ALiBi as an added
bias, the log-sum-exp flex_attention returns.
"""

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from attnlab.judge import apis, oracle, verify
from attnlab.judge.apis import flash, lse
from attnlab.judge.apis import flex as flex_api
from tests import api_functions as A
from tests.helpers import named

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


def judged(fn, api, dtypes=("float32",), only=None, backward=True, first=None):
    cases = apis.cases(api, list(dtypes), long=False)
    if only is not None:
        cases = [c for c in cases if only in c.name]
    cases = cases[:first]
    r = verify.verify({fn.__name__: apis.Adapted(fn, api)}, cases, check_dropout=False, timeout=None,
                      backward=backward)
    counts = {s: sum(row.status == s for row in r.rows) for s in ("pass", "fail", "error", "skipped")}
    keys = named(r.diagnoses.get(fn.__name__, []))
    print(f"{api} {fn.__name__}: {counts}; diagnoses {keys}")
    return r, counts, keys


@pytest.mark.parametrize("fn, api", [(A.flash_attn_func, "flash-attn"), (A.flash_attn_varlen_func, "flash-attn-varlen"),
                                     (A.paged_decode, "paged-decode"), (A.flex_attention, "flex")])
def test_a_function_written_to_the_api_passes_every_case_the_api_can_express(fn, api):
    r, counts, _ = judged(fn, api)
    assert counts["pass"] >= 5 and counts["fail"] == counts["error"] == 0, counts
    judged_lse = [c for row in r.rows for c in row.comparisons if c.quantity == "lse"]
    assert len(judged_lse) == counts["pass"]  # the log-sum-exp on every case run
    for row in r.rows:
        if row.status == "skipped":  # a case the API cannot put: its reason names the API's own spelling
            assert row.detail and "not run" not in row.detail, row


@pytest.mark.parametrize("fn, api, key", [
    (A.flash_top_left, "flash-attn", "api-top-left"),
    (A.flex_ignores_block_mask, "flex", "api-mask-ignored"),
    (A.flash_lse_base2, "flash-attn", "lse-base2"),
    (A.varlen_shifted, "flash-attn-varlen", "varlen-keys-early"),
    (A.paged_in_order, "paged-decode", "paged-table-ignored"),
])
@pytest.mark.slow
def test_a_function_with_one_bug_fails_and_the_bug_is_named_where_it_can_be(fn, api, key):
    _, counts, keys = judged(fn, api)
    assert counts["fail"] >= 5, counts
    if key is not None:
        assert keys[0] == key, keys


def test_a_dead_rows_infinity_either_way_passes_but_a_finite_one_fails():
    _, counts, _ = judged(A.flash_dead_rows_plus_inf, "flash-attn", only="dead")
    assert counts["pass"] >= 1 and counts["fail"] == 0  # FlashAttention's kernel writes +inf there: accepted

    def finite_dead_rows(q, k, v, **kw):
        out, lse_, _ = A.flash_attn_func(q, k, v, **kw)
        return out, torch.where(torch.isinf(lse_), 0.0, lse_), None

    _, counts, keys = judged(finite_dead_rows, "flash-attn", only="dead")
    assert counts["fail"] >= 1 and keys == ["lse-dead-rows"], keys


def test_a_function_that_returns_no_lse_is_told_so():
    def out_only(q, k, v, return_attn_probs=False, **kw):
        return A.flash_attn_func(q, k, v, **kw)

    r, counts, keys = judged(out_only, "flash-attn", only="basic")
    assert counts["fail"] == 1 and keys == ["no-lse"], keys
    assert "returned no log-sum-exp" in r.rows[0].detail


@pytest.mark.slow  # over 2 s: flex_attention's eager path on every case the API can express
def test_pytorchs_own_flex_attention_passes_the_flex_api():
    from torch.nn.attention.flex_attention import flex_attention

    def torch_flex(*args, **kw):
        return flex_attention(*args, **kw)

    r, counts, _ = judged(torch_flex, "flex", only="causal", backward=False, first=4)  # (it has no backward on the CPU)
    assert counts["pass"] == 4, counts


def test_each_flex_call_gets_a_block_mask_of_its_own():
    """The case's BlockMask is made once and copied for each call: a function that writes into the one it was given
    (its block counts zeroed) leaves the next call's as create_block_mask makes it."""
    from torch.nn.attention.flex_attention import create_block_mask

    case = next(c for c in apis.cases("flex", ("float32",), long=False) if flex_api.mask_fn(c) is not None)
    fn, L, S = flex_api.mask_fn(case), case.L, case.S or case.L
    made = create_block_mask(lambda b, h, i, j: fn(b, h, i, j, L, S), 2, case.H, L, S, device="cpu")
    given = flex_api.block_mask(case, 2, "cpu")
    assert torch.equal(given.to_dense(), made.to_dense()) and given.kv_num_blocks.any()
    given.kv_num_blocks.zero_()
    again = flex_api.block_mask(case, 2, "cpu")
    assert again.kv_num_blocks is not given.kv_num_blocks
    assert torch.equal(again.to_dense(), made.to_dense()) and torch.equal(again.kv_indices, made.kv_indices)


def test_flash_attns_causal_is_pytorchs_lower_right_and_its_window_the_band():
    from torch.nn.attention.bias import causal_lower_right

    for L, S in ((5, 9), (9, 5), (7, 7)):
        want = causal_lower_right(L, S)._materialize(torch.device("cpu"))  # True where query i sees key j
        assert torch.equal(flash.keys_seen(L, S, causal=True), want), (L, S)
    seen = flash.keys_seen(4, 6, window=(1, 0))  # query i sits at key i + 2, and sees it and the one before
    assert seen.nonzero().tolist() == [[0, 1], [0, 2], [1, 2], [1, 3], [2, 3], [2, 4], [3, 4], [3, 5]]
    assert flash.keys_seen(4, 6) is None


def test_flash_attns_alibi_is_the_bias_sdpa_adds():
    from attnlab.judge.cases import Case

    case = Case("alibi", batch=(2,), H=4, L=6, S=9, api="flash-attn alibi")
    mod = flash.score_mod(case, {"alibi": True})
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, n, 8, generator=g, dtype=torch.float64) for n in (6, 9, 9))
    slopes = flash.slopes(case, {"alibi": True}).double()
    i, j = torch.arange(6)[:, None] + 3, torch.arange(9)[None, :]
    bias = -slopes[:, None, None] * (i - j).abs()  # FlashAttention's docstring: -slope * |i + S - L - j|
    ours = oracle.reference(q, k, v, score_mod=mod)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    err = (ours - theirs).abs().max().item()
    print(f"ALiBi: max|oracle with flash's score_mod - SDPA with the bias| = {err:.2e}")
    assert err < 1e-12


@pytest.mark.slow  # over 0.3 s of CPU in two runs of make test (tests/costs.py)
def test_the_oracles_lse_is_pytorchs_and_minus_infinity_where_a_row_sees_no_key():
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 16, 8, generator=g) for _ in range(3))
    bm = create_block_mask(lambda b, h, i, j: j <= i, None, None, 16, 16, device="cpu")
    _, theirs = flex_attention(q, k, v, block_mask=bm, return_lse=True)
    f = oracle.forward(q.double(), k.double(), v.double(), is_causal=True)
    err = (f.lse.float() - theirs).abs().max().item()
    print(f"lse: max|oracle - flex_attention's| = {err:.2e}")
    assert err < 1e-5
    dead = torch.zeros(16, 16, dtype=torch.bool)
    dead[1:] = True  # row 0 sees no key
    f = oracle.forward(q.double(), k.double(), v.double(), dead)
    assert torch.isneginf(f.lse[..., 0]).all() and torch.isfinite(f.lse[..., 1:]).all()
    assert lse.hints(f.lse * (1 / math.log(2)), f.lse) == ["lse-base2"]
    assert lse.hints(f.lse, f.lse) == []


@pytest.mark.slow  # over 2 s: a grid per API
def test_the_testing_module_speaks_the_apis():
    import attnlab.testing

    attnlab.testing.assert_attention_matches(A.paged_decode, api="paged-decode", dtypes=["float32"],
                                             check_dropout=False)
    with pytest.raises(AssertionError, match="paged_in_order"):
        attnlab.testing.assert_attention_matches(A.paged_in_order, api="paged-decode", dtypes=["float32"],
                                                 check_dropout=False)
    ids = [p.id for p in attnlab.testing.cases(["float32"], api="flash-attn")]
    assert any(i.startswith("flash: window") for i in ids)
    with pytest.raises(ValueError, match="api='flash': choose from 'sdpa', 'flash-attn'"):
        attnlab.testing.cases(api="flash")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "attnlab", "verify", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)  # --impl's module is found from the current folder


# every API through the console script (15 s in a busy suite): make test-long; the same APIs are judged in-process
# above, and verify's console script is run by tests/cli/test_verify_isolation.py
@pytest.mark.long
@pytest.mark.slow  # attnlab verify --api, a child interpreter per API
def test_verify_api_on_the_command_line():
    p = _cli("--api", "flash-attn", "--impl", "tests.api_functions:flash_top_left", "--quick", "--dtypes", "float32",
             "--no-dropout", "--only", "causal", "--show", "failures")
    print(p.stdout[-1500:])
    assert p.returncode == 1 and "is aligned top-left" in p.stdout, p.stderr[-800:]
    p = _cli("--api", "flash-attn", "--impl", "flash")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--impl flash: --api flash-attn judges your own" \
        in p.stderr, p.stderr
    p = _cli("--api", "flex", "--model", "gpt2")
    assert p.returncode == 2 and "--api flex and --model do not go together" in p.stderr, p.stderr


# The cases of this module measured over 0.3 s of CPU in two runs of make test (tests/costs.py; AMD EPYC, 2 cores),
# where the module's others take hundredths: slow-marked (tests/conftest.py), so make test-fast leaves them to make
# test
SLOW_CASES = {
    "test_a_function_written_to_the_api_passes_every_case_the_api_can_express[flash_attn_func-flash-attn]",
    "test_a_function_written_to_the_api_passes_every_case_the_api_can_express[flash_attn_varlen_func-flash-attn-varlen]",
    "test_a_function_written_to_the_api_passes_every_case_the_api_can_express[flex_attention-flex]",
}
