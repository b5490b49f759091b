"""Everything the lesson page shows, gathered in one object: :func:`collect`.

The page (``attnlab lesson``) is drawn by :mod:`attnlab.report.lesson` from the :class:`LessonData`
returned here; nothing on it is computed by the page builder itself. It holds the model the page
runs live (the checkpoint ``attnlab train`` left in the output folder, else a seeded model, labelled
as such), the walkthrough sentence and that model's heads measured on it, a worked example small
enough to check by hand, the source lines each step quotes, and the results of ``demo``, ``bench``,
``train`` and ``explore`` -- read from their JSON when present, otherwise quick runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from attnlab.lesson import code, model, sources, walkthrough, worked
from attnlab.lesson.sources import Part
from attnlab.lesson.walkthrough import Walkthrough
from attnlab.results import machine, versions
from attnlab.train import circuits as circ


@dataclass
class LessonData:
    created: str  # when the page was built (UTC)
    quick: bool
    walkthrough: Walkthrough
    model: model.PagedModel
    worked: worked.Worked
    code: code.Code
    demo: Part
    bench: Part
    train_scale: Part
    train_tie_kv: Part
    explore: dict[str, Part]
    circuits: circ.Circuits | None  # the live model's heads, measured on repeated random sequences
    lab: list  # the learner's own `attnlab lab check` results (attnlab.lab.result.LabResult), newest first
    seconds: float
    machine: dict
    versions: dict


def collect(out: str | Path, quick: bool = False, seed: int = 0, log=lambda msg: None,
            progress=None) -> LessonData:
    """Gather the page's data from ``out`` (reading results there) and quick runs; ``log`` hears each step, and
    before a training run what it will take; ``progress``: the training's steps shown as they go
    (:func:`attnlab.report.train.train_progress`)."""
    t0 = time.perf_counter()
    out = Path(out)
    ckpt = walkthrough.find_checkpoint(out)
    log(f"walkthrough: {'checkpoint ' + str(ckpt) if ckpt else 'no checkpoint in ' + str(out) + ', a seeded model'}")
    try:
        loaded, walk = walkthrough.trained(ckpt) if ckpt else walkthrough.seeded(seed)
    except walkthrough.CannotRead as e:  # too short a context, characters it never saw, another scale
        log(f"walkthrough: {e}; a seeded model instead")
        loaded, walk = walkthrough.seeded(seed, why=f" ({e})")
    paged = model.pack(loaded)
    log(f"live model: {sum(1 for _ in loaded.model.parameters())} tensors, {loaded.model.num_params():,} weights, "
        f"{paged.nbytes / 2**20:.1f} MiB in the page")
    log("demo")
    demo = sources.demo(out, seed)
    log("bench")
    bench = sources.bench(out, quick)
    log("train")
    scale, tie = sources.train(out, quick, say=log, progress=progress)
    log("explore")
    explore = sources.explore(out, seed, quick)
    heads = None
    if loaded.model.cfg.block_size >= 2 * circ.repeats.MIN_SEGMENT:
        heads = circ.measure(loaded.model, loaded.chars, seed=seed)
        p, i = heads.best("previous"), heads.best("induction")
        log(f"heads: previous-token {p.previous:.2f} (layer {p.layer} head {p.head}), induction {i.induction:.2f} "
            f"(layer {i.layer} head {i.head}), loss {heads.loss_first:.2f} on the first copy, {heads.loss_repeat:.2f} "
            "on the repeat")
    mine = sources.lab(out)
    log(f"lab: {len(mine)} check{'s' if len(mine) != 1 else ''} of yours (lab-checks/*.json)")
    return LessonData(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), quick, walk, paged, worked.run(),
                      code.collect(), demo, bench, scale, tie, explore, heads, mine, time.perf_counter() - t0,
                      machine(), versions())
