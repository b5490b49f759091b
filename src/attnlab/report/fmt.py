"""Numbers for people: times, bytes, errors and counts, written the same way in every table and page.

``fmt_bytes`` lives in :mod:`attnlab.measure.bench`, whose skip messages need it (the lab cannot import
the report); it is re-exported here so that the report has one place to format from.
"""

from __future__ import annotations

from attnlab.measure.bench import fmt_bytes

__all__ = ["fmt_bytes", "fmt_count", "fmt_err", "fmt_estimate", "fmt_memory", "fmt_mib", "fmt_time"]


def fmt_time(s: float | None) -> str:
    """Seconds with three significant digits in s, ms or µs: '12.3 ms'; '-' for None."""
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} µs"


def fmt_err(x: float | None) -> str:
    """An error against the oracle: '1.23e-07'; '-' for None."""
    return "-" if x is None else f"{x:.2e}"


def fmt_memory(n: int | None, floor: int | None) -> str:
    """A measured peak: its size, or '< floor (floor)' below the noise floor, or 'n/a' when unmeasured."""
    if n is None:
        return "n/a"
    if floor is not None and n < floor:
        return f"< {fmt_bytes(floor)} (floor)"
    return fmt_bytes(n)


def fmt_mib(b: int | None) -> str:
    """Bytes in MiB with one decimal: '12.5 MiB'; '-' for None."""
    return "-" if b is None else f"{b / 2**20:.1f} MiB"


def fmt_count(n: int) -> str:
    """A count in thousands or millions: '1.50M', '12.3k', '999'."""
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


def fmt_estimate(seconds: float) -> str:
    """A duration said as an estimate, rounded as one: 'about 2 s', 'about 40 s', 'about 3 min', 'about 1.5 h'.
    Under 10 s to the second (a 1.5 s step said 'about 5 s' would be off by more than the estimate is)."""
    if seconds < 9.5:
        return f"about {max(1, round(seconds)):.0f} s"
    if seconds < 90:
        return f"about {round(seconds / 5) * 5:.0f} s"
    return f"about {seconds / 60:.0f} min" if seconds < 5400 else f"about {seconds / 3600:.1f} h"
