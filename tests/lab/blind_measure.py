"""What ``attnlab lab check`` names first for each learner's file of the blind corpus (tests/lab/blind/), measured.

The files and their labels (tests/lab/blind_slips.py) were written by someone who never read the lab's
detectors. :data:`LABELS` is the one table written after reading them: each plain label to the key of
the line the lab should say first. Each file is judged here as lab check judges it, in this process:
an attention level's slips from its outputs on the probes, then (where no slip is named) verify's own
diagnoses of a few small graded cases, and level 4's and 7's own rows (the lse, the work); a level
with cases of its own by its ``run`` and ``judge``. Level 7's kernels run under Triton's interpreter,
in a process of their own (``python -m tests.lab.blind_measure triton`` prints its rows as JSON).
"""

import functools
import json
import sys
import uuid
from pathlib import Path

BLIND = Path(__file__).parent / "blind"

LABELS = {  # the blind index's labels -> the lab's keys (several keys: either is the slip, in the lab's words; none: no
    # line of the lab's names that slip, a miss by definition)
    "mask-off-by-one-ahead": ("peeks-ahead",), "mask-hides-diagonal": ("diagonal",),
    "causal-lower-right": ("lower-right",), "no-scale": ("unscaled",), "scale-by-E": ("scale-1/d",),
    "scale-by-sqrt-S": ("scale-length",), "scale-after-softmax": ("scale-after-softmax",),
    "masked-scores-zero": ("mask-zero",), "masked-scores-finite": ("mask-finite",),
    "no-max-subtraction": ("max-subtraction",), "max-taken-before-mask": ("max-before-mask",),
    "weights-not-normalised": ("unnormalised",), "value-of-query-index": ("out-is-v",),
    "output-dtype-not-input": ("dtype",), "mask-inverted": ("causal-reversed",),
    "mask-shape-L-by-L": ("square-assumed",), "mask-result-discarded": ("causal-ignored",),
    "mask-after-softmax": ("mask-after-softmax",), "softmax-over-queries": ("softmax-dim",),
    "k-T-on-batched": ("k-T",),
    "split-heads-view-without-transpose": ("heads-split",), "split-heads-interleaved": ("heads-split",),
    "merge-heads-view-before-transpose": ("merge-view",), "merge-heads-wrong-permute": ("merge-view",),
    "no-output-projection": ("no-proj",), "q-k-swapped": ("qkv-order", "scores-transposed"),
    "v-from-k-projection": ("qkv-order",),
    "no-causal-mask": ("causal-ignored",), "scale-by-d-model": ("scale-C",), "scale-by-d": ("scale-1/d",),
    # level 4
    "last-partial-tile-dropped": ("last-tile-dropped",), "diagonal-tile-skipped": ("diagonal-skipped",),
    "causal-skip-by-first-query": ("skip-bound",), "no-causal-tile-skip": ("no-skip",),
    "mask-tile-local-indices": ("tile-mask",), "mask-always-causal": ("causal-always",),
    "running-max-stale": ("stale-max", "nan-everywhere"), "rescale-forgotten-acc": ("acc-not-rescaled",),
    "rescale-forgotten": ("rescale-after-update",), "rescale-sign-flipped": ("rescale-inverted", "nan-everywhere"),
    "divide-per-tile": ("divide-per-tile",), "no-final-division": ("not-divided",), "lse-without-m": ("lse-no-max",),
    "lse-base-2": ("lse-base2",), "lse-in-input-dtype": ("lse-dtype",),
    # level 5
    "D-from-dout-v": ("d-wrong",), "D-without-keepdim": ("d-keepdim",), "D-not-sliced-to-query-tile": (),  # (raises)
    "dv-from-P-not-PT": ("dv-not-transposed",), "dv-overwritten-per-query-tile": ("dkdv-overwritten",),
    "dk-without-transpose": ("dk-not-transposed",), "dq-scale-forgotten": ("scale-missing",),
    "dk-scale-forgotten": ("scale-missing",), "scale-applied-twice": ("scale-twice",),
    "dS-precedence": ("ds-precedence",), "lse-of-wrong-row": ("lse-other-row",), "lse-of-key-tile": ("lse-other-row",),
    "causal-skip-wrong-side": ("skip-wrong-side",),
    # level 6
    "sdpa-is-causal-one-query": ("sdpa-causal",), "attends-empty-cache-slots": ("whole-buffer",),
    "cache-written-after-attend": ("before-write", "slot-ahead"),
    "cache-slot-off-by-one": ("slot-ahead", "slot-behind"),
    "own-key-excluded": ("before-write",), "cache-write-not-in-place": ("cache-not-written",),
    "keys-cat-wrong-dim": (),  # (it raises)
    "key-not-rotated": ("rope-q-only",),
    "cache-holds-unrotated-key": ("rope-q-only",), "cache-keys-rotated-again": ("rope-k-only",),
    "rope-position-off-by-one": ("rope-offset",), "value-rotated": ("rope-v",), "scale-by-sqrt-t": ("scale-length",),
    "softmax-over-wrong-dim": ("softmax-dim",),
    # level 7
    "edge-mask-forgotten": ("pad-keys",), "edge-scores-zero": ("pad-keys",), "causal-mask-forgotten":
        ("diagonal-unmasked",), "causal-loop-bound-excludes-diagonal": ("bound-short",),
    "causal-loop-bound-by-block-n": ("bound-block-n",), "rescale-forgotten-sum": ("sum-not-rescaled",),
    "divide-broadcast-wrong-axis": ("divide-axis",), "lse-not-stored": ("lse-no-sum", "lse-wrong"),
    "wrong-stride": ("Ev!=E",),  # (right only where v and k are as wide: the judge's line says where it fails)
}


def _blind():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.lab import blind_slips

    return blind_slips.SLIPS


def _small_cases(level):
    """A few small graded cases of the level's kind (verify's diagnoses read their failures)."""
    from dataclasses import replace

    from attnlab.judge import verify as V

    mod = level.module()
    if hasattr(mod, "cases"):
        return mod.cases(quick=True)
    base = [V.Case("causal", batch=(1,), H=2, L=16, E=8, is_causal=True),
            V.Case("L<S causal upper-left", batch=(1,), H=2, L=9, S=21, E=8, is_causal=True),
            V.Case("L>S causal upper-left", batch=(1,), H=2, L=21, S=9, E=8, is_causal=True),
            V.Case("large logits, causal", batch=(1,), H=2, L=20, E=8, is_causal=True, magnitude=10.0),
            V.Case("full", batch=(1,), H=2, L=16, E=8)]
    which = getattr(mod, "answerable", None) or (lambda c: c.is_causal)
    return [replace(c, dtype=dt) for dt in ("float32", "float64", "bfloat16") for c in base if which(c)] + list(
        getattr(mod, "MORE_CASES", ()))


def _attention(level, fn, name: str, seed: int) -> tuple[list[str], bool]:
    from attnlab.judge import verify as V
    from attnlab.lab import check, grade
    from attnlab.lab.levels import beside, slips

    mod = level.module()
    graded = mod.sdpa(fn) if hasattr(mod, "sdpa") else grade.as_sdpa(mod.wrap(fn))
    result = V.verify({name: graded}, _small_cases(level), seed=seed, timeout=None,
                      backward=getattr(mod, "BACKWARD", True))
    more, fill = [], {}
    if hasattr(mod, "extra_rows"):
        try:
            rows, more, fill = mod.extra_rows(functools.partial(mod.run, fn), name, seed)
        except Exception as e:  # as lab check's own request (check._extra): what it raised is an error row
            from attnlab.judge import Row
            from attnlab.judge.facts import raised

            rows = [Row(name, "the level's own cases", "float32", "error", detail=f"{type(e).__name__}: {e}",
                        facts=raised(e))]
        result.rows += rows
        if any(r.status != "pass" for r in rows):  # as lab check: verify's lines read the level's own rows too
            from attnlab.judge.diagnose import diagnose

            result.diagnoses[name] = diagnose(result, name)
    if result.passed:
        return [], True
    def ask(what):  # as lab check asks the learner's process (check._probes)
        probes = mod.PROBES if what == "probes" else beside.cases(mod.PROBES)
        return slips.answers(functools.partial(mod.probe_call, fn), probes, seed)

    return check.slip_lines(ask, level, seed, result.diagnoses.get(name, []), more, fill), False


def _own(level, fn, seed: int) -> tuple[list, bool]:
    mod = level.module()
    reply = {**mod.run(fn, {"seed": seed}), **mod.run(fn, {"seed": seed, "what": "extra"})}
    rows, found, _, _ = mod.judge(reply, seed)
    return found, all(r.status == "pass" for r in rows)


def first_diagnoses(level_name: str, path: Path, seed: int = 0) -> tuple[list, bool]:
    """(the lines lab check says of the file, most likely first, as Diagnosis; whether it passed)."""
    from attnlab.judge.apart import loader
    from attnlab.judge.diagnose import Diagnosis
    from attnlab.lab import check, judged, levels

    level = levels.find(level_name)
    source = path.read_text()
    if level.given(source, level.function):  # the starter is told what `lab check` itself tells it
        with judged.open_learner(str(path), level_name) as learner:
            r = check.check(learner, quick=True, seed=seed)
        return list(r.diagnoses), r.passed
    fn = loader.load_file(path, level.function, module_name=f"attnlab_blind_{uuid.uuid4().hex}")
    try:
        return _attention(level, fn, level.function, seed) if level.kind == "attention" else _own(level, fn, seed)
    except Exception as e:  # the check ends in a verdict whatever the file does: here, a row for the table
        return [Diagnosis(f"crashed the measurement: {type(e).__name__}: {e}", "")], False


def first_lines(level_name: str, path: Path, seed: int = 0) -> tuple[list[str], bool]:
    """(the keys lab check says of the file, most likely first; whether it passed)."""
    found, passed = first_diagnoses(level_name, path, seed)
    return [d.key for d in found], passed


def rows(level_name: str, starter_dir: Path | None = None) -> list[dict]:
    """One row per blind file of the level (and its untouched starter): labels, what was said, whether right."""
    from attnlab.lab import files, levels

    out = []
    chosen = dict(_blind().get(level_name, {}))
    paths = {name: BLIND / level_name for name in chosen}
    if starter_dir is not None:  # the level's starter as `lab start` writes it: it must be told it is one, alone
        lv = levels.find(level_name)
        files.start(starter_dir, lv)
        chosen[lv.filename], paths[lv.filename] = ("(untouched starter)",), starter_dir
    for name, labels in chosen.items():
        keys, passed = first_lines(level_name, paths[name] / name)
        if labels == ("(untouched starter)",):
            right = keys == ["starter"]
        elif labels:
            wanted = {k for label in labels for k in LABELS.get(label, ())}
            right = bool(keys) and keys[0] in wanted
        else:
            right = keys == [] and passed
        out.append({"level": level_name, "file": name, "labels": list(labels), "said": keys, "passed": passed,
                    "right": right})
    return out


def table(measured: list[dict]) -> str:
    """The measurement as a table: per level, named first / slip files, and the rows that went wrong."""
    lines = []
    for level in dict.fromkeys(r["level"] for r in measured):
        mine = [r for r in measured if r["level"] == level]
        slips = [r for r in mine if r["labels"] and r["labels"] != ["(untouched starter)"]]
        quiet = [r for r in mine if r not in slips]
        hit = sum(r["right"] for r in slips)
        lines.append(f"{level:9} named first {hit}/{len(slips)} ({hit / max(1, len(slips)):.0%}); correct files and "
                     f"the starter told nothing wrong: {sum(r['right'] for r in quiet)}/{len(quiet)}")
        lines += [f"    {r['file']}: labels {r['labels']} -> said {r['said'][:3]}" for r in mine if not r["right"]]
    return "\n".join(lines)


if __name__ == "__main__":  # one level's rows as JSON (level 7 runs here, under TRITON_INTERPRET=1)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        print(json.dumps(rows(sys.argv[1], Path(d))))
