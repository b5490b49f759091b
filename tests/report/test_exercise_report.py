"""What `attnlab lab check` prints, drawn from a result: the next step names the learner's own file, and a busy
machine is said beside the times it makes noisy."""

import re
from dataclasses import replace

import pytest

from attnlab.judge.verify import VerifyResult
from attnlab.lab.result import LabResult, Timing
from attnlab.report import exercise


def _result(load, function="attention_by_hand", functions=("attention_by_hand",)):
    timings = [Timing(128, 0.8, 370_000), Timing(512, 30.0, 1_000_000), Timing(2048, skipped="estimated 479 s")]
    return LabResult("mylab/attention_lab.py", function, "lab", "24 cases", VerifyResult([], {}, {}), [], 4.8e-7,
                     True, timings, {"time": 2.6, "memory": 0.75}, "forward only", 88.0,
                     {"cpu_count": 2, "load_average": load}, {}, functions=list(functions))


def test_the_next_step_is_the_next_levels_command_and_a_busy_machine_is_said():
    text = "\n".join(exercise.lines(_result(load=5.4)))
    print(text)
    assert ("level 2, attention in four tensor lines: `attnlab lab start mylab --level matrix` writes "
            "mylab/lab_matrix.py, then `attnlab lab check mylab/lab_matrix.py`" in text and "FILE" not in text)
    here = "\n".join(exercise.lines(replace(_result(load=5.4), file="attention_lab.py")))  # a file in this folder
    assert "`attnlab lab start --level matrix` writes lab_matrix.py, then `attnlab lab check lab_matrix.py`" in here
    assert ":attention_matrix" not in text  # no function the learner's file does not have (that would exit 2)
    assert "busy while it was timed (load 5.4 on 2 cores)" in text and "the memory is not affected" in text
    assert "not quadratic" in text and "T = 2048  skipped: estimated 479 s" in text
    assert "busy" not in "\n".join(exercise.lines(_result(load=0.7)))
    assert "busy" not in "\n".join(exercise.lines(_result(load=None)))  # a result from before the load was kept


def test_a_failing_check_is_told_to_fix_the_cause_not_to_go_on():
    from attnlab.judge.diagnose import Diagnosis

    r = _result(load=None)
    r.passed, r.diagnoses = False, []
    text = "\n".join(exercise.lines(r))  # no named cause: the failing cases are what to read, not "the cause"
    assert "fix the most likely cause" not in text and "--level" not in text
    assert f"read the failing cases above, fix what they show, and run `attnlab lab check {r.file}` again." in text
    r.diagnoses = [Diagnosis("unscaled", "your scores are not scaled", 3)]
    text = "\n".join(exercise.lines(r))
    assert f"fix the most likely cause and run `attnlab lab check {r.file}` again." in text and "--level" not in text


def test_growth_is_said_only_as_far_as_the_repeats_agree():
    """Times that scatter between repeats give no time exponent, only the range; memory alike for every repeat is
    read over the longer lengths; both as `lab check` fits them."""
    from attnlab.measure import growth

    timings = [Timing(T, 1e-3, 4 * T * T, times_s=times, peaks=[4 * T * T] * 3)
               for T, times in ((128, [1e-4, 1e-3, 4e-4]), (512, [2e-3, 1e-3, 9e-3]), (2048, [0.3, 0.05, 0.1]))]
    fits = {"time": growth.fit({t.seq: t.times_s for t in timings}), "memory": growth.fit({t.seq: t.peaks
                                                                                           for t in timings})}
    r = _result(load=0.5)
    r.timings, r.fits, r.exponents = timings, fits, {k: f.exponent for k, f in fits.items()}
    text = "\n".join(exercise.lines(r))
    print(text)
    lo, hi = fits["time"].low, fits["time"].high
    assert hi - lo > 1 and f"time: the repeats disagree (T^{lo:.2f} to T^{hi:.2f} over T = 512, 2048" in text
    assert "time T^" not in text
    assert ("memory grew as T^2.00 over T = 512, 2048, the same for every repeat (rule: within 0.25 of 2 for every "
            "repeat): quadratic") in text


@pytest.mark.slow  # over 0.3 s of CPU in two runs of make test (tests/costs.py)
def test_the_lab_plots_tick_labels_never_overlap(tmp_path, monkeypatch):
    """A loops version measured at two lengths spans less than a decade of T: matplotlib's minor labels on a log axis
    ran into each other there. Every visible tick label is read from the drawn figure and none may touch another."""
    from tests.labchecks import made

    r = made("my_loops.py", "attention_by_hand", memory=0.3, seqs=(128, 512))
    r.timings[0].time_s, r.timings[1].time_s = 2.0, 9.0
    seen, save = [], exercise.save_figure

    def look(fig, path):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            for axis in (ax.xaxis, ax.yaxis):
                ticks = axis.get_major_ticks() + axis.get_minor_ticks()
                boxes = [t.label1.get_window_extent(renderer) for t in ticks
                         if t.label1.get_visible() and t.label1.get_text() and t.get_visible()]
                seen.append([t.label1.get_text() for t in ticks if t.label1.get_text()])
                assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:]), seen[-1]
        return save(fig, path)

    monkeypatch.setattr(exercise, "save_figure", look)
    assert exercise.figure(r, tmp_path / "lab.png").stat().st_size > 10_000
    assert seen and [x for x in seen[0] if x.isdigit()] == ["128", "512", "2048"]  # the lengths, each once


def test_a_measurement_that_does_not_rise_with_t_says_its_exponent_says_nothing():
    """Level 6 measured 224 KiB, 2.2 MiB, 932 KiB for a learner and fitted T^1.03 without a word: a fit through
    numbers that fall says nothing, and the growth line now says so; numbers that rise get no caveat."""
    from types import SimpleNamespace as NS

    def r(*mem):
        return NS(timings=[NS(seq=T, skipped="", peak_bytes=m, time_s=0.01 * T) for T, m in zip((128, 256, 512), mem,
                                                                                                  strict=True)])

    said = exercise._unsteady(r(224 * 2**10, 2.2 * 2**20, 932 * 2**10))
    assert "the memory did not rise with T (224.0 KiB, 2.2 MiB, 932.0 KiB), so its exponent says nothing" in said
    assert "time" not in said
    assert exercise._unsteady(r(224 * 2**10, 450 * 2**10, 932 * 2**10)) == ""


def test_a_function_that_gave_no_answer_is_said_so_not_inf():
    r = _result(load=None)
    r.passed, r.match_err = False, float("inf")  # it raised on the lesson's input (grade.match)
    text = re.sub(r"\[/?[a-z ]*\]", "", "\n".join(exercise.lines(r)))  # rich's markup left out
    print(text)
    assert "inf" not in text and "Match: no answer to compare with F.scaled_dot_product_attention on 2 heads" in text
    assert "your function raised, or returned no tensor of the inputs' shape" in text


def test_a_levels_verdict_on_its_measurement_says_whether_it_was_measured():
    """Measured and the rule failed: "measured, and it did not hold"; not measured: never "measured"."""
    r = _result(load=None, function="attention_matrix", functions=("attention_matrix",))
    r.level, r.measured_ok, r.measured_note = "matrix", False, "memory grew as T^0.75 (the level asks for T²)"
    line = next(x for x in exercise.lines(r) if x.startswith("[bold]Level 2"))
    assert line.endswith("— [red]measured, and it did not hold[/]"), line
    r.passed, r.timings, r.exponents = False, [], {"time": None, "memory": None}  # raised before it was timed
    r.measured_note = "its memory was not measured at two lengths or more"
    line = next(x for x in exercise.lines(r) if x.startswith("[bold]Level 2"))
    print(line)
    assert line.endswith("not measured at two lengths or more — the grading failed above, so the level is not done")
    assert " measured, " not in line.split("—")[1]


def test_each_length_says_the_load_it_was_timed_at_and_the_busiest_is_the_note():
    r = _result(load=0.4)  # the load when the check began; its lengths were timed busier
    r.timings = [Timing(128, 0.8, 370_000, threads=1, load=1.2), Timing(512, 3.0, 1_000_000, threads=1, load=2.6),
                 Timing(2048, skipped="estimated 48 s a call")]
    text = "\n".join(exercise.lines(r))
    print(text)
    assert "peak memory 361.3 KiB   load 1.2" in text and "load 2.6" in text
    assert "busy while it was timed (load 2.6 on 2 cores)" in text
