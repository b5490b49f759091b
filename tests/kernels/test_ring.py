"""Ring attention: layouts and argument errors in-process; 2 and 4 gloo processes against single-process attention.

Starting process groups is the slow part on a small CPU, so each world size is launched once and
runs every check inside it (forward and gradients, causal or not, both layouts, GQA, a half dtype,
dropout and awkward tile sizes, mismatched shards); a rank that dies gets a launch of its own.
"""

import os
import time

import pytest
import torch
import torch.distributed as dist

import attnlab
from attnlab.distributed import launch
from attnlab.distributed import ring as lab
from attnlab.judge import rule
from attnlab.kernels import flash, ring
from tests.processes import sleeps

TINY = dict(heads=2, head_dim=8, backward=True, measure=False, pg_timeout_s=20.0)


# ---- in one process: layouts, helpers, errors -------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
@pytest.mark.parametrize("world", [1, 2, 4])
def test_shard_unshard_and_positions(layout, world):
    x = torch.arange(2 * 3 * 16 * 5).reshape(2, 3, 16, 5)
    parts = [ring.shard(x, r, world, layout) for r in range(world)]
    assert all(p.shape == (2, 3, 16 // world, 5) and p.is_contiguous() for p in parts)
    assert torch.equal(ring.unshard(parts, layout), x)
    for r in range(world):
        assert torch.equal(parts[r], x[:, :, ring.positions(r, world, 16, layout)])
    y = x.transpose(1, 2)  # (2, 16, 3, 5): the sequence in dim 1
    assert torch.equal(ring.unshard([ring.shard(y, r, world, layout, dim=1) for r in range(world)], layout, dim=1), y)


def test_zigzag_gives_each_rank_one_early_and_one_late_chunk():
    assert ring.positions(0, 2, 8, "zigzag").tolist() == [0, 1, 6, 7]
    assert ring.positions(1, 2, 8, "zigzag").tolist() == [2, 3, 4, 5]
    assert ring.positions(1, 2, 8, "contiguous").tolist() == [4, 5, 6, 7]


def test_lengths_that_do_not_split_name_the_numbers():
    x = torch.zeros(1, 1, 10, 4)
    with pytest.raises(ValueError, match=r"sequence length 10 is not divisible by the world size 4"):
        ring.shard(x, 0, 4)
    with pytest.raises(ValueError, match=r"length 12 is not divisible by the 2 x world size = 8 chunks \(zigzag"):
        ring.shard(torch.zeros(12, 4), 0, 4, "zigzag")
    with pytest.raises(ValueError, match="layout must be one of contiguous, zigzag, got 'striped'"):
        ring.shard(x, 0, 2, "striped")
    with pytest.raises(ValueError, match="seq.*6 is not divisible by the 2 x world size = 8"):
        lab.RingConfig(world=4, seq=6 * 1, layout="zigzag").validate()


def test_ring_needs_a_process_group_and_checks_its_arguments_first():
    assert not dist.is_initialized()
    q = torch.randn(1, 2, 8, 4)
    assert "ring" in attnlab.forms(distributed=True) and "ring" not in attnlab.forms()
    with pytest.raises(RuntimeError, match="none is initialised: call torch.distributed.init_process_group"):
        attnlab.attention(q, q, q, is_causal=True, impl="ring")
    with pytest.raises(ValueError, match="takes is_causal=True or no mask"):
        ring.attention(q, q, q, attn_mask=torch.ones(8, 8, dtype=torch.bool))
    with pytest.raises(ValueError, match="one length .* got L=8 and S=6"):
        ring.attention(q, q[:, :, :6], q[:, :, :6], is_causal=True)
    with pytest.raises(ValueError, match="must be even; got L=7, S=7"):
        ring.attention(q[:, :, :7], q[:, :, :7], q[:, :, :7], layout="zigzag")
    with pytest.raises(ValueError, match="key has 4 heads but query has 2"):
        ring.attention(q, torch.randn(1, 4, 8, 4), torch.randn(1, 4, 8, 4))
    with pytest.raises(TypeError, match="stats must be a RingStats"):
        ring.attention(q, q, q, stats={})


def test_launch_deadline_stops_a_rank_that_never_returns():
    t0 = time.monotonic()
    out = launch.launch(sleeps, 1, timeout_s=2.0, pg_timeout_s=5.0)
    assert time.monotonic() - t0 < 15
    assert out[0].exitcode is None and "launch deadline (2 s)" in out[0].error
    with pytest.raises(launch.LaunchError, match="rank 0 of 1: still running"):
        launch.results(out)


# ---- 2 and 4 processes ------------------------------------------------------------------------------------------

def _probe(rank, world, cfgs):
    """Inside each rank: the lab's cases, then dropout with small tiles against flash, then mismatched shards."""
    found = {"cases": [lab.rank_case(rank, world, c) for c in cfgs]}
    g = torch.Generator().manual_seed(3)
    T = 8 * world
    q, k, v, go = (torch.randn(2, 4 if i in (0, 3) else 2, T, 6, generator=g, dtype=torch.float64) for i in range(4))
    mine = [ring.shard(t, rank, world, "zigzag").requires_grad_(i < 3) for i, t in enumerate((q, k, v, go))]
    torch.manual_seed(11)
    out = ring.attention(*mine[:3], dropout_p=0.3, is_causal=True, enable_gqa=True, layout="zigzag", block_q=3,
                         block_k=2)
    out.backward(mine[3])
    found["dropout"] = [out.detach(), *(t.grad for t in mine[:3])]
    if world == 4:  # a group of two of the four ranks: peers are found by their global rank
        sub = dist.new_group([1, 3])
        if rank in (1, 3):
            mine = [ring.shard(t, (rank - 1) // 2, 2, "zigzag").requires_grad_() for t in (q, k, v)]
            out = ring.attention(*mine, is_causal=True, enable_gqa=True, group=sub, layout="zigzag")
            out.backward(ring.shard(go, (rank - 1) // 2, 2, "zigzag"))
            found["sub"] = [out.detach(), *(t.grad for t in mine)]
    found["layouts"] = _layouts(rank, world, q, k, v, go)
    found["func"] = _under_torch_func(rank, world)
    bad = torch.randn(1, 2, 4 if rank == world - 1 else 6, 8)  # the last rank's shard is shorter
    t0 = time.monotonic()
    try:
        ring.attention(bad, bad, bad)
    except ValueError as e:
        found["mismatch"] = (str(e), time.monotonic() - t0)
    return found


def _layouts(rank, world, q, k, v, go):
    """Shards passed as transformers passes them, (B, L, H, E).transpose(1, 2): out and gradients."""
    mine = [ring.shard(t, rank, world, "zigzag").transpose(1, 2).contiguous().transpose(1, 2).requires_grad_()
            for t in (q, k, v)]
    out = ring.attention(*mine, is_causal=True, enable_gqa=True, layout="zigzag", block_q=3, block_k=2)
    out.backward(ring.shard(go, rank, world, "zigzag"))
    return [out.detach(), *(t.grad for t in mine)]


def _under_torch_func(rank, world):
    """gradcheck with batched gradients (rank 0 checks; the others call alike with their output times 0, so
    that their gradients add nothing to rank 0's keys), and torch.func.vmap over a batch of shards."""
    g = torch.Generator().manual_seed(5 + rank)
    q, k, v = (torch.randn(1, 1, 4, 2, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    weight = 1.0 if rank == 0 else 0.0
    torch.manual_seed(0)  # the batched check draws its output gradients: every rank draws alike
    ok = torch.autograd.gradcheck(lambda *x: ring.attention(*x, is_causal=True) * weight, (q, k, v),
                                  check_batched_grad=True)
    qs = torch.randn(3, 1, 2, 4, 2, generator=g, dtype=torch.float64)  # vmapped dim of 3
    got = torch.func.vmap(lambda x: ring.attention(x, x, x, is_causal=True))(qs)
    want = torch.stack([ring.attention(x, x, x, is_causal=True) for x in qs])
    return ok, float((got - want).abs().max())


def _check_world(world, cfgs):
    t0 = time.monotonic()
    found = launch.results(launch.launch(_probe, world, (cfgs,), timeout_s=120.0, pg_timeout_s=20.0))
    print(f"world {world}: launch and checks in ranks took {time.monotonic() - t0:.1f} s")
    for i, cfg in enumerate(cfgs):
        checks = lab.check_case(cfg, [f["cases"][i] for f in found])
        assert [c.layout for c in checks] == cfg.layouts()
        for c in checks:
            print(world, cfg.causal, cfg.dtype, f"H{cfg.heads}/{cfg.hkv}", c.layout,
                  {x.quantity: f"{x.err:.1e} (torch {x.torch_err:.1e})" for x in c.comparisons})
            assert [x.quantity for x in c.comparisons] == ["out", "dq", "dk", "dv"] and c.passed
            scores = [w["scores"] for w in c.work]
            if not cfg.causal or c.layout == "zigzag":
                assert len(set(scores)) == 1  # every rank does the same work
            else:
                assert scores == sorted(scores) and scores[0] < scores[-1]  # rank r sees r + 1 parts of the past
                assert [w["pairs_computed"] for w in c.work] == list(range(1, world + 1))
    # dropout with tiles of 3 x 2 rows / columns: the same weights dropped as single-process flash, same seed
    g = torch.Generator().manual_seed(3)
    T = 8 * world
    q, k, v, go = (torch.randn(2, 4 if i in (0, 3) else 2, T, 6, generator=g, dtype=torch.float64) for i in range(4))
    a = [t.clone().requires_grad_() for t in (q, k, v)]
    torch.manual_seed(11)
    exp = flash.attention(*a, dropout_p=0.3, is_causal=True, enable_gqa=True, block_q=5, block_k=4)
    exp.backward(go)
    for j, want in enumerate([exp, *(t.grad for t in a)]):
        got = ring.unshard([f["dropout"][j] for f in found], "zigzag")
        assert rule.max_err(got, want) < 1e-12, j
    a = [t.clone().requires_grad_() for t in (q, k, v)]  # transposed shards: the same as flash on the whole
    exp = flash.attention(*a, is_causal=True, enable_gqa=True)
    exp.backward(go)
    for j, want in enumerate([exp, *(t.grad for t in a)]):
        assert rule.max_err(ring.unshard([f["layouts"][j] for f in found], "zigzag"), want) < 1e-12, j
    print("torch.func:", [f["func"] for f in found])
    assert all(f["func"][0] is True and f["func"][1] < 1e-14 for f in found)
    if world == 4:
        a = [t.clone().requires_grad_() for t in (q, k, v)]
        exp = flash.attention(*a, is_causal=True, enable_gqa=True)
        exp.backward(go)
        for j, want in enumerate([exp, *(t.grad for t in a)]):
            assert rule.max_err(ring.unshard([found[1]["sub"][j], found[3]["sub"][j]], "zigzag"), want) < 1e-12
    for f in found:
        msg, took = f["mismatch"]
        assert f"query length L: {', '.join(f'rank {r} has 6' for r in range(world - 1))}, rank {world - 1} has 4" \
            in msg and "key length S" in msg and took < 20  # before the group's 20 s timeout: no wait for it
    print(found[0]["mismatch"][0])


@pytest.mark.slow
def test_two_ranks_equal_single_process_attention():
    _check_world(2, [lab.RingConfig(world=2, seq=24, **TINY),  # not causal; both layouts
                     lab.RingConfig(world=2, seq=40, causal=True, layout="zigzag", kv_heads=1, **TINY),  # GQA
                     lab.RingConfig(world=2, seq=32, causal=True, dtype="bfloat16", **TINY)])


@pytest.mark.slow
def test_four_ranks_equal_single_process_attention():
    _check_world(4, [lab.RingConfig(world=4, seq=32, causal=True, **TINY),
                     lab.RingConfig(world=4, seq=48, heads=4, kv_heads=2, head_dim=8, layout="zigzag",
                                    backward=True, measure=False)])


def _dies(rank, world):
    if rank == 1:
        os._exit(3)  # a rank that dies without a word
    q = torch.randn(1, 1, 4, 4)
    t0 = time.monotonic()
    try:
        ring.attention(q, q, q)
    except Exception as e:  # noqa: BLE001 -- what the survivor sees is the point
        return f"{type(e).__name__}: {e}", time.monotonic() - t0
    return "no error", time.monotonic() - t0


def _joins_then_dies(rank, world):
    dist.barrier()  # both ranks are in the group first: dying while it forms is a different failure (gloo's own)
    return _dies(rank, world)


@pytest.mark.slow
def test_a_rank_that_dies_is_an_error_in_bounded_time():
    t0 = time.monotonic()
    out = launch.launch(_joins_then_dies, 2, timeout_s=60.0, pg_timeout_s=5.0)
    took = time.monotonic() - t0
    print(out, f"{took:.1f} s")
    assert out[1].exitcode == 3 and "exited with code 3 without reporting a result" in out[1].error
    msg, waited = out[0].result
    assert "could not compare shapes with the other 1 rank(s): one died" in msg  # an error, not a hang (the
    assert waited < 60.0  # launch deadline would have stopped a rank that waits forever); no timing beyond that
    with pytest.raises(launch.LaunchError, match="rank 1 of 2: exited with code 3"):
        launch.results(out)


def _stalls(rank, world):
    q = torch.randn(1, 1, 4, 4)
    ring.attention(q, q, q)  # one call together
    if rank == 1:
        time.sleep(5.0)  # then rank 1 stops taking part, without dying
        return "slept"
    return _dies(rank, world)  # rank 0 calls again and waits for it


@pytest.mark.slow
def test_a_rank_that_stops_answering_is_an_error_after_the_group_timeout():
    out = launch.launch(_stalls, 2, timeout_s=60.0, pg_timeout_s=2.0)
    print(out)
    assert out[1].result == "slept"
    msg, waited = out[0].result
    assert "could not compare shapes with the other 1 rank(s)" in msg
    assert waited > 1.5  # it waited for the group's timeout (2 s) first: load can only make that longer


def _cannot_write(rank, world):
    from pathlib import Path

    from attnlab.results.files import CannotWrite

    raise CannotWrite(Path("/checkpoints/scale-sqrt.pt"), "No space left on device", False)


@pytest.mark.slow(first="the launcher's fork server, which a worker keeps: later ranks fork from it quickly")
def test_a_rank_that_raises_says_what_it_raised():
    """What a rank raised comes back as facts -- the exception's class and its first line -- beside the one line
    for people, so that a caller (attnlab train) asks the outcome instead of reading its text back."""
    out = launch.launch(_cannot_write, 1, timeout_s=60.0, pg_timeout_s=5.0)
    print(out)
    o = out[0]
    assert o.raised == "CannotWrite" and not o.ok
    assert o.message == "cannot write /checkpoints/scale-sqrt.pt: No space left on device; scale-sqrt.pt was not " \
                        "created, and the files written before it are complete"
    assert o.error.startswith(f"CannotWrite: {o.message} (at test_ring.py:")
