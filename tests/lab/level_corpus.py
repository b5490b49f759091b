"""The levels' mutant corpus, run the way ``attnlab lab check`` names slips, in this process: each slip of each level
(tests/lab/level_solutions.py) and what the level names first, at a seed; the solutions and what they get.

The attention levels (loops, matrix, flash) name slips from the learner's outputs on the probes
(:func:`attnlab.lab.levels.slips.answers` where the function runs, :func:`attnlab.lab.check.level_diagnoses`
where it is judged); the levels with cases of their own (module, backward, decode) from their ``judge`` of what
``run`` returned. ``named(level, slip, seed)`` is the keys, most likely first, and whether every case passed.
"""

import functools

from attnlab.judge import oracle  # noqa: F401 -- the tests read the oracle through here
from attnlab.lab import levels
from attnlab.lab.check import level_diagnoses
from attnlab.lab.levels import slips as lab_slips
from tests.lab import level_solutions as S  # noqa: F401

ATTENTION = {"loops": S.attention_by_hand, "matrix": S.attention_matrix, "flash": S.flash_forward,
             "triton": S.flash_attention}  # (level 7's as PyTorch tiles: tests/lab/level_triton.py is the kernel)
EXTRA = {"backward": {"autograd": S.autograd_backward}}  # mutants that are not the solution with a knob


def _own(level: str, slip):
    if level == "module":
        return S.causal_self_attention(slip)
    if slip in EXTRA.get(level, {}):
        return EXTRA[level][slip]
    return functools.partial({"backward": S.flash_backward, "decode": S.decode_step}[level], slip=slip)


def attention_keys(lv, fn, seed: int) -> list[str]:
    """What lab check names first for an attention level's function ``fn`` (as the learner wrote it), read from its
    outputs on the level's probes."""
    mod = lv.module()
    got = lab_slips.answers(functools.partial(mod.probe_call, fn), mod.PROBES, seed)
    return [d.key for d in level_diagnoses(got, lv, seed, [])]


def as_causal(lv, fn):
    """An attention level's function as an always-causal (q, k, v) -> out, the lab's first form (level 4's and 7's
    with the tiles the check gives them)."""
    from attnlab.judge import verify as V

    mod = lv.module()
    if hasattr(mod, "wrap"):
        return mod.wrap(fn)
    return lambda q, k, v: mod.probe_call(fn, q, k, v, V.Case("causal", L=q.shape[-2], S=k.shape[-2],
                                                              is_causal=True))["out"]


def own_keys(lv, fn, seed: int) -> tuple[list[str], bool]:
    """What a level with cases of its own names, and whether every case passed."""
    mod = lv.module()
    reply = {**mod.run(fn, {"seed": seed}), **mod.run(fn, {"seed": seed, "what": "extra"})}  # the cases, the training
    rows, found, _, _ = mod.judge(reply, seed)
    return [d.key for d in found], all(r.status == "pass" for r in rows)


def named(level: str, slip: str | None, seed: int) -> tuple[list[str], bool | None]:
    """(the diagnoses' keys, most likely first; whether every case passed, None for the attention levels, whose
    grid grading is verify's and tested there)."""
    lv = levels.find(level)
    if lv.kind == "attention":
        return attention_keys(lv, functools.partial(ATTENTION[level], slip=slip), seed), None
    return own_keys(lv, _own(level, slip), seed)


def slips(level: str) -> tuple[str, ...]:
    return S.SLIPS[level] + tuple(EXTRA.get(level, ()))


def run(seeds=range(5), chosen=None) -> list[dict]:
    """Every level's solution and slips at every seed: what was named first, and whether that is right."""
    out = []
    for level in chosen or S.SLIPS:
        for seed in seeds:
            for slip in (None, *slips(level)):
                keys, passed = named(level, slip, seed)
                want = [w.split("@")[0] for w in slip.split("+")] if slip else []  # two slips at once: both named,
                # first ("key@how": the key)
                right = (keys == [] and passed is not False) if slip is None else (sorted(keys[:len(want)]) ==
                                                                                  sorted(want))
                out.append({"level": level, "slip": slip, "seed": seed, "named": keys, "right": right})
    return out
