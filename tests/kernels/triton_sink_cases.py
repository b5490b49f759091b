"""The triton form with attention sinks under Triton's CPU interpreter: forward, gradients and lse against gpt-oss's
formula in float64, by the rule of tests/kernels/test_sinks.py.

Triton reads TRITON_INTERPRET when a kernel is defined, so these run in a process of their own
(tests/kernels/test_sinks.py starts it) where it is set before anything imports Triton. Tiles of 16 x 16 and
lengths past one tile, so that partial and skipped tiles occur; each case prints its errors.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before Triton defines a kernel (this file is its own process)

import pytest  # noqa: E402
import torch  # noqa: E402

from attnlab import masks  # noqa: E402
from attnlab.judge import rule  # noqa: E402
from attnlab.kernels import flash_triton  # noqa: E402
from attnlab.kernels.online import LN2  # noqa: E402
from tests.kernels.test_sinks import assert_pass, gpt_oss, inputs, judge  # noqa: E402

torch.set_num_threads(1)
TILES = {"block_q": 16, "block_k": 16}


def dead_rows(L, S):
    """A causal (L, S) bool mask with rows 0 and 5 seeing no key, row 1 exactly one."""
    m = torch.ones(L, S, dtype=torch.bool).tril()
    m[0] = m[5] = False
    return m


CASES = {  # name: (input sizes, attention keywords)
    "gqa, dead rows, L != S": ({"n": 1, "h": 4, "hkv": 2, "l": 19, "s": 23, "seed": 1},
                               {"attn_mask": dead_rows(19, 23)}),
    "causal, float mask": ({"n": 1, "h": 2, "hkv": 2, "l": 18, "s": 18, "seed": 2},
                           {"is_causal": True, "attn_mask": torch.randn(1, 2, 18, 18) * 0.5}),
    "sliding window": ({"n": 1, "h": 2, "hkv": 1, "l": 20, "s": 20, "seed": 3}, {"attn_mask": masks.sliding_window(5)}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_float32(case):
    sizes, kw = CASES[case]
    q, k, v, g, sinks = inputs(**sizes, sink_scale=2.0)
    assert_pass(judge("triton", q, k, v, sinks, g, **kw, **TILES))


def test_bfloat16():
    q, k, v, g, sinks = inputs(n=1, h=2, hkv=2, l=17, s=17, seed=4, sink_scale=2.0)
    assert_pass(judge("triton", q, k, v, sinks, g, dtype=torch.bfloat16, is_causal=True, **TILES))


@pytest.mark.parametrize("sink", [0.5, -120.0, 120.0])
def test_lse_and_rows_that_see_no_key(sink):
    """lse = (shift + log2 norm) ln 2 from what the forward kernel saves: the sink itself for a row that sees no
    key, gpt-oss's log-sum-exp over the keys and the sink for the others."""
    q, k, v, _, _ = inputs(n=1, h=2, hkv=2, l=19, s=23, seed=5)
    q, k, v = (t.float() for t in (q, k, v))
    sinks = torch.tensor([sink, 1.0])
    mask = dead_rows(19, 23)
    out, shift, norm = flash_triton.statistics(q, k, v, mask, sinks=sinks, **TILES)
    lse = (shift.double() + torch.log2(norm.double())) * LN2
    ref_out, ref = gpt_oss(q.double(), k.double(), v.double(), sinks.double(), mask)
    err, out_err = rule.max_err(lse, ref), rule.max_err(out, ref_out)
    print(f"triton sink {sink}: lse error {err:.1e}, out error {out_err:.1e}, dead rows' lse {lse[0, :, 0].tolist()}")
    assert out[:, :, 0].abs().max() == 0 and abs(lse[0, 0, 0].item() - sink) < 1e-5 * (1 + abs(sink))
    assert err < 1e-5 * (1 + ref.abs().max().item()) and out_err < 1e-5
