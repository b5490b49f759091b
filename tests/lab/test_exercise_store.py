"""The lab's results kept per check: named by file, function and time, never written over an earlier check,
read back newest first, and the newest check of each file and function told from the older ones."""

import json
import os
from datetime import UTC, datetime, timedelta

import pytest

from attnlab.lab import store
from attnlab.lab.result import LabResult
from tests.labchecks import made


def at(minute: int) -> str:
    return f"2026-12-01T10:{minute:02d}:00.000000+00:00"


def test_a_check_is_kept_under_its_file_function_and_time_and_reads_back_the_same(tmp_path, round_trip):
    r = made("mylab/attention_lab.py", "my_attention")
    before = datetime.now(UTC)
    path = store.save(r, tmp_path)
    t = store.when(r)
    assert before <= t <= datetime.now(UTC) and r.time.endswith("+00:00")  # the time of the check, in UTC
    assert path == tmp_path / "lab-checks" / f"attention_lab-my_attention-{t:%Y%m%dT%H%M%S.%fZ}.json"
    back = round_trip(json.loads(path.read_text()), LabResult)
    assert back == r and back.time == r.time
    assert store.history(tmp_path) == [r]
    stamped = made(time=at(1))
    store.save(stamped, tmp_path)  # a check that has its time keeps it
    assert stamped.time == at(1) and (tmp_path / "lab-checks" / "attention_lab-my_attention-20261201T100100.000000Z"
                                      ".json").is_file()


def test_no_check_is_written_over_another(tmp_path):
    first, again = made(passed=True, time=at(1)), made(passed=False, time=at(1))  # the same file, function, time
    a, b = store.save(first, tmp_path), store.save(again, tmp_path)
    assert a != b and b.name.endswith("-2.json")
    # the starter's attention_by_hand and the learner's own, of the same name in another file
    mine, starter = made("my_loops.py", "attention_by_hand", time=at(2)), made(
        "attention_lab.py", "attention_by_hand", passed=False, given=True, time=at(3))
    store.save(mine, tmp_path)
    store.save(starter, tmp_path)
    kept = store.history(tmp_path)
    assert len(kept) == 4 and len(list((tmp_path / "lab-checks").glob("*.json"))) == 4
    assert mine in kept and starter in kept and first in kept and again in kept


def test_history_is_newest_first_by_the_time_of_the_check(tmp_path):
    assert store.history(tmp_path) == []  # nothing checked yet
    old, new = made("z_file.py", time=at(5)), made("a_file.py", time=at(7))  # the names sort the other way
    yesterday = made("m_file.py", time="2026-11-30T23:59:00.000000+00:00")
    for r in (new, yesterday, old):
        store.save(r, tmp_path)
    assert store.history(tmp_path) == [new, old, yesterday]
    assert [(r.file, r.function, store.passed(r)) for r in store.history(tmp_path)][0] == ("a_file.py",
                                                                                            "my_attention", True)


def test_latest_keeps_the_newest_check_of_each_file_and_function():
    a_fail = made("./a.py", "f", passed=False, time=at(9))  # "./a.py" and "a.py" are one file
    a_pass = made("a.py", "f", time=at(8))
    b = made("b.py", "f", time=at(7))
    a_g = made("a.py", "g", time=at(6))
    assert store.latest([a_fail, a_pass, b, a_g]) == [a_fail, b, a_g]


def test_the_verdict_is_the_exit_codes_own():
    assert store.passed(made())
    assert not store.passed(made(passed=False))
    assert not store.passed(made(err=2e-4))  # every case passed, but it does not match F.sdpa to 1e-4


def test_a_measured_rule_that_did_not_hold_is_not_a_pass_in_the_verdict_the_exit_code_or_next():
    """Level 2's memory measured as T^1.67: "measured, and it did not hold" is printed, and the verdict kept, the
    exit code and the Next line say the same (it was kept passed and sent on to level 3)."""
    from attnlab.lab import levels
    from attnlab.report import exercise

    r = made("lab_matrix.py", "attention_matrix")
    r.level = "matrix"
    r.measured_ok, r.measured_note = levels.find("matrix").module().measured_ok(r)
    assert r.measured_ok and store.passed(r)
    r.exponents["memory"] = 1.67
    r.measured_ok, r.measured_note = levels.find("matrix").module().measured_ok(r)
    said = exercise.lines(r)
    print("\n".join(said))
    assert r.passed and r.measured_ok is False and not store.passed(r)
    assert any("measured, and it did not hold" in line for line in said)
    nxt = said[-1]
    assert nxt.startswith("[bold]Next[/]: the grading passed, but the level is not done: memory grew as T^1.67")
    assert "level 3" not in nxt


def test_a_check_without_a_time_gets_its_files(tmp_path):
    path = store.save(made(), tmp_path)
    data = json.loads(path.read_text())
    del data["time"]  # as an older attnlab wrote it
    path.write_text(json.dumps(data))
    stamp = (datetime.now(UTC) - timedelta(hours=2)).timestamp()
    os.utime(path, (stamp, stamp))
    (r,) = store.history(tmp_path)
    assert abs(store.when(r).timestamp() - stamp) < 1e-3


@pytest.mark.parametrize(("edit", "says"), [
    (lambda d: "{not json", "lab-checks/x.json: JSONDecodeError"),
    (lambda d: json.dumps({**d, "passed": "yes"}), "passed should be true or false, got the string 'yes'"),
    (lambda d: json.dumps({**d, "time": "at ten"}), "time should be an ISO 8601 time, got 'at ten'"),
    (lambda d: json.dumps([d]), "x.json: should be an object, got a list"),
])
def test_a_file_that_is_not_a_check_is_named(tmp_path, edit, says):
    path = store.save(made(), tmp_path)
    bad = path.with_name("x.json")
    bad.write_text(edit(json.loads(path.read_text())))
    with pytest.raises(ValueError) as e:
        store.history(tmp_path)
    assert says in str(e.value) and str(bad) in str(e.value) and "attnlab lab check" in str(e.value)
