"""What a training comparison showed, in numbers -- and whether the lesson's predictions held.

The lesson predicts that without the 1/sqrt(d) scale

1. the softmax saturates: entropy near 0 (peak weight near 1) from the start;
2. its gradients vanish: the query and key weights stop learning;
3. the loss plateaus early, above the scaled model's.

:func:`summarise` reads those off a :class:`~attnlab.train.train.TrainResult` with explicit,
printed thresholds, so each verdict can be checked against the numbers beside it. The tie-kv ablation's
claim ("tying the value projection to the key projection measurably reduces capability") is checked by
:func:`tie_kv` with the same loss-gap rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnlab.results import Result

LOSS_GAP = 0.02  # nats: a final validation loss this much above another's counts as worse (one seed)


@dataclass
class VariantSummary(Result):
    name: str
    entropy_start: list[float]  # per layer, nats
    entropy_end: list[float]
    peak_start: list[float]
    peak_end: list[float]
    val_start: float
    val_end: float
    val_mid: float  # at the logged step nearest half-way
    grad_norm_start: float
    grad_norm_end: float
    qk_grad_start: float  # mean over layers
    qk_grad_end: float
    score_grad_start: float  # mean over layers of ||d loss / d scores||
    score_grad_end: float
    tokens_per_s: float
    seconds: float
    diverged_at: int | None


@dataclass
class Prediction(Result):
    claim: str
    holds: bool
    evidence: str


def _mean(xs) -> float:
    return sum(xs) / len(xs)


def summarise_variant(name: str, log) -> VariantSummary:
    mid = min(range(len(log.step)), key=lambda i: abs(log.step[i] - log.step[-1] / 2))
    return VariantSummary(
        name=name, entropy_start=log.entropy[0], entropy_end=log.entropy[-1], peak_start=log.peak[0],
        peak_end=log.peak[-1], val_start=log.val_loss[0], val_end=log.val_loss[-1], val_mid=log.val_loss[mid],
        grad_norm_start=log.grad_norm[0], grad_norm_end=log.grad_norm[-1],
        qk_grad_start=_mean(log.qk_grad_norm[0]), qk_grad_end=_mean(log.qk_grad_norm[-1]),
        score_grad_start=_mean(log.score_grad_norm[0]), score_grad_end=_mean(log.score_grad_norm[-1]),
        tokens_per_s=log.tokens_per_s, seconds=log.seconds, diverged_at=log.diverged_at)


def summarise(result) -> tuple[dict[str, VariantSummary], list[Prediction]]:
    """Per-variant summaries, and (when both 'sqrt' and 'none' ran) the lesson's predictions checked."""
    s = {name: summarise_variant(name, log) for name, log in result.variants.items()}
    preds: list[Prediction] = []
    if "sqrt" not in s or "none" not in s:
        return s, preds
    a, b = s["sqrt"], s["none"]
    uniform = result.config["uniform_entropy"]
    e0 = _mean(b.entropy_start)
    every_log = [_mean(e) for e in result.variants["none"].entropy]  # "throughout": every logged step, not two
    preds.append(Prediction(
        "the unscaled softmax saturates (entropy toward 0)",
        all(e < 0.25 * uniform for e in every_log),
        f"mean entropy {e0:.2f} -> {_mean(b.entropy_end):.2f} nats unscaled vs {_mean(a.entropy_start):.2f} -> "
        f"{_mean(a.entropy_end):.2f} scaled (uniform {uniform:.2f}); rule: below a quarter of uniform throughout"))
    preds.append(Prediction(
        "its gradients vanish (through the softmax)",
        b.score_grad_end < 0.5 * a.score_grad_end,
        f"||d loss / d scores|| {b.score_grad_start:.3g} -> {b.score_grad_end:.3g} unscaled vs "
        f"{a.score_grad_start:.3g} -> {a.score_grad_end:.3g} scaled; on the query/key weights "
        f"{b.qk_grad_start:.3g} -> {b.qk_grad_end:.3g} vs {a.qk_grad_start:.3g} -> {a.qk_grad_end:.3g} (without "
        f"the scale, the chain rule loses no 1/sqrt(d) factor); rule: score gradient at the end below half the "
        f"scaled one"))
    gap = float("inf") if b.diverged_at is not None else b.val_end - a.val_end
    preds.append(Prediction(
        "the loss stays above the scaled model's",
        gap > LOSS_GAP,
        f"final validation loss {b.val_end:.3f} unscaled vs {a.val_end:.3f} scaled (gap {gap:+.3f}; half-way "
        f"{b.val_mid - a.val_mid:+.3f}); rule: gap above {LOSS_GAP}"))
    return s, preds


def destabilised(preds: list[Prediction]) -> bool:
    """The checklist verdict: saturation and a worse loss both measured."""
    return len(preds) == 3 and preds[0].holds and preds[2].holds


def tie_kv(summaries: dict[str, VariantSummary]) -> Prediction | None:
    """The tie-kv ablation's claim checked (when both 'tied' and 'untied' ran): the tied model's final
    validation loss is above the separate one's by more than the gap rule."""
    if "tied" not in summaries or "untied" not in summaries:
        return None
    gap = summaries["tied"].val_end - summaries["untied"].val_end
    return Prediction("tying them measurably reduces capability", gap > LOSS_GAP,
                      f"rule: tied loss above separate by more than {LOSS_GAP}, one seed")


@dataclass
class SmallScale(Result):
    """1/d against 1/sqrt(d), measured: the lesson says 1/d starts nearly uniform and learns worse.

    A model can undo a scale by growing its query and key weights (the scores grow with
    ||W_q|| * ||W_k||), so after training the gap may be small or gone; the norms show whether that happened.
    """

    val_sqrt: float  # final validation loss
    val_inv: float
    gap: float  # val_inv - val_sqrt
    holds: bool  # gap > LOSS_GAP: 1/d ended measurably worse
    entropy_start_sqrt: float  # mean over layers at step 0, nats
    entropy_start_inv: float
    uniform: float  # an even spread over the keys a causal row sees
    qk_start_sqrt: float | None  # mean over layers of ||W_q|| * ||W_k|| at step 0 (None: not logged)
    qk_end_sqrt: float | None
    qk_start_inv: float | None
    qk_end_inv: float | None
    head_dim: int | None = None  # d: 1/d gives scores 1/sqrt(d) times 1/sqrt(d)'s, for the same weights
    entropy_end_sqrt: float | None = None
    entropy_end_inv: float | None = None
    loss_gap: float = LOSS_GAP

    @property
    def nearly_uniform_at_start(self) -> bool:
        """The lesson's point at initialisation: 1/d's softmax within 10% of an even spread."""
        return self.entropy_start_inv >= 0.9 * self.uniform

    @property
    def inv_grew(self) -> float | None:
        """How many times 1/d's ||W_q|| * ||W_k|| grew over training, against 1/sqrt(d)'s (None: not logged)."""
        if None in (self.qk_start_inv, self.qk_end_inv, self.qk_start_sqrt, self.qk_end_sqrt):
            return None
        return (self.qk_end_inv / self.qk_start_inv) / (self.qk_end_sqrt / self.qk_start_sqrt)

    @property
    def score_ratio_end(self) -> float | None:
        """1/d's scores against 1/sqrt(d)'s at the end, for the weights each grew: 1/sqrt(d) at the start, times
        how much more 1/d grew ||W_q|| * ||W_k|| (None: not logged)."""
        if self.inv_grew is None or not self.head_dim:
            return None
        return self.inv_grew / math.sqrt(self.head_dim)


def small_scale(result) -> SmallScale | None:
    """The 1/d claim checked, when both 'sqrt' and 'inv' ran and neither diverged."""
    v = result.variants
    if "sqrt" not in v or "inv" not in v or not v["sqrt"].val_loss or not v["inv"].val_loss:
        return None

    def qk(name, at):
        rows = v[name].qk_norm
        return _mean(rows[at]) if rows and len(rows) == len(v[name].step) else None

    a, b = summarise_variant("sqrt", v["sqrt"]), summarise_variant("inv", v["inv"])
    gap = b.val_end - a.val_end if b.diverged_at is None else float("inf")
    return SmallScale(a.val_end, b.val_end, gap, gap > LOSS_GAP, _mean(a.entropy_start), _mean(b.entropy_start),
                      result.config.get("uniform_entropy", math.nan), qk("sqrt", 0), qk("sqrt", -1), qk("inv", 0),
                      qk("inv", -1), result.config.get("head_dim"), _mean(a.entropy_end), _mean(b.entropy_end))
