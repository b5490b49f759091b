"""bench --mod: score modifiers in the benchmark, flash against compiled flex with the same modifier."""

import pytest
import torch

from attnlab import mods
from attnlab.kernels import flash
from attnlab.measure import bench, flex


def test_mod_names_and_errors():
    assert bench.make_mod(None, 4) is None
    assert bench.make_mod("softcap:30", 4).name == "softcap(30)"
    assert bench.make_mod("alibi", 4).name == "alibi(4)"
    for bad in ("softcap", "softcap:-1", "softcap:x", "alibi:3", "tanh"):
        with pytest.raises(ValueError, match="score modifier"):
            bench.BenchConfig(mod=bad)


@pytest.mark.slow
def test_sweep_with_a_modifier_skips_forms_without_one():
    cfg = bench.BenchConfig(seq=(32,), impls=("flash", "matrix", "sdpa"), heads=2, head_dim=16, mod="alibi",
                            causal=True, repeats=3, budget_s=10, matmul_n=64)
    result = bench.sweep(cfg)
    rows = {r.impl: r for r in result.results}
    assert rows["flash"].time_s > 0 and rows["matrix"].time_s > 0
    assert rows["sdpa"].skipped == "takes no score modifier (--mod alibi)"
    assert result.config["mod"] == "alibi"


@pytest.mark.slow
@pytest.mark.long  # torch.compile of flex with two modifiers: about a minute on 2 cores
def test_compiled_flex_applies_the_same_modifier_as_flash():
    mod = mods.compose(mods.alibi(4), mods.softcap(3.0))  # both built-ins in one compile (one is seconds)
    if flex.unavailable():
        pytest.skip(flex.unavailable())
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, 128, 16, generator=g) for _ in range(3))
    want = flash.attention(q, k, v, is_causal=True, score_mod=mod, block_q=32, block_k=32)
    got = flex.attention(q, k, v, is_causal=True, score_mod=mod)
    err = (got - want).abs().max().item()
    print(f"flex vs flash with {mod.name}: {err:.2e}")
    assert err < 1e-5
