"""What ``attnlab lab check`` found about the learner's function: graded, matched, measured. Written as JSON.

Each check is kept in a file of its own (:mod:`.store`), with the time it was made; the lesson page
reads them to tick the lab's checklist from the learner's own newest results.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from attnlab.judge import Diagnosis, VerifyResult
from attnlab.measure.growth import Fit
from attnlab.results import Result

MATCH_TOL = 1e-4  # the lab's "matches F.scaled_dot_product_attention to 1e-4"


@dataclass
class Timing(Result):
    """One length: the learner's function's median forward time and its extra peak memory, or why it was skipped."""

    seq: int
    time_s: float | None = None
    peak_bytes: int | None = None
    skipped: str | None = None  # e.g. "estimated 95 s a call, over the 20 s budget"
    times_s: list[float] = field(default_factory=list)  # every timed call (time_s is their median)
    peaks: list[int] = field(default_factory=list)  # every peak measured (peak_bytes is their median)
    threads: int | None = None  # torch's thread count while it was timed (attnlab.lab.measure.THREADS)
    load: float | None = None  # the machine's 1-minute load average when this length's timing began


@dataclass
class LabResult(Result):
    file: str  # as given on the command line
    function: str
    form: str  # "lab": (q, k, v), always causal; "sdpa": F.scaled_dot_product_attention's signature
    cases_note: str  # which cases were graded, and why those
    verify: VerifyResult  # verify's rows for the graded cases
    diagnoses: list[Diagnosis]  # the likely causes of the failures, most likely first
    match_err: float  # max |yours - F.sdpa| on the lesson's causal input (float32)
    passed: bool  # every graded case passed
    timings: list[Timing]
    exponents: dict[str, float | None]  # "time", "memory": the fitted growth with T (the longer lengths)
    measure_note: str  # how the times and memory were measured (sizes, heads, what was skipped)
    seconds: float
    machine: dict
    versions: dict
    match_tol: float = MATCH_TOL
    shrunk: list[str] = field(default_factory=list)  # the graded cases that were run smaller, to finish in time
    given: bool = False  # the starter's own finished function, unchanged: its pass is not the learner's
    time: str = ""  # when it was checked: ISO 8601, UTC (given by store.save when the check is kept)
    functions: list[str] = field(default_factory=list)  # the functions the file defines (the hints name only these)
    ended: str | None = None  # how the learner's process ended before the check was done (then it does not pass)
    level: str = ""  # the lab's level it was checked as ("" in older checks: read from the function's name)
    measured_ok: bool | None = None  # what the level asks of its measurement held (None: it asks nothing)
    measured_note: str = ""  # the level's measurement against what it asks, in words
    curve: dict[str, list[float]] = field(default_factory=dict)  # a level's curve: "yours" beside "library"
    fits: dict[str, Fit | None] = field(default_factory=dict)  # "time", "memory": the exponent and its repeats' range
