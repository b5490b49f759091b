"""Ring attention: exact attention over a sequence that is split across processes.

When one sequence no longer fits one machine, split it. Each of W ranks (processes, usually one
per device) keeps its own part of the queries at home and its part of the keys and values; the
key/value parts then travel around a ring -- rank r sends what it holds to rank r+1 and receives
from rank r-1 -- so that after W steps every query has met every key. Besides its own shard a
rank holds two key/value parts at a time, the one it computes with and the one arriving (in the
backward pass two parts of their gradients as well), so its memory falls as 1/W -- with a constant
about twice flash's, the price of overlapping the transfers with the arithmetic.

Each step is one call of the flash form's tile loop (:func:`attnlab.kernels.flash.forward_tiles`),
which returns a partial output and, per query row, the log-sum-exp of the scores it saw. Two
partial results over disjoint sets of keys merge exactly, the way the online softmax merges tiles:

    lse = log(exp(lse_a) + exp(lse_b)),   out = out_a * exp(lse_a - lse) + out_b * exp(lse_b - lse)

While a rank computes with the part it holds, the next part is already on its way
(``torch.distributed.batch_isend_irecv``), so the transfer hides behind the arithmetic.

The backward pass walks the ring again. Each rank recomputes its tiles from the *global* lse
(``P = exp(s - lse)``, exactly the weights of single-process attention) and sends the key/value
gradients it has gathered along with the keys, so each gradient arrives home summed over every
query that used it. The gradients equal single-process attention's.

With a causal mask, a key part wholly in the future of a query part is skipped. The layout
decides how fair that is (see :mod:`attnlab.kernels.ring_layout`): zigzag gives every rank equal work.

The same code runs on gloo (CPU tensors) and NCCL (CUDA tensors): it only uses point-to-point
send/recv and one all-gather. Every call first checks that all ranks pass equal shards and the same
options (a rank that disagrees would otherwise wait forever); a rank that dies turns into an error
after the process group's timeout (set it: ``init_process_group(..., timeout=timedelta(...))``).

Paper: Liu, Zaharia & Abbeel, "Ring Attention with Blockwise Transformers for Near-Infinite
Context" (2023). Load balancing: Brandon et al., "Striped Attention" (2023); the zigzag layout of
Llama 3's context parallelism (Dubey et al., 2024).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from . import dropout
from ._check import FLOAT_DTYPES, check
from .flash import DEFAULT_BLOCK_K, DEFAULT_BLOCK_Q, Tiles, backward_tiles, forward_tiles
from .masks import EMPTY, causal
from .ring_layout import LAYOUTS, RingStats, check_layout, chunk_ids, pieces, positions, shard, unshard

__all__ = ["LAYOUTS", "RingStats", "attention", "positions", "shard", "unshard"]

_CAUSAL = causal()  # one instance, so the block map of the diagonal pairs is compiled once
_KV, _DKV = 0, 1  # message tags: key/value parts and their gradients travel separately
_FIELDS = ("batch N", "query heads H", "key heads Hkv", "query length L", "key length S", "feature dim E",
           "value dim Ev", "dtype", "is_causal", "layout", "dropout_p", "scale", "block_q", "block_k")


class _Plan:
    """Who this rank is, what it holds, and which (query chunk, key chunk) pairs each step computes."""

    def __init__(self, group, layout, is_causal, N, H, L, S, block_q, block_k, device, scale, seed, p, stats):
        self.group, self.layout, self.causal = group, layout, is_causal
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        self.scale, self.seed, self.p, self.stats = scale, seed, p, stats
        self.cuda = torch.device(device).type == "cuda"
        n = pieces(layout)
        self.cq, self.ck = L // n, S // n  # every chunk of a layout has one length
        bq, bk = min(block_q, self.cq), min(block_k, self.ck)
        self.full = Tiles(N, H, self.cq, self.ck, bq, bk, device=device)
        self.diag = Tiles(N, H, self.cq, self.ck, bq, bk, mask_fn=_CAUSAL, device=device) if is_causal else None
        self.work = {t: _work(t, self.cq, self.ck, N * H) for t in (self.full, self.diag) if t is not None}

    def peer(self, step: int) -> tuple[int, int, int]:
        """(group rank whose keys are held at this step, next rank, previous rank -- these two as global ranks)."""
        nxt, prv = (self.rank + 1) % self.world, (self.rank - 1) % self.world
        if self.group is not None:
            nxt, prv = dist.get_global_rank(self.group, nxt), dist.get_global_rank(self.group, prv)
        return (self.rank - step) % self.world, nxt, prv

    def pairs(self, src: int) -> list[tuple[slice, slice, Tiles, int, int]]:
        """(query rows, key columns, tiles, global row, global column) of each pair to compute with src's keys."""
        todo = []
        for i, qc in enumerate(chunk_ids(self.rank, self.world, self.layout)):
            rows = slice(i * self.cq, (i + 1) * self.cq)
            for j, kc in enumerate(chunk_ids(src, self.world, self.layout)):
                if self.causal and kc > qc:  # every key of the chunk lies after every query: nothing to see
                    if self.stats is not None:
                        self.stats.add_skip(sum(self.work[self.full][:2]))
                    continue
                tiles = self.diag if self.causal and kc == qc else self.full
                todo.append((rows, slice(j * self.ck, (j + 1) * self.ck), tiles, qc * self.cq, kc * self.ck))
                if self.stats is not None:
                    self.stats.add_pair(self.work[tiles])
        return todo

    def clock(self) -> float:
        if self.stats is not None and self.cuda:
            torch.cuda.synchronize()  # on a GPU, calls only queue work: wait for it before reading the clock
        return time.perf_counter()


def _work(tiles: Tiles, L: int, S: int, NH: int) -> tuple[int, int, int]:
    """(tiles computed, tiles skipped, scores computed) of one (L x S) pair under ``tiles``."""
    kinds = tiles.bm.kind.tolist() if tiles.bm is not None else None
    done = skipped = scores = 0
    for qt, q0 in enumerate(range(0, L, tiles.block_q)):
        for kt, k0 in enumerate(range(0, S, tiles.block_k)):
            if kinds is not None and kinds[qt][kt] == EMPTY:
                skipped += 1
            else:
                done += 1
                scores += NH * (min(L, q0 + tiles.block_q) - q0) * (min(S, k0 + tiles.block_k) - k0)
    return done, skipped, scores


def _exchange(send: torch.Tensor, recv: torch.Tensor, plan: _Plan, nxt: int, prv: int, tag: int) -> list:
    """Start sending ``send`` to the next rank and receiving ``recv`` from the previous one."""
    ops = [dist.P2POp(dist.isend, send, nxt, plan.group, tag), dist.P2POp(dist.irecv, recv, prv, plan.group, tag)]
    try:
        return dist.batch_isend_irecv(ops)
    except RuntimeError as e:
        raise _lost(plan, e) from e


def _wait(reqs: list, plan: _Plan) -> None:
    t0 = plan.clock()
    try:
        for r in reqs:
            r.wait()
    except RuntimeError as e:
        raise _lost(plan, e) from e
    if plan.stats is not None:
        plan.stats.wait_s += plan.clock() - t0


def _lost(plan: _Plan, e: Exception) -> RuntimeError:
    return RuntimeError(f"ring attention on rank {plan.rank} of {plan.world}: a transfer with rank "
                        f"{(plan.rank - 1) % plan.world} or {(plan.rank + 1) % plan.world} failed -- a rank died, "
                        "stopped calling ring attention, or the process group's timeout passed "
                        f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")


def _merge(out: torch.Tensor, lse: torch.Tensor, o: torch.Tensor, lo: torch.Tensor) -> None:
    """Fold a partial result (o, lo) over new keys into (out, lse), in place (o is used up). Rows that saw
    nothing stay 0 with lse = -inf."""
    new = torch.logaddexp(lse, lo)
    base = torch.where(torch.isneginf(new), 0.0, new)  # exp(-inf - 0) = 0: no NaN from -inf - -inf
    out.mul_(torch.exp(lse - base).to(out.dtype).unsqueeze(-1))
    out.add_(o.mul_(torch.exp(lo - base).to(o.dtype).unsqueeze(-1)))
    lse.copy_(new)


def _forward(q5, k, v, plan: _Plan):
    """Local parts q5 (N, Hkv, G, L, E), k (N, Hkv, S, E), v (N, Hkv, S, Ev) -> out (N, Hkv, G, L, Ev), lse."""
    E = k.shape[-1]
    out = q5.new_zeros(*q5.shape[:-1], v.shape[-1])
    lse = q5.new_full(q5.shape[:-1], float("-inf"), dtype=torch.float64)
    kv = torch.cat([k, v], dim=-1)  # (N, Hkv, S, E + Ev): one message per step
    spare = torch.empty_like(kv) if plan.world > 1 else None  # where the next part lands
    for step in range(plan.world):
        src, nxt, prv = plan.peer(step)
        reqs = _exchange(kv, spare, plan, nxt, prv, _KV) if step < plan.world - 1 else []
        t0 = plan.clock()
        for rows, cols, tiles, row0, col0 in plan.pairs(src):
            o, lo = forward_tiles(q5[:, :, :, rows], kv[:, :, cols, :E], kv[:, :, cols, E:], plan.scale, tiles,
                                  plan.seed, plan.p, row0, col0)
            _merge(out[:, :, :, rows], lse[:, :, :, rows], o, lo)
        if plan.stats is not None:
            plan.stats.compute_s += plan.clock() - t0
            plan.stats.steps += 1
        _wait(reqs, plan)
        if reqs:
            kv, spare = spare, kv
    return out, lse


def _backward(q5, k, v, out, lse, dout, plan: _Plan):
    """Ring backward: dq stays home; (dk, dv) of each key part travel with it and arrive home complete."""
    E = k.shape[-1]
    D = (dout.double() * out.double()).sum(dim=-1).to(out.dtype)  # (N, Hkv, G, L): rowsum(dO * O), global
    dq5 = torch.zeros_like(q5)
    kv = torch.cat([k, v], dim=-1)
    dkv = torch.zeros_like(kv)  # gradient of the key/value part held now, summed over the ranks it has visited
    spare, dspare = (torch.empty_like(kv), torch.empty_like(kv)) if plan.world > 1 else (None, None)
    dreqs: list = []
    for step in range(plan.world):
        src, nxt, prv = plan.peer(step)
        reqs = _exchange(kv, spare, plan, nxt, prv, _KV) if step < plan.world - 1 else []
        if dreqs:  # the gradient of the keys now held, from the previous rank
            _wait(dreqs, plan)
            dkv, dspare = dspare, dkv
        t0 = plan.clock()
        for rows, cols, tiles, row0, col0 in plan.pairs(src):
            dq, dk, dv, _ = backward_tiles(q5[:, :, :, rows], kv[:, :, cols, :E], kv[:, :, cols, E:],
                                           out[:, :, :, rows], dout[:, :, :, rows], lse[:, :, :, rows], plan.scale,
                                           tiles, plan.seed, plan.p, row0, col0, D=D[:, :, :, rows])
            dq5[:, :, :, rows] += dq
            dkv[:, :, cols, :E] += dk
            dkv[:, :, cols, E:] += dv
        if plan.stats is not None:
            plan.stats.compute_s += plan.clock() - t0
            plan.stats.steps += 1
        if plan.world > 1:  # pass the gradient on with the keys; after the last step it reaches its home rank
            dreqs = _exchange(dkv, dspare, plan, nxt, prv, _DKV)
        _wait(reqs, plan)
        if reqs:
            kv, spare = spare, kv
    if dreqs:
        _wait(dreqs, plan)
        dkv = dspare
    return dq5, dkv[..., :E], dkv[..., E:]


class _Ring(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q5, k, v, plan):
        out, lse = _forward(q5, k, v, plan)
        ctx.save_for_backward(q5, k, v, out, lse)
        ctx.plan = plan
        return out

    @staticmethod
    def backward(ctx, dout):
        q5, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _backward(q5, k, v, out, lse, dout.contiguous(), ctx.plan)
        return dq, dk, dv, None


def _agree(a, layout: str, block_q: int, block_k: int, seed: int, group, world: int) -> int:
    """All-gather every rank's shapes and options; raise if any differ. Returns rank 0's dropout seed."""
    mine = [a.N, a.H, a.Hkv, a.L, a.S, a.E, a.Ev, FLOAT_DTYPES.index(a.q.dtype), int(a.is_causal),
            LAYOUTS.index(layout), a.dropout_p, a.scale, block_q, block_k, seed]
    t = torch.tensor(mine, dtype=torch.float64, device=a.q.device)
    every = [torch.empty_like(t) for _ in range(world)]
    try:
        dist.all_gather(every, t, group=group)
    except RuntimeError as e:
        raise RuntimeError(f"ring attention could not compare shapes with the other {world - 1} rank(s): one died, "
                           "is not calling ring attention, or the process group's timeout passed "
                           f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from e
    rows = [e.tolist() for e in every]
    differ = [i for i in range(len(_FIELDS)) if len({r[i] for r in rows}) > 1]
    if differ:
        def show(i, x):
            return str(FLOAT_DTYPES[int(x)]) if i == 7 else LAYOUTS[int(x)] if i == 9 else \
                str(bool(x)) if i == 8 else f"{x:.6g}" if i in (10, 11) else str(int(x))
        parts = [f"{_FIELDS[i]}: " + ", ".join(f"rank {r} has {show(i, row[i])}" for r, row in enumerate(rows))
                 for i in differ]
        raise ValueError("ring attention needs every rank to pass an equal shard (global length = world x shard "
                         "length) and the same options, but the ranks differ in " + "; ".join(parts))
    return int(rows[0][-1])


def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
              group=None, layout: str = "contiguous", block_q: int = DEFAULT_BLOCK_Q, block_k: int = DEFAULT_BLOCK_K,
              stats: RingStats | None = None):
    """Ring attention over the ranks of ``group`` (default: the whole world). Call it on every rank.

    ``query (..., H, L, E)``, ``key``/``value (..., Hkv, S, E|Ev)`` are this rank's parts of the
    sequence (cut with :func:`shard` in ``layout``); returns this rank's part of the output.
    ``is_causal`` is over global positions (upper-left, L == S); ``attn_mask`` tensors and mask
    functions are not supported. ``stats`` (a :class:`RingStats`) adds up this rank's work and times.
    """
    a = check(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if a.attn_mask is not None or a.mask is not None:
        raise ValueError("ring attention takes is_causal=True or no mask; an attn_mask would have to be cut for "
                         f"every pair of shards (got {a.mask or tuple(a.attn_mask.shape)})")
    check_layout(layout)
    for name, b in (("block_q", block_q), ("block_k", block_k)):
        if isinstance(b, bool) or not isinstance(b, int) or b < 1:
            raise ValueError(f"{name} must be a positive integer tile size, got {b!r}")
    if a.is_causal and a.L != a.S:
        raise ValueError(f"causal ring attention needs query and key shards of one length (self-attention), "
                         f"got L={a.L} and S={a.S} per rank")
    if layout == "zigzag" and (a.L % 2 or a.S % 2):
        raise ValueError(f"a zigzag shard holds two equal chunks, so its length must be even; got L={a.L}, S={a.S} "
                         "per rank (the global length must be divisible by 2 x world)")
    if stats is not None and not isinstance(stats, RingStats):
        raise TypeError(f"stats must be a RingStats or None, got {type(stats).__name__}")
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("ring attention runs across the ranks of a torch.distributed process group, and none "
                           "is initialised: call torch.distributed.init_process_group (gloo for CPU tensors, nccl "
                           "for CUDA) in every process first, or launch with torchrun or `attnlab ring`")
    if dist.get_rank(group) < 0:
        raise RuntimeError("this process is not a member of the process group given to ring attention")
    seed = dropout.draw_seed() if a.dropout_p > 0 else 0
    seed = _agree(a, layout, block_q, block_k, seed, group, dist.get_world_size(group))
    work = torch.float32 if a.q.dtype in (torch.float16, torch.bfloat16) else a.q.dtype
    q5 = a.q.to(work).reshape(a.N, a.Hkv, a.groups, a.L, a.E)  # query heads grouped by their key head
    k, v = a.k.to(work).contiguous(), a.v.to(work).contiguous()
    plan = _Plan(group, layout, a.is_causal, a.N, a.H, a.L, a.S, block_q, block_k, a.q.device, a.scale, seed,
                 a.dropout_p, stats)
    out5 = _Ring.apply(q5, k, v, plan)  # (N, Hkv, G, L, Ev)
    return a.unflatten(out5.reshape(a.N, a.H, a.L, a.Ev).to(a.q.dtype))
