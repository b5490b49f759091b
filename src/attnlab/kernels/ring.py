"""Ring attention: exact attention over a sequence that is split across processes.

When one sequence no longer fits one machine, split it. Each of W ranks (processes, usually one
per device) keeps its own part of the queries at home and its part of the keys and values; the
key/value parts then travel around a ring -- rank r sends what it holds to rank r+1 and receives
from rank r-1 -- so that after W steps every query has met every key. Besides its own shard a
rank holds two key/value parts at a time, the one it computes with and the one arriving (in the
backward pass two parts of their gradients as well), so its memory falls as 1/W -- with a constant
about twice flash's, the price of overlapping the transfers with the arithmetic.

The file in reading order: the ring's links (:class:`_Link`: the two neighbours, found once, and
the transfers to and from them), the schedule (:class:`_Schedule`: which pairs of query chunk and
key chunk each step computes, a pure function of the step), the forward and backward walks round
the ring, the check that every rank agrees (:func:`_agree`), and the form itself (:func:`attention`).
What a rank did is added up in a :class:`RingStats` (:mod:`attnlab.kernels.ring_stats`) as it works.

Each step is one call of the flash form's tile loop (:func:`attnlab.kernels.flash.forward_tiles`),
which returns a partial output and, per query row, the log-sum-exp of the scores it saw. Two
partial results over disjoint sets of keys merge exactly, the way the online softmax merges tiles
(:func:`attnlab.kernels.online.merge`):

    lse = log(exp(lse_a) + exp(lse_b)),   out = out_a * exp(lse_a - lse) + out_b * exp(lse_b - lse)

While a rank computes with the part it holds, the next part is already on its way
(``torch.distributed.batch_isend_irecv``), so the transfer hides behind the arithmetic.

The backward pass walks the ring again. Each rank recomputes its tiles from the *global* lse
(``P = exp(s - lse)``, exactly the weights of single-process attention) and sends the key/value
gradients it has gathered along with the keys, so each gradient arrives home summed over every
query that used it. The gradients equal single-process attention's.

Half-precision inputs are computed in float32 throughout, weights included: the ring does not take
the flash form's half-precision matmuls (flash.py [P11]); each step calls the tile loops without
``half``, so a ring run in bfloat16 rounds only its inputs and its result, on any hardware.

With a causal mask, a key part wholly in the future of a query part is skipped. The layout
decides how fair that is (see :mod:`attnlab.kernels.ring_layout`): zigzag gives every rank equal work.

The same code runs on gloo (CPU tensors) and NCCL (CUDA tensors): it only uses point-to-point
send/recv and one ``all_gather_object``. Every call first gathers every rank's shapes and options
as a dict and checks they agree (a rank that disagrees would otherwise wait forever, so the error
names each field that differs and every rank's value); a rank that dies turns into an error
after the process group's timeout (set it: ``init_process_group(..., timeout=timedelta(...))``).

Paper: Liu, Zaharia & Abbeel, "Ring Attention with Blockwise Transformers for Near-Infinite
Context" (2023). Load balancing: Brandon et al., "Striped Attention" (2023); the zigzag layout of
Llama 3's context parallelism (Dubey et al., 2024).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from . import dropout, online, vmap_loop
from ._check import check
from .argcheck import positive_int
from .dropout import NO_DROPOUT, Dropout
from .flash import DEFAULT_BLOCK_K, DEFAULT_BLOCK_Q, forward_tiles
from .flash_backward import Weights, backward_tiles, delta
from .flash_plan import Bounded, tile_rule
from .flash_tiles import Tiles
from .masks import causal
from .ring_layout import LAYOUTS, check_layout, chunk_ids, pieces, positions, shard, unshard
from .ring_stats import RingStats, pair_work

__all__ = ["LAYOUTS", "RingStats", "attention", "positions", "shard", "unshard"]

_CAUSAL = causal()  # one instance, so the block map of the diagonal pairs is compiled once
_KV, _DKV = 0, 1  # message tags: key/value parts and their gradients travel separately


class _Link:
    """This rank's place in the ring: its two neighbours (found once) and the transfers to and from them.

    Waiting is timed into ``stats`` (on a GPU after a synchronize: calls there only queue work).
    """

    def __init__(self, group, stats: RingStats | None, device):
        self.group, self.stats = group, stats
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        nxt, prv = (self.rank + 1) % self.world, (self.rank - 1) % self.world
        if group is not None:  # point-to-point calls name global ranks
            nxt, prv = dist.get_global_rank(group, nxt), dist.get_global_rank(group, prv)
        self.next, self.prev = nxt, prv
        self.cuda = torch.device(device).type == "cuda"

    def holder(self, step: int) -> int:
        """The group rank whose key/value part this rank holds at ``step``."""
        return (self.rank - step) % self.world

    def exchange(self, send: torch.Tensor, recv: torch.Tensor, tag: int) -> list:
        """Start sending ``send`` to the next rank and receiving ``recv`` from the previous one."""
        ops = [dist.P2POp(dist.isend, send, self.next, self.group, tag),
               dist.P2POp(dist.irecv, recv, self.prev, self.group, tag)]
        try:
            return dist.batch_isend_irecv(ops)
        except RuntimeError as e:
            raise self._lost(e) from e

    def wait(self, reqs: list) -> None:
        t0 = self.clock()
        try:
            for r in reqs:
                r.wait()
        except RuntimeError as e:
            raise self._lost(e) from e
        if self.stats is not None:
            self.stats.wait_s += self.clock() - t0

    def clock(self) -> float:
        if self.stats is not None and self.cuda:
            torch.cuda.synchronize()  # on a GPU, calls only queue work: wait for it before reading the clock
        return time.perf_counter()

    def _lost(self, e: Exception) -> RuntimeError:
        return RuntimeError(f"ring attention on rank {self.rank} of {self.world}: a transfer with rank "
                            f"{(self.rank - 1) % self.world} or {(self.rank + 1) % self.world} failed -- a rank "
                            "died, stopped calling ring attention, or the process group's timeout passed "
                            f"({_first_line(e)})")


def _first_line(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


@dataclass(frozen=True)
class _Pair:
    """One query chunk against one key chunk: where they lie in the local parts and in the whole sequence."""

    rows: slice  # the query chunk's rows in this rank's queries
    cols: slice  # the key chunk's columns in the part held
    tiles: Tiles  # the full tile map, or the causal one on the diagonal
    row0: int  # global position of the first query
    col0: int  # global position of the first key
    work: tuple[int, int, int]  # (tiles computed, tiles skipped, scores): :func:`ring_stats.pair_work`


@dataclass(frozen=True)
class _Step:
    pairs: tuple[_Pair, ...]
    skipped: int  # pairs wholly in the future of every query (causal): nothing to compute
    skipped_tiles: int  # the tiles one skipped pair would have had

    def record(self, stats: RingStats | None, seconds: float) -> None:
        """Add this step's work, done in ``seconds``, to ``stats``."""
        if stats is None:
            return
        for pair in self.pairs:
            stats.add_pair(pair.work)
        for _ in range(self.skipped):
            stats.add_skip(self.skipped_tiles)
        stats.compute_s += seconds
        stats.steps += 1


class _Schedule:
    """Which (query chunk, key chunk) pairs this rank computes with each rank's keys: a pure function.

    ``full`` is the tile map of one pair of chunks; ``diag`` (causal only) that of a chunk against
    itself; ``NH`` = batch x query heads, for counting the scores.
    """

    def __init__(self, rank: int, world: int, layout: str, full: Tiles, diag: Tiles | None, NH: int):
        self.rank, self.world, self.layout = rank, world, layout
        self.full, self.diag, self.causal = full, diag, diag is not None
        self.cq, self.ck = full.L, full.S  # every chunk of a layout has one length
        self.work = {t: pair_work(t, NH) for t in (full, diag) if t is not None}

    @classmethod
    def of(cls, a, rank: int, world: int, layout: str, block_q: int, block_k: int) -> _Schedule:
        """The schedule for checked arguments ``a`` (this rank's shards)."""
        n = pieces(layout)
        cq, ck = a.L // n, a.S // n
        bq, bk = min(block_q, cq), min(block_k, ck)
        full = Tiles(a.N, a.H, cq, ck, bq, bk, device=a.q.device)
        diag = Tiles(a.N, a.H, cq, ck, bq, bk, mask_fn=_CAUSAL, device=a.q.device) if a.is_causal else None
        return cls(rank, world, layout, full, diag, a.N * a.H)

    def step(self, src: int) -> _Step:
        """The pairs to compute while holding the keys of group rank ``src``, and how many are skipped."""
        pairs, skipped = [], 0
        for i, qc in enumerate(chunk_ids(self.rank, self.world, self.layout)):
            for j, kc in enumerate(chunk_ids(src, self.world, self.layout)):
                if self.causal and kc > qc:  # every key of the chunk lies after every query: nothing to see
                    skipped += 1
                    continue
                tiles = self.diag if self.causal and kc == qc else self.full
                pairs.append(_Pair(slice(i * self.cq, (i + 1) * self.cq), slice(j * self.ck, (j + 1) * self.ck),
                                   tiles, qc * self.cq, kc * self.ck, self.work[tiles]))
        return _Step(tuple(pairs), skipped, sum(self.work[self.full][:2]))


@dataclass(frozen=True)
class _Call:
    """One ring attention call: the links, the schedule, and the options every step uses."""

    link: _Link
    schedule: _Schedule
    scale: float
    drop: Dropout
    bounded: Bounded | None  # [P2] of the flash form: a query chunk's tiles may skip the running max


def _forward(q5, k, v, call: _Call):
    """Local parts q5 (N, Hkv, G, L, E), k (N, Hkv, S, E), v (N, Hkv, S, Ev) -> out (N, Hkv, G, L, Ev), lse."""
    link, E = call.link, k.shape[-1]
    out = q5.new_zeros(*q5.shape[:-1], v.shape[-1])
    lse = q5.new_full(q5.shape[:-1], float("-inf"), dtype=torch.float64)
    kv = torch.cat([k, v], dim=-1)  # (N, Hkv, S, E + Ev): one message per step
    spare = torch.empty_like(kv) if link.world > 1 else None  # where the next part lands
    for step in range(link.world):
        # -- 1. send the part held on, receive the next one (behind the arithmetic) --
        reqs = link.exchange(kv, spare, _KV) if step < link.world - 1 else []
        # -- 2. each pair this step computes: a flash forward, merged into the output --
        todo, t0 = call.schedule.step(link.holder(step)), link.clock()
        for pair in todo.pairs:
            o, lo = forward_tiles(q5[:, :, :, pair.rows], kv[:, :, pair.cols, :E], kv[:, :, pair.cols, E:],
                                  call.scale, pair.tiles, call.drop.at(pair.row0, pair.col0), bounded=call.bounded)
            online.merge(out[:, :, :, pair.rows], lse[:, :, :, pair.rows], o, lo)
        todo.record(link.stats, link.clock() - t0)
        # -- 3. the next part has arrived --
        link.wait(reqs)
        if reqs:
            kv, spare = spare, kv
    return out, lse


def _backward(q5, k, v, out, lse, dout, call: _Call):
    """Ring backward: dq stays home; (dk, dv) of each key part travel with it and arrive home complete."""
    link, E = call.link, k.shape[-1]
    D = delta(dout, out)  # (N, Hkv, G, L): rowsum(dO * O), global
    dq5 = torch.zeros_like(q5)
    kv = torch.cat([k, v], dim=-1)
    dkv = torch.zeros_like(kv)  # gradient of the key/value part held now, summed over the ranks it has visited
    spare, dspare = (torch.empty_like(kv), torch.empty_like(kv)) if link.world > 1 else (None, None)
    dreqs: list = []
    for step in range(link.world):
        # -- 1. send the keys on; take the gradient of the keys now held from the previous rank --
        reqs = link.exchange(kv, spare, _KV) if step < link.world - 1 else []
        if dreqs:
            link.wait(dreqs)
            dkv, dspare = dspare, dkv
        # -- 2. each pair: a flash backward from the global lse and D --
        todo, t0 = call.schedule.step(link.holder(step)), link.clock()
        for pair in todo.pairs:
            rows, cols = pair.rows, pair.cols
            dq, dk, dv, _ = backward_tiles(q5[:, :, :, rows], kv[:, :, cols, :E], kv[:, :, cols, E:],
                                           dout[:, :, :, rows], call.scale, pair.tiles,
                                           Weights.from_lse(lse[:, :, :, rows], D[:, :, :, rows], q5.dtype),
                                           call.drop.at(pair.row0, pair.col0))
            dq5[:, :, :, rows] += dq
            dkv[:, :, cols, :E] += dk
            dkv[:, :, cols, E:] += dv
        todo.record(link.stats, link.clock() - t0)
        # -- 3. pass the gradient on with the keys; after the last step it reaches its home rank --
        if link.world > 1:
            dreqs = link.exchange(dkv, dspare, _DKV)
        link.wait(reqs)
        if reqs:
            kv, spare = spare, kv
    if dreqs:
        link.wait(dreqs)
        dkv = dspare
    return dq5, dkv[..., :E], dkv[..., E:]


class _Ring(torch.autograd.Function):
    """(q5, k, v, call) -> (out, lse); lse is not differentiable. Under torch.func each entry of a vmapped dim
    is one ring call (:mod:`attnlab.kernels.vmap_loop`): every rank must vmap alike."""

    @staticmethod
    def forward(q5, k, v, call):
        return _forward(q5, k, v, call)

    @staticmethod
    def setup_context(ctx, inputs, output):
        q5, k, v, call = inputs
        out, lse = output
        ctx.mark_non_differentiable(lse)
        ctx.save_for_backward(q5, k, v, out, lse)
        ctx.call = call

    @staticmethod
    def backward(ctx, dout, _dlse):
        rest = (*ctx.saved_tensors, ctx.call)
        return (*(vmap_loop.legacy(_RingBackward, dout, *rest) or _RingBackward.apply(dout, *rest)), None)

    @staticmethod
    def vmap(info, in_dims, *args):
        return vmap_loop.loop(_Ring, info, in_dims, *args)


class _RingBackward(torch.autograd.Function):
    """(dout, q5, k, v, out, lse, call) -> (dq5, dk, dv): the ring walked again; not differentiable itself."""

    @staticmethod
    def forward(dout, q5, k, v, out, lse, call):
        return _backward(q5, k, v, out, lse, dout.contiguous(), call)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("ring attention's backward pass is not differentiable (no double backward)")

    @staticmethod
    def vmap(info, in_dims, *args):
        return vmap_loop.loop(_RingBackward, info, in_dims, *args)


def _agree(a, layout: str, block_q: int, block_k: int, seed: int, group) -> int:
    """Gather every rank's shapes and options; raise naming each field that differs. Returns rank 0's seed."""
    mine = {"batch N": a.N, "query heads H": a.H, "key heads Hkv": a.Hkv, "query length L": a.L, "key length S": a.S,
            "feature dim E": a.E, "value dim Ev": a.Ev, "dtype": str(a.q.dtype), "is_causal": bool(a.is_causal),
            "layout": layout, "dropout_p": float(a.dropout_p), "scale": float(a.scale), "block_q": block_q,
            "block_k": block_k}
    every: list = [None] * dist.get_world_size(group)
    # NCCL moves the pickled dicts through the current CUDA device: make it this rank's own
    on_device = torch.cuda.device(a.q.device) if a.q.device.type == "cuda" else contextlib.nullcontext()
    try:
        with on_device:
            dist.all_gather_object(every, {"options": mine, "seed": seed}, group=group)
    except RuntimeError as e:
        raise RuntimeError(f"ring attention could not compare shapes with the other {len(every) - 1} rank(s): one "
                           "died, is not calling ring attention, or the process group's timeout passed "
                           f"({_first_line(e)})") from e

    def show(x):
        return f"{x:.6g}" if isinstance(x, float) else str(x)

    parts = [f"{field}: " + ", ".join(f"rank {r} has {show(got['options'][field])}" for r, got in enumerate(every))
             for field in mine if len({got["options"][field] for got in every}) > 1]
    if parts:
        raise ValueError("ring attention needs every rank to pass an equal shard (global length = world x shard "
                         "length) and the same options, but the ranks differ in " + "; ".join(parts))
    return every[0]["seed"]


def _check_ring(a, layout, block_q, block_k, stats) -> None:
    """Raise for what ring attention does not take, before any rank talks to another."""
    if a.attn_mask is not None or a.mask is not None:
        raise ValueError("ring attention takes is_causal=True or no mask; an attn_mask would have to be cut for "
                         f"every pair of shards (got {a.mask or tuple(a.attn_mask.shape)})")
    check_layout(layout)
    for name, b in (("block_q", block_q), ("block_k", block_k)):
        positive_int(name, b, "a positive integer tile size")
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
    _check_ring(a, layout, block_q, block_k, stats)
    if dist.get_rank(group) < 0:
        raise RuntimeError("this process is not a member of the process group given to ring attention")
    seed = _agree(a, layout, block_q, block_k, dropout.draw_seed() if a.dropout_p > 0 else 0, group)
    work = a.work
    q5 = a.q.to(work).reshape(a.N, a.Hkv, a.groups, a.L, a.E)  # query heads grouped by their key head
    k, v = a.k.to(work).contiguous(), a.v.to(work).contiguous()
    link = _Link(group, stats, a.q.device)
    schedule = _Schedule.of(a, link.rank, link.world, layout, block_q, block_k)
    drop = Dropout(seed, a.dropout_p) if a.dropout_p > 0 else NO_DROPOUT
    bounded, _ = tile_rule(a.groups, schedule.cq, a.scale, False, None, None)  # the flash form's rule, per chunk
    out5, _ = _Ring.apply(q5, k, v, _Call(link, schedule, a.scale, drop, bounded))  # (N, Hkv, G, L, Ev)
    return a.unflatten(out5.reshape(a.N, a.H, a.L, a.Ev).to(a.q.dtype))
