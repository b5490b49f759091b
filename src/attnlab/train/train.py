"""Train a tiny GPT and watch what the attention scale does to it.

The lesson's claim: removing the 1/sqrt(d) scale destabilises training. Unscaled, the scores of a
d-wide head have variance d, the softmax saturates (entropy near 0), its gradient vanishes, and
the loss plateaus early. With 1/d the softmax starts nearly uniform instead.

:func:`run` trains one model per *variant* -- the same seed, so the same initial weights; the
same batches in the same order -- and logs every ``eval_every`` steps:

* train and validation loss on fixed batches (the same for every variant and every log);
* the gradient norm at that point: for all parameters, for each layer's query/key weights, and
  with respect to each layer's scores (what flows back through the softmax);
* per layer, the softmax entropy and mean peak weight, from :func:`attnlab.nn.probe.probe`.

Every log writes a checkpoint; Ctrl-C finishes the current step, writes one, and stops.
``resume=True`` continues from the checkpoints and reproduces the uninterrupted run exactly.
The second experiment, ``kind="tie-kv"``, trains the model with its value projection tied to its
key projection against the untied one.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from attnlab.distributed.parallel import Grid
from attnlab.kernels.argcheck import is_int, positive_int
from attnlab.nn import GPT, GPTConfig, probe
from attnlab.nn.probe import score_grad_norms, uniform_causal_entropy
from attnlab.results import Result, machine, versions
from attnlab.results.stop import StopFlag, catch_interrupt
from attnlab.train import checkpoint as ckpt
from attnlab.train import circuits as circ
from attnlab.train import corpus as corpora
from attnlab.train import repeats
from attnlab.train.circuits import Circuits
from attnlab.train.threads import Picker

SCALE_VARIANTS = {"sqrt": {"scale": "sqrt"}, "none": {"scale": "none"}, "inv": {"scale": "inv"}}
TIE_KV_VARIANTS = {"untied": {"tie_kv": False}, "tied": {"tie_kv": True}}


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 150
    batch_size: int = 16
    block_size: int = 64
    n_layer: int = 2
    n_head: int = 2  # head width d = d_model / n_head = 64
    d_model: int = 128
    position: str = "learned"
    dropout: float = 0.0
    lr: float = 3e-3
    warmup: int = 20  # linear warm-up steps, then cosine decay to lr / 10
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 25
    eval_batches: int = 4
    probe_rows: int = 8  # sequences of the first validation batch given to the entropy probe
    seed: int = 0
    impl: str = "sdpa"
    device: str = "cpu"
    corpus: str | None = None  # a text file; None: Python's standard library
    max_chars: int = 4_000_000
    repeat_share: float = 0.5  # of each batch: rows of a random segment repeated (see attnlab.train.repeats)

    def __post_init__(self):
        for name in ("steps", "batch_size", "block_size", "eval_every", "eval_batches", "probe_rows", "max_chars"):
            positive_int(name, getattr(self, name))
        for name in ("lr", "grad_clip"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("warmup", "weight_decay"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if not 0 <= self.repeat_share < 1:
            raise ValueError(f"repeat_share must be in [0, 1), got {self.repeat_share!r}")

    def model(self, vocab_size: int, **variant) -> GPTConfig:
        return GPTConfig(vocab_size=vocab_size, block_size=self.block_size, n_layer=self.n_layer, n_head=self.n_head,
                         d_model=self.d_model, dropout=self.dropout, position=self.position, impl=self.impl,
                         **variant)


PRESETS = {
    "tiny": TrainConfig(steps=30, batch_size=8, block_size=32, n_layer=1, n_head=2, d_model=32, eval_every=10,
                        eval_batches=2, probe_rows=4, max_chars=200_000),
    # 3 heads of width 32 (d_model 96: a step costs about 0.6 of d_model 128's), 32 sequences a step, half of them
    # repeated segments: the previous-token and induction heads grow after about 450 steps; with 700 steps (a
    # faster decay of the learning rate), with 16 sequences a step, or with d_model 64 (2 heads: a previous-token
    # head at 0.47-0.50) they did not hold. A log costs about four steps' time.
    "default": TrainConfig(steps=800, batch_size=32, n_head=3, d_model=96, eval_every=100),
    "large": TrainConfig(steps=1000, batch_size=16, block_size=128, n_layer=4, n_head=4, d_model=256, lr=1e-3,
                         warmup=50, eval_every=50, max_chars=12_000_000),
}


@dataclass
class VariantLog(Result):
    step: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    entropy: list[list[float]] = field(default_factory=list)  # [logged step][layer], nats
    peak: list[list[float]] = field(default_factory=list)  # [logged step][layer], mean max weight
    qk_grad_norm: list[list[float]] = field(default_factory=list)  # [logged step][layer]: ||grad W_q, W_k||
    qk_norm: list[list[float]] = field(default_factory=list)  # [logged step][layer]: ||W_q|| * ||W_k|| (Frobenius)
    score_grad_norm: list[list[float]] = field(default_factory=list)  # [logged step][layer]: through the softmax
    params: int = 0
    tokens: int = 0  # tokens trained on
    train_seconds: float = 0.0  # time in training steps (logs and checkpoints excluded)
    seconds: float = 0.0  # wall time, everything included
    tokens_per_s: float = 0.0
    diverged_at: int | None = None  # first step with a non-finite loss, if any
    circuits: Circuits | None = None  # the final model's heads measured on repeated random sequences
    threads: list[dict] = field(default_factory=list)  # thread counts chosen as it ran (attnlab.train.threads)


@dataclass
class TrainResult(Result):
    config: dict
    versions: dict
    machine: dict
    variants: dict[str, VariantLog]


def lr_at(cfg: TrainConfig, step: int) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def batch(data: torch.Tensor, B: int, T: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """B random windows of T + 1 tokens: inputs (B, T) and next-token targets (B, T)."""
    start = torch.randint(len(data) - T - 1, (B,), generator=gen).to(data.device)  # (B,)
    rows = data[start[:, None] + torch.arange(T + 1, device=data.device)]  # (B, T + 1)
    return rows[:, :-1], rows[:, 1:]


@functools.lru_cache(maxsize=2)
def _stdlib(max_chars: int) -> corpora.Corpus:
    """The standard library's corpus, read once per process (a build trains several runs on it)."""
    return corpora.stdlib(max_chars)


def load_corpus(cfg: TrainConfig) -> corpora.Corpus:
    c = corpora.from_file(cfg.corpus) if cfg.corpus else _stdlib(cfg.max_chars)
    for name, split in (("training", c.train), ("validation", c.val)):
        if len(split) < cfg.block_size + 2:
            raise ValueError(f"corpus {c.name} has {len(split)} {name} characters; block_size={cfg.block_size} "
                             "needs more")
    return c


def _optimizer(model: GPT, cfg: TrainConfig) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.dim() >= 2]  # matrices and embeddings
    rest = [p for p in model.parameters() if p.dim() < 2]  # biases and LayerNorm gains
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))


def _qk_norms(model: GPT) -> list[float]:
    """Per layer ||W_q|| * ||W_k||: the scores q . k grow with it, so a model can undo a small scale by growing it."""
    out = []
    for block in model.blocks:
        a = block.attn
        w = a.qkv.weight.detach()
        q, k = w[: a.n_head * a.head_dim], w[a.n_head * a.head_dim: (a.n_head + a.n_kv_head) * a.head_dim]
        out.append(float(q.norm() * k.norm()))
    return out


def _qk_grad_norms(model: GPT) -> list[float]:
    out = []
    for block in model.blocks:
        a = block.attn
        g = a.qkv.weight.grad[: (a.n_head + a.n_kv_head) * a.head_dim]  # the q and k rows
        out.append(float(g.norm()))
    return out


def _loss(model: GPT, grid: Grid, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The mean loss over this rank's part of the batch (x, y) (B, T)."""
    x, y, part = grid.split(x, y)
    return model(x, y, shard=part)[1]


def _measure(model: GPT, net: torch.nn.Module, fixed: dict, log: VariantLog, step: int, grid: Grid) -> None:
    """One log entry at the current weights; uses no random numbers, so training is unaffected.

    Across ranks the losses and the gradient are taken over each rank's part of the fixed batches and
    averaged (``net`` is the model under DDP); the entropy probe and the gradient through the softmax
    need the explicit scores of whole sequences, and every rank computes them on the same data.
    """
    model.eval()
    with torch.no_grad():
        tr = sum(float(_loss(model, grid, x, y)) for x, y in fixed["train"]) / len(fixed["train"])
        va = sum(float(_loss(model, grid, x, y)) for x, y in fixed["val"]) / len(fixed["val"])
    tr, va = grid.mean([tr, va], model.wte.weight.device)
    model.zero_grad(set_to_none=True)
    x, y = fixed["train"][0]
    scores = score_grad_norms(model, lambda: model(x, y)[1])
    if grid.world > 1:  # the gradient of the batch's mean loss, from every rank's part
        model.zero_grad(set_to_none=True)
        _loss(net, grid, x, y).backward()
    grads = [p.grad.norm() for p in model.parameters() if p.grad is not None]
    gn, qk = float(torch.stack(grads).norm()), _qk_grad_norms(model)
    model.zero_grad(set_to_none=True)
    pr = probe(model, fixed["probe"])
    model.train()
    log.step.append(step)
    log.train_loss.append(tr)
    log.val_loss.append(va)
    log.grad_norm.append(gn)
    log.qk_grad_norm.append(qk)
    log.qk_norm.append(_qk_norms(model))
    log.score_grad_norm.append(scores)
    log.entropy.append(pr.layer_entropy())
    log.peak.append(pr.layer_peak())


@dataclass
class _Variant:
    """One variant in training: its model and optimizer, its data streams, its log, where it checkpoints."""
    cfg: TrainConfig
    name: str
    path: Path
    grid: Grid
    meta: dict  # what a checkpoint must match to be resumed from
    data: corpora.Corpus
    model: GPT
    net: torch.nn.Module  # the model under DistributedDataParallel when there are several ranks
    opt: torch.optim.Optimizer
    gen: torch.Generator  # the data order: the same for every variant
    train: torch.Tensor  # the training tokens, on the device
    fixed: dict  # the fixed batches every log measures on: "train", "val" and the probe's rows
    log: VariantLog
    pool: torch.Tensor  # the characters repeated segments are drawn from (attnlab.train.repeats)
    lower: torch.Tensor | None = None  # the letters of the segments drawn with repeats

    @property
    def device(self) -> torch.device:
        return torch.device(self.cfg.device)

    def save(self, step: int) -> None:
        """A checkpoint at ``step`` (rank 0 writes it, with every rank's dropout stream for an exact resume)."""
        rngs = self.grid.gather(ckpt.rng_state(self.device), self.device)
        if self.grid.writer:
            ckpt.save(self.path, {**self.meta, "chars": list(self.data.chars), "corpus": self.data.describe(),
                                  "step": step, "model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
                                  "data_rng": self.gen.get_state(), "torch_rng": rngs[0], "log": asdict(self.log),
                                  **({"rank_rng": rngs} if self.grid.world > 1 else {})})


def train_variant(cfg: TrainConfig, name: str, variant: dict, data: corpora.Corpus, path: Path, *,
                  resume: bool = False, stop: StopFlag | None = None,
                  on_step: Callable[[str, int, int, float, float], None] | None = None,
                  grid: Grid | None = None, threads: tuple[int, ...] | None = None) -> VariantLog:
    """Train one variant to ``cfg.steps``, logging and checkpointing to ``path``.

    ``threads``: the thread counts to choose between from the run's own steps (:mod:`attnlab.train.threads`;
    None: the process's setting, unchanged).

    ``grid``: this process's place among several (:mod:`attnlab.distributed.parallel`); every rank calls this
    with the same arguments, and rank 0 alone writes the checkpoints.
    """
    v = _set_up(cfg, name, variant, data, path, grid or Grid())
    start = _resume(v) if resume else None
    if start is None:
        torch.manual_seed(cfg.seed + v.grid.rank)  # dropout's random stream starts from the seed (one per rank)
        start = 0
    _steps(v, start, stop, on_step, threads)
    if v.log.diverged_at is None and cfg.block_size >= 2 * repeats.MIN_SEGMENT:
        v.log.circuits = circ.measure(v.model, data.chars, seed=cfg.seed)
    return v.log


TWINS = {("tie-kv", "untied"): ("scale", "sqrt"), ("scale", "sqrt"): ("tie-kv", "untied")}  # the same model


def reusable(cfg: TrainConfig, kind: str, name: str, out: str | Path, vocab_size: int,
             grid: Grid | None = None) -> Path | None:
    """The finished checkpoint of another experiment's variant that *is* this run (the same model, settings, seed,
    data and steps: 1/sqrt(d) of the scale comparison is the separate-K/V model of the tie-kv ablation), or None."""
    twin = TWINS.get((kind, name))
    if twin is None or (grid is not None and grid.world > 1):
        return None
    path = ckpt.path_of(out, *twin)
    table = {"scale": SCALE_VARIANTS, "tie-kv": TIE_KV_VARIANTS}
    if not path.is_file():
        return None
    try:
        state = ckpt.load(path)
    except ValueError:
        return None
    same = (state.get("step") == cfg.steps and state.get("train_config") == asdict(cfg)
            and state.get("model_config") == cfg.model(vocab_size, **table[kind][name]).to_dict()
            and state.get("model_config") == cfg.model(vocab_size, **table[twin[0]][twin[1]]).to_dict()
            and state.get("grid", {}).get("data_parallel", 1) * state.get("grid", {}).get("context_parallel", 1) == 1)
    return path if same else None


def _reuse(cfg: TrainConfig, name: str, variant: dict, data: corpora.Corpus, twin: Path, path: Path) -> VariantLog:
    """This variant's checkpoint and log as the twin run's (it is the same run), its heads measured again."""
    state = ckpt.load(twin)
    ckpt.save(path, {**{k: v for k, v in state.items() if k != "format"}, "variant": name})
    model = GPT(cfg.model(data.vocab_size, **variant))
    model.load_state_dict(state["model"])
    log = VariantLog(**state["log"])
    if log.diverged_at is None and cfg.block_size >= 2 * repeats.MIN_SEGMENT:
        log.circuits = circ.measure(model, data.chars, seed=cfg.seed)
    return log


def _set_up(cfg: TrainConfig, name: str, variant: dict, data: corpora.Corpus, path: Path, grid: Grid) -> _Variant:
    """A fresh model (the same initial weights for every variant of one shape), its optimizer and data."""
    device = torch.device(cfg.device)
    mcfg = cfg.model(data.vocab_size, **variant)
    meta = {"train_config": asdict(cfg), "model_config": mcfg.to_dict(), "variant": name,
            "grid": {"data_parallel": grid.dp, "context_parallel": grid.cp}}
    torch.manual_seed(cfg.seed)  # the same initial weights for every variant of one shape
    model = GPT(mcfg).to(device)
    net = grid.wrap(model)
    opt = _optimizer(model, cfg)
    gen = torch.Generator().manual_seed(cfg.seed)
    fixed_gen = torch.Generator().manual_seed(cfg.seed + 1)
    fixed = {s: [tuple(t.to(device) for t in batch(d.cpu(), cfg.batch_size, cfg.block_size, fixed_gen))
                 for _ in range(cfg.eval_batches)] for s, d in (("train", data.train), ("val", data.val))}
    fixed["probe"] = fixed["val"][0][0][: cfg.probe_rows]
    ids = repeats.pool(data.chars) if cfg.repeat_share > 0 else torch.empty(0, dtype=torch.int64)
    lower = repeats.letters(data.chars) if cfg.repeat_share > 0 else None
    return _Variant(cfg, name, path, grid, meta, data, model, net, opt, gen, data.train.to(device), fixed,
                    VariantLog(params=model.num_params()), ids, lower)


def _resume(v: _Variant) -> int | None:
    """Load ``v``'s checkpoint (weights, optimizer, data order, random streams, log); the step it was at, or None
    when there is none yet."""
    state = _read_checkpoint(v.path, v.meta, v.grid, v.device)
    if state is None:
        return None
    ckpt.check_weights(state["model"], v.model, v.path, finite=False)  # a diverged run resumes, and stops at once
    v.model.load_state_dict(state["model"])
    for what, restore in (("optimizer", lambda: v.opt.load_state_dict(state["optimizer"])),
                          ("data_rng", lambda: v.gen.set_state(state["data_rng"])),
                          ("torch_rng", lambda: ckpt.set_rng_state(state["rank_rng"][v.grid.rank] if "rank_rng" in state
                                                                   else state["torch_rng"], v.device)),
                          ("log", lambda: setattr(v, "log", VariantLog.from_dict(state["log"])))):
        try:
            restore()
        except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as e:  # a damaged or edited checkpoint
            first = str(e).strip().splitlines()[0][:120] if str(e).strip() else ""
            raise ValueError(f"checkpoint {v.path}: its {what} cannot be restored ({type(e).__name__}"
                             f"{': ' + first if first else ''})") from None
    if not is_int(state["step"]) or state["step"] < 0:
        raise ValueError(f"checkpoint {v.path}: step should be a count of steps, got {state['step']!r}")
    if state["step"] > v.cfg.steps:
        raise ValueError(f"checkpoint {v.path} is at step {state['step']}, past steps={v.cfg.steps}")
    return state["step"]


def _steps(v: _Variant, step: int, stop: StopFlag | None,
           on_step: Callable[[str, int, int, float, float], None] | None, threads: tuple[int, ...] | None) -> None:
    """Train from ``step`` to the end (or the first non-finite loss), measuring and saving every ``eval_every``
    steps; a stop asked for on any rank saves at the same step everywhere and raises KeyboardInterrupt."""
    cfg, log, grid = v.cfg, v.log, v.grid
    t0 = time.perf_counter()
    if not log.step:  # a fresh run: measure the initial weights
        _measure(v.model, v.net, v.fixed, log, 0, grid)
        v.save(0)
    v.model.train()
    picker, prior = (Picker(threads, cfg.eval_every) if threads else None), list(log.threads)
    while step < cfg.steps and log.diverged_at is None:
        if picker:
            picker.before(step)
        ts = time.perf_counter()
        lv = _step(v, step)
        if picker:
            picker.after(step, time.perf_counter() - ts)
            log.threads = prior + picker.choices
        step += 1
        if not math.isfinite(lv):
            log.diverged_at = step - 1
        if on_step is not None:
            on_step(v.name, step, cfg.steps, lv, log.tokens_per_s)
        if step % cfg.eval_every == 0 or step == cfg.steps or log.diverged_at is not None:
            _measure(v.model, v.net, v.fixed, log, step, grid)
            log.seconds += time.perf_counter() - t0
            t0 = time.perf_counter()
            v.save(step)
        if grid.any(stop is not None and stop.requested, v.device):  # a Ctrl-C on one rank stops all at this step
            log.seconds += time.perf_counter() - t0
            v.save(step)
            raise KeyboardInterrupt(f"stopped at step {step} of {v.name}; checkpoint saved to {v.path}")
    log.seconds += time.perf_counter() - t0


def _step(v: _Variant, step: int) -> float:
    """One optimizer step on the next global batch; the batch's mean loss over every rank."""
    cfg, log = v.cfg, v.log
    ts = time.perf_counter()
    x, y = batch(v.train, cfg.batch_size, cfg.block_size, v.gen)  # the global batch; each rank takes its part
    x, y = repeats.mix(x, y, cfg.repeat_share, v.pool, v.gen, v.lower)  # some rows: a random segment, repeated
    loss = _loss(v.net, v.grid, x, y)
    v.opt.zero_grad(set_to_none=True)
    loss.backward()  # under DDP: the gradients averaged over every rank
    torch.nn.utils.clip_grad_norm_(v.model.parameters(), cfg.grad_clip)
    for g in v.opt.param_groups:
        g["lr"] = lr_at(cfg, step)
    v.opt.step()
    lv = v.grid.mean([loss.item()], v.device)[0]  # the global batch's mean loss
    log.tokens += x.numel()
    log.train_seconds += time.perf_counter() - ts
    log.tokens_per_s = log.tokens / log.train_seconds
    return lv


def _read_checkpoint(path: Path, meta: dict, grid: Grid, device: torch.device) -> dict | None:
    """The checkpoint to resume from (None: none there yet), read on rank 0 and handed to every rank."""
    found = None
    if grid.writer and path.is_file():
        try:
            state = ckpt.load(path, need=ckpt.RESUME_FIELDS)
            for name in ("train_config", "model_config"):
                if not isinstance(state[name], dict):
                    raise ValueError(f"checkpoint {path}: {name} should be a table of settings")
            diff = ckpt.differences(state["train_config"], meta["train_config"], ignore=("steps",))
            diff += ckpt.differences(state["model_config"], meta["model_config"])
            diff += ckpt.differences(state.get("grid", {"data_parallel": 1, "context_parallel": 1}), meta["grid"])
            found = ("error", f"checkpoint {path} was trained with other settings ({'; '.join(diff)}); pass the "
                     "same flags to resume, or drop --resume") if diff else ("state", state)
        except ValueError as e:
            found = ("error", str(e))
    found = grid.broadcast(found, device)  # an error on rank 0 stops every rank, not rank 0 alone
    if found is not None and found[0] == "error":
        raise ValueError(found[1])
    return None if found is None else found[1]


def run(cfg: TrainConfig, kind: str = "scale", variants: list[str] | None = None, out: str | Path = "attnlab-out",
        *, resume: bool = False, data: corpora.Corpus | None = None,
        on_step: Callable[[str, int, int, float, float], None] | None = None, grid: Grid | None = None,
        threads: tuple[int, ...] | None = None) -> TrainResult:
    """Train every variant of experiment ``kind`` ("scale" or "tie-kv"); checkpoints go to ``out/checkpoints``.

    ``threads``: the thread counts each variant chooses between from its own steps (None: the process's setting).

    ``grid``: under several processes, every rank calls this (see :mod:`attnlab.distributed.parallel`).
    """
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"cfg must be a TrainConfig, got {type(cfg).__name__}")
    table = {"scale": SCALE_VARIANTS, "tie-kv": TIE_KV_VARIANTS}.get(kind)
    if table is None:
        raise ValueError(f"kind must be 'scale' or 'tie-kv', got {kind!r}")
    names = list(table) if variants is None else list(variants)
    unknown = [v for v in names if v not in table]
    if unknown or not names:
        raise ValueError(f"variants must be chosen from {', '.join(table)}, got {names!r}")
    grid = grid or Grid()
    grid.check(cfg.batch_size, cfg.block_size)
    data = data if data is not None else load_corpus(cfg)
    logs = {}
    with catch_interrupt() as stop:
        for name in names:
            path = ckpt.path_of(out, kind, name)
            twin = reusable(cfg, kind, name, out, data.vocab_size, grid)
            if twin is not None:
                logs[name] = _reuse(cfg, name, table[name], data, twin, path)
                if on_step is not None:
                    on_step(name, cfg.steps, cfg.steps, logs[name].train_loss[-1], logs[name].tokens_per_s)
                continue
            logs[name] = train_variant(cfg, name, table[name], data, path, resume=resume, stop=stop, on_step=on_step,
                                       grid=grid, threads=threads)
    mcfg = cfg.model(data.vocab_size)
    config = {**asdict(cfg), "kind": kind, "head_dim": mcfg.head_dim, "vocab_size": data.vocab_size,
              "corpus_info": data.describe(), "variants": {n: table[n] for n in names},
              "uniform_entropy": uniform_causal_entropy(cfg.block_size),
              "data_parallel": grid.dp, "context_parallel": grid.cp, "parallel": grid.describe()}
    return TrainResult(config=config, versions=versions(), machine=machine(), variants=logs)

