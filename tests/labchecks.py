"""`attnlab lab check` results for the store, checklist and page tests, without running whole checks.

`made` builds a LabResult with the verdict, the measurements and the time a test wants, to break one
claim at a time. `graded` grades a real function with verify's rule on a few small cases of the lab's
grid (what `lab check` grades it on, smaller), so its verdict, failure count and likely cause are the
judge's own; only the time and memory measurements, which `lab check` takes minutes over, are given.
"""

import inspect

from attnlab.judge import verify as V
from attnlab.judge.diagnose import Diagnosis
from attnlab.judge.judge import Row
from attnlab.lab import files, grade
from attnlab.lab.measure import SEQS, THREADS
from attnlab.lab.result import LabResult, Timing
from attnlab.measure import growth


def _exponents(fits):
    return {k: f and f.exponent for k, f in fits.items()}


def measured(memory=2.0, seqs=SEQS, jitter=0.0, load=1.5):
    """Timings at ``seqs`` whose peak memory grows as T**memory, each length's three repeats ``jitter`` (a fraction)
    apart either side, their time as T**2 exactly, on the lab's thread count at ``load``; with the fits `lab check`
    makes of them, and their exponents."""
    timings = []
    for T in seqs:
        peak = 1e5 * (T / 128) ** memory
        peaks = [int(peak * (1 + jitter * k)) for k in (-1, 0, 1)]
        timings.append(Timing(T, 1e-3 * (T / 128) ** 2, peaks[1], times_s=[1e-3 * (T / 128) ** 2] * 3, peaks=peaks,
                              threads=THREADS, load=load))
    fits = {"time": growth.fit({t.seq: t.times_s for t in timings}),
            "memory": growth.fit({t.seq: t.peaks for t in timings})}
    return timings, fits


def made(file="attention_lab.py", function="my_attention", passed=True, err=3e-7, memory=2.0, seqs=SEQS,
         given=False, time="", jitter=0.0, functions=()):
    """A check of ``file:function``: 15 graded cases (one failed unless ``passed``), measured at ``seqs``."""
    rows = [Row(function, f"case {i}", "float32", "pass" if passed or i else "fail") for i in range(15)]
    causes = [] if passed else [Diagnosis("unscaled", "the output is attention without the scale")]
    timings, fits = measured(memory, seqs, jitter)
    return LabResult(file, function, "lab", "15 cases", V.VerifyResult(rows, {}, {}), causes, err, passed,
                     timings, _exponents(fits), "made by the test", 1.0, {}, {}, given=given, time=time,
                     functions=list(functions), fits=fits)


def graded(fn, file, function=None, memory=2.0, cases=6, seqs=SEQS):
    """A check of ``fn`` as ``file:function``: graded for real on the first ``cases`` cases a (q, k, v) function
    can answer, each run at 16 x 16 query-key pairs at most; the starter's own code is told as `lab check` tells it."""
    function = function or fn.__name__
    chosen = [c.shrunk(256) for c in V.default_cases(long=False) if grade.answerable(c)][:cases]
    result = V.verify({function: grade.as_sdpa(fn)}, chosen, seed=0)
    timings, fits = measured(memory, seqs)
    return LabResult(file, function, "lab", f"{len(chosen)} small cases", result, result.diagnoses.get(function, []),
                     grade.match(grade.as_sdpa(fn)), result.passed, timings, _exponents(fits),
                     "measurements made by the test", 1.0, {}, {}, fits=fits,
                     given=files.given_text(inspect.getsource(inspect.getmodule(fn)), function))


def leveled(level: str, slip=None, file=None, time=""):
    """A check of the level's solution (or one of its slips) from tests/lab/level_solutions.py, as
    ``attnlab lab check`` keeps it: the attention levels graded for real on a few small cases (their memory given,
    growing as the level asks), the levels with cases of their own graded and measured for real, in this process
    (the backward's memory given too: its measurement is tested with the level's slips)."""
    import functools
    from types import SimpleNamespace

    from attnlab.lab import levels
    from attnlab.lab.levels import own
    from tests.lab import level_corpus as C

    lv = levels.find(level)
    mod, file = lv.module(), file or lv.filename
    if lv.kind == "attention":
        raw = C.ATTENTION[level] if slip is None else functools.partial(C.ATTENTION[level], slip=slip)
        fn = functools.update_wrapper(C.as_causal(lv, raw), C.ATTENTION[level])
        r = graded(fn, file, lv.function, memory={"matrix": 2.0, "flash": 1.0}.get(level, 1.5), seqs=mod.SEQS)
        r.level, r.time = level, time
        if not r.passed:  # the level's slips first, as lab check puts them
            from attnlab.lab.check import level_diagnoses
            from attnlab.lab.levels import slips

            got = slips.answers(functools.partial(mod.probe_call, raw), mod.PROBES, 0)
            r.diagnoses = level_diagnoses(got, lv, 0, r.diagnoses)
        r.measured_ok, r.measured_note = mod.measured_ok(r)
        return r
    fn = C._own(level, slip)
    learner = SimpleNamespace(name=lv.function, path=file, given=False, functions=[lv.function])
    r = own.check(lv, learner, lambda h, seconds, basis: mod.run(fn, h),
                  lambda reply, s: mod.judge(reply, s, lv.function), measure=level != "backward")
    if level == "backward" and r.passed:  # its memory given, linear (one noisy call a length decides nothing here)
        r.timings, fits = measured(1.0, mod.SEQS)
        r.exponents = _exponents(fits)
        r.measured_ok, r.measured_note = mod.measured_ok(r)
    r.time = time
    return r
