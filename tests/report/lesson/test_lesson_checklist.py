"""The lab's checklist, read from the checks kept in the output folder: each item from the learner's newest
check of each function, only from a passing one, naming the check and when, with the newest check's verdict
beside it. Each test feeds checks that would break one of those claims."""

import json
import re
from html import unescape
from types import SimpleNamespace

from attnlab.lab import store
from attnlab.lesson import sources
from attnlab.report.lesson import checklist
from attnlab.train.train import TrainResult
from tests.labchecks import made

from .conftest import TRAIN

OF_1 = "Your newest check of level 1 (attention with loops): "  # said beside an item ticked from an older check


def at(minute: int) -> str:
    return f"2026-12-01T10:{minute:02d}:00.000000+00:00"


def _page(out, *checks, train=TRAIN):
    """The checklist of a folder holding ``checks`` (kept as `lab check` keeps them): (header, [(tick, text)])."""
    for r in checks:
        store.save(r, out)
    data = SimpleNamespace(lab=sources.lab(out), train_scale=sources.Part(
        "train scale", "file", "from x/train.json", TrainResult.from_dict(train)))
    html = checklist.checklist(data)
    text = lambda h: unescape(re.sub("<[^>]+>", "", h))  # noqa: E731
    items = [text(li) for li in re.findall(r"<li class=\"(?:done|todo)\">(.*?)</li>", html)]
    assert len(items) == 4 and all(i[0] in "✓✗" for i in items), items
    for li, i in zip(re.findall(r'<li class="(done|todo)">', html), items, strict=True):
        assert (li == "done") == (i[0] == "✓")
    return text(re.search("<p>(.*?)</p>", html)[1]), items


def test_nothing_checked_says_what_to_do(tmp_path):
    head, items = _page(tmp_path)
    assert head.startswith("0 of 4 done — nothing of yours checked yet")
    assert [i[0] for i in items] == ["✗"] * 4  # the machine's forms never tick the learner's items
    assert "attnlab lab start" in items[0] and "not done yet" in items[1] and "not done yet" in items[2]
    # TRAIN's unscaled run: measured, its loss lower than the scaled one's, so the claim did not hold
    assert "the machine's run" in items[3] and "measured, and it did not hold at these settings — " in items[3]
    assert "not measured" not in items[3] and "the loss stays above the scaled model's: not so in this run" in items[3]
    assert "Your newest check" not in " ".join(items)


def test_a_failing_function_ticks_nothing_though_it_was_measured(tmp_path):
    head, items = _page(tmp_path, made(passed=False, memory=2.0, time=at(1)))  # wrong, with quadratic memory
    assert head.startswith("0 of 4 done — the first three from your own newest attnlab lab check results (1 check")
    assert [i[0] for i in items] == ["✗"] * 4
    assert "attention_lab.py:my_attention, checked at 10:01:00 UTC: 1 of 15 graded cases failed; likely cause: the " \
           "output is attention without the scale; max |yours − F.sdpa| 3.0e-07" in items[0]
    assert "Fix it and run attnlab lab check attention_lab.py:my_attention again" in items[0]
    for item in items[1:3]:
        assert "only a passing function's measurements count, and none of yours passes now" in item
        assert ("attention_lab.py:my_attention, checked at 10:01:00 UTC failed its grading (it was measured at T = "
                "128, 512, 2048 all the same") in item
        assert "T^" not in item and "Your newest check" not in item  # the item is from the newest check itself


def test_fixed_then_a_second_failing_function_keeps_the_passing_one_and_says_the_newest(tmp_path):
    wrong, fixed = made(passed=False, time=at(1)), made(memory=2.01, time=at(2))
    second = made("my_second.py", "attention_by_hand", passed=False, memory=2.0, time=at(3))
    head, items = _page(tmp_path, wrong, fixed, second)
    assert head.startswith("3 of 4 done") and "(3 checks kept in lab-checks/)" in head
    assert [i[0] for i in items] == ["✓", "✓", "✓", "✗"]
    assert "from attention_lab.py:my_attention, checked at 10:02:00 UTC: every one of its 15 graded" in items[0]
    assert "from attention_lab.py:my_attention, checked at 10:02:00 UTC: peak memory at T = 128, 512, 2048" in items[1]
    assert "from attention_lab.py:my_attention, checked at 10:02:00 UTC: memory grew as T^2.01" in items[2]
    for item in items[:3]:
        assert item.endswith(f" {OF_1}my_second.py:attention_by_hand at 10:03:00 UTC, failed.")
    assert "Your newest check" not in items[3]  # the machine's run is not a check


def test_quadratic_memory_comes_from_a_passing_function_never_a_failing_one(tmp_path):
    loops = made("my_loops.py", "attention_by_hand", memory=0.7, time=at(1))  # passes, memory like T
    wrong = made("attention_lab.py", "my_matrix", passed=False, memory=2.0, time=at(2))  # fails, memory like T²
    head, items = _page(tmp_path, loops, wrong)
    assert [i[0] for i in items] == ["✓", "✓", "✗", "✗"]
    assert ("my_loops.py:attention_by_hand, checked at 10:01:00 UTC: memory grew as T^0.70 over T = 512, 2048, the "
            "same for every repeat (rule: within 0.25 of 2 for every repeat), not quadratically") in items[2]
    assert "T^2.00" not in items[2]
    # level 2 is where the whole T x T matrix is held: the item sends the learner there, with commands that exist
    assert ("level 2 holds the whole T x T matrix: attnlab lab start --level matrix writes lab_matrix.py, then "
            "attnlab lab check lab_matrix.py") in items[2]
    assert items[2].endswith(f" {OF_1}attention_lab.py:my_matrix at 10:02:00 UTC, failed.")
    # level 2 done: its passing check ticks the item, the loops version still the match's
    matrix = made("lab_matrix.py", "attention_matrix", memory=2.02, time=at(3))
    head, items = _page(tmp_path, matrix)
    assert head.startswith("3 of 4 done") and [i[0] for i in items] == ["✓", "✓", "✓", "✗"]
    assert "from lab_matrix.py:attention_matrix, checked at 10:03:00 UTC: memory grew as T^2.02" in items[2]
    assert "Your newest check" not in items[2]


def test_the_quadratic_item_is_decided_for_every_repeat_and_says_the_spread(tmp_path):
    """Repeats whose exponents straddle the rule's edge decide nothing; a spread inside the rule ticks it."""
    noisy = made(memory=1.8, jitter=0.1, time=at(1))  # median T^1.80, its repeats allow 1.66 to 1.94
    _, items = _page(tmp_path / "noisy", noisy)
    assert items[2].startswith("✗") and "memory grew as T^1.80 over T = 512, 2048, its repeats 1.66 to 1.94" \
        in items[2] and "the repeats straddle the rule (rule: within 0.25 of 2 for every repeat)" in items[2]
    assert "not quadratically" not in items[2]  # it is not decided either way
    steady = made(memory=1.95, jitter=0.02, time=at(1))
    _, items = _page(tmp_path / "steady", steady)
    assert items[2].startswith("✓") and "T^1.95 over T = 512, 2048, its repeats 1.92 to 1.98" in items[2]


def test_a_function_that_failed_after_it_passed_is_what_it_is_now(tmp_path):
    _, items = _page(tmp_path, made(time=at(1)), made(passed=False, time=at(2)))  # the same file and function
    assert [i[0] for i in items[:3]] == ["✗", "✗", "✗"]
    assert "attention_lab.py:my_attention, checked at 10:02:00 UTC: 1 of 15 graded cases failed" in items[0]


def test_the_starter_checked_last_never_ticks_the_match_and_replaces_nothing(tmp_path):
    mine = made("my_loops.py", "attention_by_hand", memory=1.0, time=at(1))
    starter = made("attention_lab.py", "attention_by_hand", passed=False, given=True, time=at(2))  # as it came
    head, items = _page(tmp_path, mine, starter)
    assert [i[0] for i in items] == ["✓", "✓", "✗", "✗"] and "(2 checks kept" in head
    assert "from my_loops.py:attention_by_hand, checked at 10:01:00 UTC: every one" in items[0]
    assert "from my_loops.py:attention_by_hand, checked at 10:01:00 UTC: peak memory" in items[1]
    assert "my_loops.py:attention_by_hand, checked at 10:01:00 UTC: memory grew as T^1.00" in items[2]
    beside = f" {OF_1}attention_lab.py:attention_by_hand at 10:02:00 UTC (the starter's code as it came), failed."
    assert all(i.endswith(beside) for i in items[:3])


def test_only_the_starters_code_checked_is_not_the_learners(tmp_path):
    head, items = _page(tmp_path, made("attention_lab.py", "attention_by_hand", passed=False, given=True, time=at(1)))
    assert head.startswith("0 of 4 done") and [i[0] for i in items] == ["✗", "✗", "✗", "✗"]
    assert "the starter's code as it came (attention_by_hand), which does not count as yours" in items[0]
    assert "none of yours passes now" in items[1] and "none of yours passes now" in items[2]


def test_a_passing_function_not_measured_at_every_length_says_which(tmp_path):
    partial = made(memory=1.9, seqs=(128, 512), time=at(1))
    partial.timings.append(type(partial.timings[0])(2048, skipped="estimated 95 s a call, over the 20 s budget"))
    _, items = _page(tmp_path, partial)
    assert [i[0] for i in items] == ["✓", "✗", "✓", "✗"]
    assert "measured at 128, 512; T = 2048 estimated 95 s a call, over the 20 s budget" in items[1]


def test_an_older_day_is_said_and_a_destabilised_run_ticks_the_machines_item(tmp_path):
    old = made(time="2026-11-30T09:00:00.000000+00:00")
    newer = made("other.py", "f", passed=False, time=at(1))
    destabilised = json.loads(json.dumps(TRAIN))
    destabilised["variants"]["none"]["val_loss"][-1] = 3.9  # above the scaled model's 3.39
    destabilised["variants"]["none"]["entropy"] = [[0.1, 0.1], [0.1, 0.1]]  # saturated at every log
    head, items = _page(tmp_path, old, newer, train=destabilised)
    assert "from attention_lab.py:my_attention, checked at 09:00:00 UTC on 2026-11-30:" in items[0]
    assert items[3].startswith("✓") and "training is the lab's given" in items[3] and head.startswith("4 of 4")


def test_the_footer_names_the_parts_measured_while_the_page_was_built_and_none_after_a_full_build():
    from attnlab.report import lesson as lesson_page

    def part(name, origin):
        return sources.Part(name, origin, "", None)

    full = SimpleNamespace(demo=part("demo", "file"), bench=part("bench", "file"), train_scale=part("train", "file"),
                           train_tie_kv=part("tie-kv", "file"), explore={"trust": part("trust", "file")})
    text = lesson_page.footer(full)
    assert "read from the output folder" in text and "quick" not in text and "--build" not in text
    partly = SimpleNamespace(**{**full.__dict__, "bench": part("bench", "quick run"),
                                "explore": {"trust": part("trust", "not measured")}})
    text = lesson_page.footer(partly)
    assert "measured small while it was built, or not at all: bench, explore trust." in text, text
    assert "attnlab lesson --build" in text and "demo" not in text


def test_after_level_2_breaks_the_memory_items_stay_with_levels_1_and_2_and_say_to_fix_it(tmp_path):
    """A learner's path: loops, matrix and flash pass, then the matrix file is broken again. The memory items never
    move to the flash check (its memory is meant to grow like T), and the quadratic one says the matrix form fails
    now, when it passed, and the command that checks it again."""
    head, items = _page(tmp_path, made(memory=0.75, time=at(1)),
                        made("lab_matrix.py", "attention_matrix", memory=2.0, time=at(2)),
                        made("lab_flash.py", "flash_forward", memory=1.0, seqs=(512, 1024, 2048, 4096, 8192),
                             time=at(3)),
                        made("lab_matrix.py", "attention_matrix", passed=False, memory=2.0, time=at(4)))
    print(items)
    assert items[1][0] == "✓" and "from attention_lab.py:my_attention" in items[1]
    assert items[2][0] == "✗" and "lab_flash.py" not in items[1] + items[2]
    assert ("your matrix form lab_matrix.py:attention_matrix, checked at 10:04:00 UTC fails its grading now; it "
            "passed at 10:02:00 UTC: fix it and run attnlab lab check lab_matrix.py again") in items[2]
    assert "lab start" not in items[2]


def test_the_path_says_a_level_that_passed_and_fails_now_and_to_fix_its_file(tmp_path):
    from attnlab.report.lesson import levels as path

    for r in (made(memory=0.75, time=at(1)), made("lab_matrix.py", "attention_matrix", memory=2.0, time=at(2)),
              made("lab_matrix.py", "attention_matrix", passed=False, memory=2.0, time=at(4))):
        store.save(r, tmp_path)
    html = path.path(SimpleNamespace(lab=sources.lab(tmp_path)))
    text = unescape(re.sub("<[^>]+>", "", html))
    print(text)
    level2 = re.search(r'data-level="matrix">(.*?)</li>', html, flags=re.S)[1]
    assert "failing now (failed 1 of 15 cases); it passed at 10:02:00 UTC" in unescape(re.sub("<[^>]+>", "", level2))
    assert ("Next: level 2, attention in four tensor lines: fix lab_matrix.py:attention_matrix and run attnlab lab "
            "check lab_matrix.py again") in text


def test_an_item_names_the_newest_check_of_its_own_level_never_a_later_levels(tmp_path):
    """Levels 1 and 2 done, then flash failing (10:18), backward (10:20) and decode (10:21): the items, ticked from
    levels 1 and 2, are each from the newest check of their level, so none names lab_flash.py as "your newest"
    (the newest check was the decoder's in any case); a newer failing check of level 2 is named with its level."""
    walk = [made(memory=0.75, time=at(10)), made("lab_matrix.py", "attention_matrix", memory=2.0, time=at(12)),
            made("lab_flash.py", "flash_forward", passed=False, memory=1.0, time=at(18)),
            made("lab_backward.py", "flash_backward", memory=1.0, time=at(20)),
            made("lab_decode.py", "decode_step", memory=1.0, time=at(21))]
    head, items = _page(tmp_path, *walk)
    print(items)
    assert [i[0] for i in items] == ["✓", "✓", "✓", "✗"] and head.startswith("3 of 4 done")
    assert not any("Your newest check" in i or "lab_flash" in i for i in items), items
    later = made("my_matrix.py", "attention_matrix", passed=False, time=at(22))  # level 2 again, failing
    _, items = _page(tmp_path, later)
    of_2 = "Your newest check of level 2 (attention in four tensor lines): "
    assert all(i.endswith(f" {of_2}my_matrix.py:attention_matrix at 10:22:00 UTC, failed.") for i in items[:3])


def test_the_path_done_names_the_last_level_and_a_chart_draws_the_limit_the_level_asks():
    """Every level done: the line runs to level 7's Triton kernel (it ended at the KV cache). Level 4's memory chart
    draws the level's own limit, at most T^1.2, through the first point -- not T^1, which asks more than it does."""
    from attnlab.lab import levels as lab_levels
    from attnlab.report.lesson import levels as page_levels

    checks = []
    for lv in lab_levels.LEVELS:
        r = made(lv.filename, lv.function, time=at(lv.number))
        r.level = lv.name
        checks.append(r)
    head = unescape(page_levels.path(SimpleNamespace(lab=checks[::-1])))
    assert "7 of 7 levels done" in head
    assert "every level is done, all 7: from attention with loops to FlashAttention-2's forward as a Triton kernel" \
        in head
    flash = checks[3]
    svg = unescape(page_levels._curves(flash, lab_levels.find("flash")))
    assert "at most T^1.2, what the level asks" in svg and "T^1, what the level asks" not in svg
    mem = [(t.seq, t.peak_bytes) for t in flash.timings if t.peak_bytes]
    print(mem)
    assert len(mem) >= 2  # (the chart was drawn from these)
