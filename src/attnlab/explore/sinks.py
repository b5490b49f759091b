"""Where does attention go when a head has nothing to say? Attention sinks, measured.

A softmax row must sum to 1: a head with nothing to add for some query still has to spread its
weight over the keys. Trained language models answer that by parking the weight on the first token
-- Xiao et al., "Efficient Streaming Language Models with Attention Sinks" (StreamingLLM, 2023,
arXiv:2309.17453) found most heads of large models put a large share there whatever it says, and
called those tokens *attention sinks*. gpt-oss (OpenAI, 2025) gives each head a learnable sink
logit instead: one extra column in every row's softmax with no value behind it, so a head can give
weight to nothing (:mod:`attnlab.nn.attention`).

This experiment trains the tiny GPT twice -- without and with sinks, the same seed, initial weights,
batches and steps, the same form of attention (the matrix form: it takes sinks) -- and then measures,
per layer and head, on held-out text (the corpus's validation files):

* the **first-token share**: the mean weight a query puts on key 0, over the queries at positions
  1 .. T-1 (query 0 sees only key 0 and has no choice);
* for the sinks model, the **sink's share**: the weight the softmax puts on the sink column (1 minus
  the keys' weights), over the same queries.

A head that spread its weight evenly would give the first token ``uniform`` on average (the mean of
1/(i+1) over those queries). Whether the first-token share changed is judged against noise: the
same held-out batches go through both models, and a change counts when it is at least
:data:`MIN_CHANGE` and at least :data:`NOISE_SE` standard errors of the per-batch difference. One
training seed: how much another seed would move the numbers is not in this measurement.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from attnlab.results import Result, machine, versions
from attnlab.train.train import TrainConfig

VARIANTS = {"plain": {}, "sinks": {"sinks": True}}
KIND = "explore-sinks"  # the checkpoints' prefix in out/checkpoints
# the default: the lesson's tiny GPT (2 layers, 3 heads of width 32, T 64, batch 32) for 300 steps each, in the
# matrix form (sdpa takes no sinks; both models use the same form); 50-60 s a model on 2 cores at load 9-18
PRESETS = {
    "default": TrainConfig(steps=300, batch_size=32, block_size=64, n_layer=2, n_head=3, d_model=96, eval_every=100,
                           impl="matrix"),
    "tiny": TrainConfig(steps=20, batch_size=8, block_size=32, n_layer=1, n_head=2, d_model=32, eval_every=10,
                        eval_batches=2, probe_rows=4, max_chars=200_000, impl="matrix"),
}
HELD_OUT_BATCHES = 8  # batches of validation text measured (the noise is the spread between them)
MIN_CHANGE = 0.02  # a change in the mean first-token share smaller than this is not called a change...
NOISE_SE = 3.0  # ...nor one smaller than this many standard errors of the per-batch difference
# the measuring after each model's training, in forward passes of a batch: the held-out loss and weights (a pass
# over every batch each), and about 6 more for the heads' check that training ends with (attnlab.train.circuits)
FORWARDS = 2 * HELD_OUT_BATCHES + 6
TIMING_STEPS = 3 + 3 * 2 + 2 * 6  # timing_s's steps
LOG_STEPS = 4  # a log costs about four steps' time (attnlab.train.train's default preset says so)
HEAVY = 0.3  # a head "parks" on the first token (or the sink) when it gives it at least this share


@dataclass
class SinksResult(Result):
    seed: int
    preset: str
    config: dict  # the TrainConfig both models were trained with
    corpus: dict
    layers: int
    heads: int
    first: dict[str, list[list[float]]]  # variant -> [layer][head]: mean weight on key 0, queries 1 .. T-1
    sink: list[list[float]]  # the sinks model's [layer][head]: mean weight on the sink column, the same queries
    sink_logit: list[list[float]]  # the learned sink logits, [layer][head]
    batch_first: dict[str, list[float]]  # variant -> per held-out batch: first-token share, mean over every head
    batch_sink: list[float]  # per held-out batch: the sink's share, mean over every head
    uniform: float  # what a head spreading its weight evenly gives the first token, on average over those queries
    val_loss: dict[str, float]  # variant -> mean loss on the held-out batches
    held_out: dict  # batches, rows, T, which queries
    seconds: float  # training and measuring
    estimate_s: float | None  # what was said beforehand (None: not estimated)
    machine: dict
    versions: dict


def config(preset: str = "default", seed: int = 0) -> TrainConfig:
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    return dataclasses.replace(PRESETS[preset], seed=seed)


def shares(weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(first-token share, sink share), each (H,): the mean over the batch and the queries 1 .. T-1 of
    ``weights`` (B, H, T, T), causal softmax weights over the keys (with sinks a row sums to 1 minus the sink's
    weight), of key 0's weight and of 1 minus the row's sum."""
    if weights.dim() != 4 or weights.shape[-1] != weights.shape[-2] or weights.shape[-1] < 2:
        raise ValueError(f"weights must be (B, H, T, T) with T >= 2, got {tuple(weights.shape)}")
    rows = weights[:, :, 1:, :].double()  # (B, H, T-1, T)
    first = rows[..., 0].mean(dim=(0, 2))
    sink = (1.0 - rows.sum(-1)).clamp_min(0.0).mean(dim=(0, 2))
    return first, sink


def uniform_first(T: int) -> float:
    """The first-token share of a head that spreads each row evenly: the mean of 1/(i+1) over queries 1 .. T-1."""
    return sum(1.0 / (i + 1) for i in range(1, T)) / (T - 1)


@torch.no_grad()
def measure(model, batches: list[torch.Tensor]) -> tuple[list[list[float]], list[list[float]], list[float],
                                                          list[float]]:
    """Over ``batches`` of tokens (B, T): ([layer][head] first-token share, [layer][head] sink share, per batch the
    first-token share over every head, per batch the sink share over every head)."""
    from attnlab.train.circuits import maps

    first = sink = None
    per_first, per_sink = [], []
    for idx in batches:
        f, s = zip(*(shares(w) for w in maps(model, idx)[0]), strict=True)
        f, s = torch.stack(f), torch.stack(s)  # (L, H)
        first, sink = (f, s) if first is None else (first + f, sink + s)
        per_first.append(float(f.mean()))
        per_sink.append(float(s.mean()))
    n = len(batches)
    return (first / n).tolist(), (sink / n).tolist(), per_first, per_sink


def held_out(cfg: TrainConfig, data, n: int = HELD_OUT_BATCHES) -> list[torch.Tensor]:
    """``n`` batches of validation windows (inputs and targets), drawn from a generator of their own."""
    from attnlab.train.train import batch

    gen = torch.Generator().manual_seed(cfg.seed + 2)
    return [batch(data.val, cfg.batch_size, cfg.block_size, gen) for _ in range(n)]


def seconds(est: dict, cfg: TrainConfig, left: dict[str, int] | None = None) -> float:
    """The run's seconds from ``est``: name -> :class:`attnlab.train.estimate.Estimate`, each model's steps and a
    log timed on ``cfg``; each model's steps still to do (``left``: name -> steps; None: all) and its logs, and
    the measuring after (the held-out batches twice, the heads' check: about :data:`FORWARDS` forward passes of a
    batch, a third of a step each)."""
    left = left if left is not None else dict.fromkeys(VARIANTS, cfg.steps)
    train_s = sum(est[name].seconds(n, cfg.eval_every) for name, n in left.items() if n)
    return train_s + sum(FORWARDS * e.step_s / 3 for e in est.values())


def timing_s(est: dict) -> float:
    """The command's seconds before training: choosing the thread count (3 steps at 1 thread and 3 at 2, taken as
    twice as slow) and timing each model (a warm-up, 5 steps and a log): :data:`TIMING_STEPS` steps and a log each."""
    step = sum(e.step_s for e in est.values()) / len(est)
    return TIMING_STEPS * step + sum(e.log_s for e in est.values())


def estimates(cfg: TrainConfig, data) -> dict:
    """Each model's step and log, timed now on a few steps (:func:`attnlab.train.estimate.estimate`)."""
    from attnlab.train.estimate import estimate

    return {name: estimate(cfg, data, variant=variant) for name, variant in VARIANTS.items()}


def seconds_from_step(step_s: float, preset: str = "default") -> float:
    """The command's seconds (its timing first, then the run) when only a step's time is known (a log taken as
    LOG_STEPS steps)."""
    from attnlab.train.estimate import Estimate

    est = dict.fromkeys(VARIANTS, Estimate(step_s, LOG_STEPS * step_s))
    return timing_s(est) + seconds(est, PRESETS[preset])


def run(seed: int = 0, preset: str = "default", out: str | Path | None = None, *, resume: bool = False,
        data=None, on_step=None, stop=None, estimate_s: float | None = None) -> SinksResult:
    """Train both models (checkpoints in ``out``/checkpoints, a temporary folder when None) and measure them.

    ``resume``: go on from the checkpoints a stopped run left; ``stop``: a StopFlag (Ctrl-C saves and raises
    KeyboardInterrupt); ``on_step(name, step, steps, loss, tokens_per_s)``: progress. Both models train at the
    process's thread count (the command chooses it first): re-choosing at every log, as ``attnlab train`` does,
    timed trial steps at 2 threads of 4 s each on a busy machine (load 9; 0.13-0.2 s at 1 thread), seconds the
    estimate did not hold."""
    import tempfile

    from attnlab.nn import GPT
    from attnlab.train import checkpoint as ckpt
    from attnlab.train import train as lab_train

    cfg = config(preset, seed)
    data = data if data is not None else lab_train.load_corpus(cfg)
    t0 = time.perf_counter()
    batches = held_out(cfg, data)
    first, val_loss, logits = {}, {}, []
    batch_first, sink, batch_sink = {}, [], []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(out) if out is not None else Path(tmp)
        for name, variant in VARIANTS.items():
            path = ckpt.path_of(folder, KIND, name)
            lab_train.train_variant(cfg, name, variant, data, path, resume=resume, stop=stop, on_step=on_step)
            model = GPT(cfg.model(data.vocab_size, **variant))
            model.load_state_dict(ckpt.load(path)["model"])
            model.eval()
            with torch.no_grad():
                val_loss[name] = sum(float(model(x, y)[1]) for x, y in batches) / len(batches)
            f, s, bf, bs = measure(model, [x for x, _ in batches])
            first[name], batch_first[name] = f, bf
            if variant.get("sinks"):
                sink, batch_sink = s, bs
                logits = [b.attn.sinks.detach().tolist() for b in model.blocks]
    return SinksResult(seed, preset, dataclasses.asdict(cfg), data.describe(), cfg.n_layer, cfg.n_head, first, sink,
                       logits, batch_first, batch_sink, uniform_first(cfg.block_size), val_loss,
                       {"batches": len(batches), "rows": cfg.batch_size, "T": cfg.block_size, "queries": "1 .. T-1",
                        "split": "validation"}, time.perf_counter() - t0, estimate_s, machine(), versions())


def _mean(xs) -> float:
    xs = [x for row in xs for x in row] if xs and isinstance(xs[0], list) else list(xs)
    return sum(xs) / len(xs)


def change(r: SinksResult) -> tuple[float, float, float]:
    """(the change in the mean first-token share, sinks minus plain; its standard error over the held-out batches;
    the threshold it is judged against: the larger of MIN_CHANGE and NOISE_SE standard errors)."""
    d = [s - p for p, s in zip(r.batch_first["plain"], r.batch_first["sinks"], strict=True)]
    mean = sum(d) / len(d)
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1) / len(d)) if len(d) > 1 else math.inf
    return _mean(r.first["sinks"]) - _mean(r.first["plain"]), se, max(MIN_CHANGE, NOISE_SE * se)


def _heavy(grid: list[list[float]]) -> int:
    return sum(1 for row in grid for x in row if x >= HEAVY)


def finding(r: SinksResult) -> str:
    n = r.layers * r.heads
    p, s = _mean(r.first["plain"]), _mean(r.first["sinks"])
    diff, se, limit = change(r)
    z = _mean(r.sink)
    (zl, zh) = max(((li, hi) for li in range(r.layers) for hi in range(r.heads)), key=lambda t: r.sink[t[0]][t[1]])
    where = (f"on held-out text ({r.held_out['batches']} batches of {r.held_out['rows']} windows of {r.held_out['T']}"
             f" characters; queries 1 .. T-1; a head spreading its weight evenly would give the first token "
             f"{r.uniform:.3f})")
    rule = (f"a change counts when it is at least {MIN_CHANGE} and at least {NOISE_SE:g} standard errors of the "
            f"per-batch difference, {NOISE_SE * se:.3f} here")
    if abs(diff) >= limit:
        verb = "falls" if diff < 0 else "rises"
        head = (f"With a learned sink the weight on the first token {verb} from {p:.3f} to {s:.3f} on average over "
                f"the {n} heads {where}: a change of {diff:+.3f} ({rule}).")
    else:
        why = ("within noise" if abs(diff) < NOISE_SE * se else
               f"beyond the noise of the held-out batches but smaller than {MIN_CHANGE}, the least called a change")
        head = (f"With a learned sink the weight on the first token does not change measurably: {p:.3f} without, "
                f"{s:.3f} with, on average over the {n} heads {where}; the change {diff:+.3f} is {why} ({rule}).")
    k = _heavy(r.first["plain"])
    ratio = (f" Without sinks the first token gets {p / r.uniform:.2f} times an even head's share"
             + (f"; {k} of {n} heads give it at least {HEAVY}: attention sinks in StreamingLLM's sense." if k else
                f"; no head gives it {HEAVY} or more: no attention sink in StreamingLLM's sense."))
    sink = (f" The sink takes {z:.3f} of the weight on average (most: {r.sink[zl][zh]:.3f}, layer {zl} head {zh}); "
            f"heads giving it at least {HEAVY}: {_heavy(r.sink)} of {n} (and to the first token, with sinks: "
            f"{_heavy(r.first['sinks'])}).")
    loss = (f" Held-out loss {r.val_loss['plain']:.3f} without, {r.val_loss['sinks']:.3f} with "
            f"({r.config['steps']} steps each, seed {r.seed}; another seed is not measured).")
    return head + ratio + sink + loss


RESULT = SinksResult
