"""Level 4, FlashAttention's forward: ``flash_forward(q, k, v, is_causal, block_q, block_k)`` -> (out, lse).

Tiles of queries against tiles of keys; each query row keeps a running max ``m``, a running sum ``l``
of exp(score − m) and an accumulator of exp(score − m)·v; a new tile raises the max, rescales both by
exp(m_old − m_new) and adds its own. At the end out = acc / l and lse = m + log l, which level 5's
backward reads. Nothing of size (L, S) is ever held, so the extra memory grows like T.

Graded on verify's grid as a function of (q, k, v, is_causal) -- every case without a mask, a scale,
dropout, GQA or a score modifier, causal or not, L != S, forward and backward -- with tile sizes the
case's lengths give (:func:`blocks`: about a third of them, so the last tiles are partial); its lse on
cases of its own against the oracle's under the judge's lse rule; and its work: the multiply-adds of
its matrix products in a causal and a full call at T = 512 with 64 x 64 tiles, counted by
``torch.utils.flop_counter``. Skipping the tiles wholly above the diagonal, a causal forward does
(n + 1) / 2n of the full one's (56 % for n = 8 tiles a side); at most :data:`HALF` passes. Its slips
are named from its outputs on probes (:mod:`.tiles` computes each slip's answer).
"""

from __future__ import annotations

from attnlab.judge import Case

from . import forwards, slips, tiles, ways

FORM = "the level's form, flash_forward(q, k, v, is_causal, block_q, block_k) -> (out, lse)"
SEQS = (512, 1024, 2048, 4096, 8192)
BLOCK = 64  # the tile size when it is measured and its work counted
WORK_T = 512  # the length the work is counted at (8 tiles a side of 64)
HALF = 0.6  # the most a causal call's work may be of a full call's ("about half": 56 % with 8 tiles a side)


def blocks(L: int, S: int) -> tuple[int, int]:
    """The tile sizes a case of L queries and S keys runs with: a third of each and one (the last tile partial)."""
    return L // 3 + 1, S // 3 + 1


def call(fn, q, k, v, is_causal: bool, block_q: int, block_k: int):
    """The learner's (out, lse), or a TypeError that says what came back instead."""
    got = fn(q, k, v, is_causal, block_q, block_k)
    return forwards.pair(got, "flash_forward", "(out, lse)")


def sdpa(fn):
    """The learner's function as the grid calls it, with F.scaled_dot_product_attention's signature: its out."""
    return forwards.sdpa(lambda q, k, v, c: call(fn, q, k, v, c, *blocks(q.shape[-2], k.shape[-2]))[0],
                       getattr(fn, "__name__", "flash_forward"))


answerable = forwards.answerable


def probe_call(fn, q, k, v, case):
    out, lse = call(fn, q, k, v, case.is_causal, *blocks(case.L, case.S or case.L))
    return {"out": out, "lse": lse}


def measure_call(fn):
    def measured(q, k, v):
        return call(fn, q, k, v, True, BLOCK, BLOCK)[0]
    return measured


PROBES = (
    Case("probe, causal", batch=(1,), H=2, L=24, E=8, is_causal=True, dtype="float64"),
    Case("probe, full", batch=(1,), H=2, L=24, E=8, dtype="float64"),
    Case("probe, causal, L < S", batch=(1,), H=2, L=17, S=29, E=16, is_causal=True, dtype="float64"),
    Case("probe, causal, L > S", batch=(1,), H=1, L=29, S=17, E=8, is_causal=True, dtype="float64"),
    Case("probe, full, L < S", batch=(1,), H=2, L=13, S=22, E=8, dtype="float64"),
    Case("probe, every size 4", batch=(4,), H=4, L=4, E=4, is_causal=True, dtype="float64"),
    Case("probe, large logits", batch=(1,), H=2, L=20, E=8, is_causal=True, dtype="float32", magnitude=30.0),
)
LSE_CASES = (
    Case("causal", batch=(2,), H=2, L=37, E=16, is_causal=True, dtype="float32"),
    Case("causal, L < S", batch=(1,), H=2, L=21, S=50, E=16, is_causal=True, dtype="float64"),
    Case("full, L > S", batch=(1,), H=2, L=50, S=21, E=16, dtype="float32"),
    Case("causal, large logits", batch=(1,), H=2, L=40, E=32, is_causal=True, dtype="float32", magnitude=10.0),
    Case("causal, bfloat16", batch=(1,), H=2, L=40, E=32, is_causal=True, dtype="bfloat16"),
)
NAN = "nan-everywhere"
MORE_CASES = (slips.LARGE, slips.WIDE_V)  # graded beside the grid's


TILE_SLIPS = [  # (key, one step of the tiled forward done wrong)
    ("acc-not-rescaled", tiles.Slip(rescale_acc=False)), ("sum-not-rescaled", tiles.Slip(rescale_sum=False)),
    ("rescale-after-update", tiles.Slip(after=True)), ("max-not-carried", tiles.Slip(carry_max=False)),
    ("max-not-carried", tiles.Slip(carry_max=False, rescaled=True)),
    ("stale-max", tiles.Slip(stale="-inf")), ("stale-max", tiles.Slip(stale="zero")),
    ("stale-max", tiles.Slip(stale="first-new")), ("max-never-updated", tiles.Slip(update_max=False)),
    ("max-never-updated", tiles.Slip(update_max=False, bound="past-end")),
    ("lse-base2", tiles.Slip(lse="mixed")), ("mask-zero", tiles.Slip(fill=0.0)),
    ("last-tile-dropped", tiles.Slip(last_keys=False)), ("tile-mask", tiles.Slip(local="keys")),
    ("tile-mask", tiles.Slip(local="rows")), ("tile-mask", tiles.Slip(local="both")),
    ("diagonal-skipped", tiles.Slip(skip="diagonal")), ("diagonal-skipped", tiles.Slip(skip="partial")),
    ("skip-bound", tiles.Slip(skip="first-query")), ("skip-bound", tiles.Slip(skip="tile-number")),
    ("skip-bound", tiles.Slip(bound="plus-block-k", skip="never")),
    ("skip-not-causal", tiles.Slip(skip_always=True)), ("causal-reversed", tiles.Slip(causal="reversed")),
    ("peeks-ahead", tiles.Slip(causal="ahead")), ("diagonal", tiles.Slip(causal="diagonal")),
    ("not-divided", tiles.Slip(divide="never")), ("divide-per-tile", tiles.Slip(divide="per-tile")),
    ("rescale-inverted", tiles.Slip(alpha="inverted")), ("lse-no-max", tiles.Slip(lse="sum")),
    ("lse-no-sum", tiles.Slip(lse="max")), ("lse-base2", tiles.Slip(lse="base2")),
    ("lse-base2", tiles.Slip(lse="log2-sum")),
]


def _tiled(slip):
    return lambda q, k, v, c: tiles.forward(q, k, v, c, *blocks(q.shape[-2], k.shape[-2]), slip)


def slip_list():
    """The tiled forward's own slips first (they are what a tiled form gets wrong), then attention's."""
    return [(key, _tiled(s)) for key, s in TILE_SLIPS] + [
        (key, f) for key, f in slips.common() if key != "unnormalised"]  # (not-divided says it, in its words)


def slip_pairs():
    """Two slips at once: two of the tiled forward's, or two of attention's."""
    return [(keys, _tiled(s)) for keys, s in ways.pairs(TILE_SLIPS)] + slips.common_pairs()


TEXT = {
    **slips.TEXT,
    **forwards.TEXT,
    "last-tile-dropped": "your loop over key tiles drops the last, partial tile (when S is not a multiple of the "
                         "tile): range(0, S, block_k) visits it, and k[..., j0:j0 + block_k] is shorter there",
    "diagonal-skipped": "your causal forward skips the tile that holds the diagonal: a tile of keys is hidden from a "
                        "tile of queries only when its first key j0 comes after the tile's last query "
                        "(j0 > i0 + Bq - 1); the diagonal tile is partly visible and must be computed, masked",
    "skip-bound": "your causal forward stops (or skips) key tiles at the wrong place: a tile of keys is needed by a "
                  "tile of queries until its first key j0 comes after the tile's last query (skip when "
                  "j0 > i0 + Bq - 1; loop to min(S, i0 + Bq)) -- not its first query, one key tile past it "
                  "(i0 + block_k), nor the tiles' numbers (they agree only when block_q == block_k)",
    "divide-per-tile": "your forward divides each tile's part by that tile's own sum before adding it: the weights "
                       "are normalised by the whole row's sum, once, at the end (acc += exp(s − m)·v; out = acc / l)",
    "skip-not-causal": "your forward skips tiles above the diagonal even when is_causal is False: without the mask "
                       "every query sees every key; skip only under is_causal",
    "no-skip": "your causal forward computes every tile, also those wholly above the diagonal (it did {work} of the "
               "full forward's work): skip a tile of keys whose first key comes after the tile's last query",
    NAN: "your output is NaN on every row, even with small scores: an exp that meets the running max while it is "
         "still -inf gives inf -- exp(s - m) with m used before its update, or the rescale turned round, "
         "exp(m_new - m) -- and 0 × inf or inf / inf is NaN; take m_new first, p = exp(s - m_new), "
         "alpha = exp(m - m_new)",
}


def run(fn, header: dict) -> dict:
    """In the learner's process: the lse cases' values, or the work of a causal and a full call (:mod:`.forwards`)."""
    if header.get("what") == "lse":
        return forwards.lse_values(lambda q, k, v, c: probe_call(fn, q, k, v, c)["lse"], LSE_CASES, header["seed"])
    if header.get("what") == "work":
        return forwards.work(lambda q, k, v, causal: call(fn, q, k, v, causal, BLOCK, BLOCK), WORK_T, BLOCK)
    raise ValueError(f"level 4 answers no request {header.get('what')!r}")


def extra_rows(ask, name: str, seed: int):
    """The rows of the lse cases and of the work (judged here from the values ``ask`` brings), and the lines they
    name: "no-skip" when a causal call did more than :data:`HALF` of a full one's work, "lse-dtype" when its lse came
    back in half precision and a case of it failed."""
    lse = ask({"what": "lse", "seed": seed})
    rows = forwards.lse_rows(lse, LSE_CASES, name, seed)
    work, ratio = forwards.work_row(ask({"what": "work", "seed": seed}), name, WORK_T, BLOCK, HALF)
    found = ["lse-dtype"] if forwards.lse_half(lse) and any(r.status != "pass" for r in rows) else \
        forwards.lse_stored(lse, LSE_CASES, rows, seed)  # (in float32 or float64, but with a narrower one's values)
    found += ["no-skip"] if ratio is not None and ratio > HALF else []
    return rows + [work], found, {"work": f"{ratio:.0%}" if ratio is not None else ""}


def measured_ok(result) -> tuple[bool, str]:
    from . import BY_NAME

    return forwards.memory_ok(result, BY_NAME["flash"].growth)
