"""One way to write a time, a size, an error and a count in every table and page."""

from attnlab.report import fmt
from attnlab.report.lesson import numbers


def test_times():
    assert [fmt.fmt_time(s) for s in (None, 2.1, 0.0123, 2e-5)] == ["-", "2.1 s", "12.3 ms", "20 µs"]
    assert numbers.fmt_time is fmt.fmt_time  # the lesson writes times as the tables do


def test_bytes_memory_and_mib():
    assert fmt.fmt_bytes(512) == "512 B" and fmt.fmt_bytes(1536) == "1.5 KiB" and fmt.fmt_bytes(3 * 2**30) == "3.0 GiB"
    assert fmt.fmt_memory(None, 100) == "n/a"
    assert fmt.fmt_memory(10, 2**20) == "< 1.0 MiB (floor)"
    assert fmt.fmt_memory(5 * 2**20, 2**20) == "5.0 MiB"
    assert fmt.fmt_mib(None) == "-" and fmt.fmt_mib(3 * 2**19) == "1.5 MiB"


def test_errors_and_counts():
    assert fmt.fmt_err(None) == "-" and fmt.fmt_err(1.234e-7) == "1.23e-07"
    assert [fmt.fmt_count(n) for n in (999, 12_345, 1_500_000)] == ["999", "12.3k", "1.50M"]


def test_an_estimate_is_rounded_as_one_and_a_short_one_to_the_second():
    from attnlab.report.fmt import fmt_estimate

    said = {s: fmt_estimate(s) for s in (0.2, 1.4, 1.6, 7.0, 9.6, 42.0, 88.0, 95.0, 200.0, 7200.0)}
    assert said == {0.2: "about 1 s", 1.4: "about 1 s", 1.6: "about 2 s", 7.0: "about 7 s", 9.6: "about 10 s",
                    42.0: "about 40 s", 88.0: "about 90 s", 95.0: "about 2 min", 200.0: "about 3 min",
                    7200.0: "about 2.0 h"}
