"""Training across ranks follows the single-process run: data parallel, context parallel, both; resume; a dead rank.

Each case trains the tiny model a few steps in 2 (or 4) local processes through the bounded launcher and
compares every step's loss and every log with one process training on the same global batches.
"""

import dataclasses
import os
import signal
import time

import pytest
import torch

from attnlab.distributed import launch, parallel
from attnlab.kernels.ring_layout import unshard
from attnlab.nn import GPT, GPTConfig
from attnlab.nn.shard import SeqShard
from attnlab.train import corpus, train
from attnlab.train import step as train_step

TINY = dataclasses.replace(train.PRESETS["tiny"], steps=4, eval_every=2, eval_batches=1, probe_rows=2)
LOSS_TOL = 1e-4  # float32 sums in another order, carried through a few optimizer steps
KEYS = ("train_loss", "val_loss", "grad_norm", "qk_grad_norm", "score_grad_norm", "entropy", "peak")


def _train(rank, world, cfg, cp, out, stop_at=None, resume=False):
    """One rank: train the sqrt variant; every step's loss and the log come back."""
    grid = parallel.grid(cp)
    losses = []

    def on_step(name, step, steps, loss, tps):
        losses.append(loss)
        if step == stop_at and rank == world - 1:  # Ctrl-C reaching one rank only: every rank stops here
            os.kill(os.getpid(), signal.SIGINT)

    try:
        r = train.run(cfg, variants=["sqrt"], out=f"{out}/rank{rank}", data=corpus.stdlib(200_000), grid=grid,
                      on_step=on_step, resume=resume)
    except KeyboardInterrupt as e:
        return {"losses": losses, "stopped": str(e)}
    return {"losses": losses, "log": r.variants["sqrt"], "config": r.config}


def _single(cfg, data, out):
    losses = []
    r = train.run(cfg, variants=["sqrt"], out=out, data=data, on_step=lambda n, s, S, loss, t: losses.append(loss))
    return losses, r.variants["sqrt"]


def _largest_difference(one, many) -> float:
    (l1, log1), (ln, logn) = one, (many["losses"], many["log"])
    assert len(l1) == len(ln) == TINY.steps and log1.step == logn.step
    worst = max(abs(a - b) for a, b in zip(l1, ln, strict=True))
    for k in KEYS:
        a, b = torch.tensor(getattr(log1, k), dtype=torch.float64), torch.tensor(getattr(logn, k), dtype=torch.float64)
        worst = max(worst, float((a - b).abs().max()))
    return worst


def _check_grid(dp, cp, cfg, data, tmp_path):
    t0 = time.monotonic()
    many = launch.results(launch.launch(_train, dp * cp, (cfg, cp, tmp_path / "many"), timeout_s=120.0,
                                        pg_timeout_s=30.0))
    took = time.monotonic() - t0
    one = _single(cfg, data, tmp_path / "one")
    diff = _largest_difference(one, many[0])
    print(f"{dp} x {cp} ({cfg.position} positions): largest difference from one process {diff:.2e} over "
          f"{cfg.steps} steps and {len(one[1].step)} logs; launch took {took:.1f} s")
    assert diff < LOSS_TOL
    assert all(m["losses"] == many[0]["losses"] for m in many)  # every rank saw the same global loss
    assert many[0]["config"]["data_parallel"] == dp and many[0]["config"]["context_parallel"] == cp
    assert many[0]["log"].tokens == one[1].tokens == cfg.steps * cfg.batch_size * cfg.block_size
    # rank 0 alone writes checkpoints
    assert (tmp_path / "many" / "rank0" / "checkpoints" / "scale-sqrt.pt").is_file()
    assert not any((tmp_path / "many" / f"rank{r}").exists() for r in range(1, dp * cp))
    return diff


@pytest.mark.slow
def test_data_parallel_two_ranks_follow_one_process(data, tmp_path):
    _check_grid(2, 1, TINY, data, tmp_path)


@pytest.mark.slow
def test_context_parallel_two_ranks_with_rope_follow_one_process(data, tmp_path):
    _check_grid(1, 2, dataclasses.replace(TINY, position="rope"), data, tmp_path)


@pytest.mark.slow
def test_a_two_by_two_grid_follows_one_process(data, tmp_path):
    _check_grid(2, 2, TINY, data, tmp_path)


def _shards(rank, world, position):
    """Logits of one rank's zigzag shard, and whether a wrong set of positions changes them."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=20, block_size=16, n_layer=2, n_head=2, d_model=16, position=position)).eval()
    idx = torch.randint(20, (2, 16), generator=torch.Generator().manual_seed(1))
    x, _, part = parallel.Grid(rank, world, world, "gloo").split(idx, idx)
    expected = [0, 1, 2, 3, 12, 13, 14, 15] if rank == 0 else [4, 5, 6, 7, 8, 9, 10, 11]  # chunks r and 2W-1-r
    assert part.positions.tolist() == expected
    with torch.no_grad():
        logits = model(x, shard=part)[0]
        wrong = model(x, shard=SeqShard(torch.arange(rank * 8, rank * 8 + 8), None, "zigzag"))[0]
    return logits, bool((wrong - logits).abs().max() > 1e-3)


@pytest.mark.parametrize("position", ["rope", "learned"])
def test_a_sharded_forward_equals_the_whole_one_and_positions_matter(position):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=20, block_size=16, n_layer=2, n_head=2, d_model=16, position=position)).eval()
    idx = torch.randint(20, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        whole = model(idx)[0]
    parts = launch.results(launch.launch(_shards, 2, (position,), timeout_s=60.0, pg_timeout_s=20.0))
    err = float((unshard([p[0] for p in parts], "zigzag", dim=1) - whole).abs().max())
    print(f"{position}: sharded logits vs whole, max error {err:.2e}")
    assert err < 1e-5
    assert all(p[1] for p in parts)  # contiguous positions on a zigzag shard give other logits


# a Ctrl-C into two-rank training and a resume; the Ctrl-C that leaves nothing running is in make test
# (test_nothing_left)
@pytest.mark.long
@pytest.mark.slow
def test_resume_across_ranks_after_ctrl_c_on_one_rank_reproduces_the_run(data, tmp_path):
    cfg = dataclasses.replace(TINY, steps=6, dropout=0.1)  # dropout: every rank's random stream must come back
    kw = dict(timeout_s=120.0, pg_timeout_s=30.0)
    a = launch.results(launch.launch(_train, 2, (cfg, 1, tmp_path / "a"), **kw))
    b = launch.results(launch.launch(_train, 2, (cfg, 1, tmp_path / "b", 3), **kw))
    assert all("stopped at step 3" in r["stopped"] for r in b)  # the Ctrl-C reached rank 1, both stopped
    c = launch.results(launch.launch(_train, 2, (cfg, 1, tmp_path / "b", None, True), **kw))
    assert b[0]["losses"] + c[0]["losses"] == a[0]["losses"]  # bit for bit
    for k in ("step", *KEYS):
        assert getattr(c[0]["log"], k) == getattr(a[0]["log"], k), k
    # a checkpoint written by 2 ranks resumes only on the same grid: here, one process
    with pytest.raises(ValueError, match=r"other settings \(data_parallel: 2 -> 1\)"):
        train.run(cfg, variants=["sqrt"], out=tmp_path / "b" / "rank0", data=data, resume=True)


def test_a_grid_that_does_not_split_the_batch_names_the_numbers():
    with pytest.raises(ValueError, match="batch_size 8 does not split over 3 data-parallel ranks"):
        parallel.Grid(0, 3, 1).check(8, 32)
    with pytest.raises(ValueError, match=r"block_size \(the sequence length\) 30 is not divisible"):
        parallel.Grid(0, 4, 2).check(8, 30)
    with pytest.raises(ValueError, match="positions"):
        SeqShard(torch.zeros(3), None)
    model = GPT(GPTConfig(vocab_size=20, block_size=16, n_layer=1, n_head=2, d_model=16))
    with pytest.raises(ValueError, match="shard has 4 positions but idx holds 8"):
        model(torch.zeros(1, 8, dtype=torch.long), shard=SeqShard(torch.arange(4)))
    with pytest.raises(ValueError, match="longer than block_size=16"):
        model(torch.zeros(1, 4, dtype=torch.long), shard=SeqShard(torch.arange(14, 18)))


@pytest.mark.long  # a memory measurement at a long context
@pytest.mark.slow
def test_context_parallel_lowers_each_ranks_peak_memory_at_a_long_context():
    cfg = dataclasses.replace(TINY, block_size=1024, batch_size=2, n_layer=2, d_model=64, n_head=2)
    r = train_step.run(cfg, 96, dp=1, cp=2, repeats=1)
    one, peaks = r["one"].peak_bytes, [x.peak_bytes for x in r["ranks"]]
    print(f"T=1024, one training step: per-rank peaks {[p / 2**20 for p in peaks]} MiB with 2 context-parallel ranks, "
          f"{one / 2**20:.1f} MiB in one process ({max(peaks) / one:.2f}x)")
    assert None not in peaks and max(peaks) < 0.8 * one  # each rank holds half of every sequence's activations


# The cases of this module measured over 0.3 s of CPU in two runs of make test (tests/costs.py; AMD EPYC, 2 cores),
# where the module's others take hundredths: slow-marked (tests/conftest.py), so make test-fast leaves them to make
# test
SLOW_CASES = {
    "test_a_sharded_forward_equals_the_whole_one_and_positions_matter[learned]",
    "test_a_sharded_forward_equals_the_whole_one_and_positions_matter[rope]",
}
