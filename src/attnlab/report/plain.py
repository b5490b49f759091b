"""Plain-text tables for a core install (torch alone, no rich): what ``attnlab verify`` prints there.

Only the little of rich's interface that the verify report uses: ``Console.print`` of text or a
table, ``Table.add_column`` / ``add_row``, and rich's markup (``[green]PASS[/]``), which is removed.
"""

from __future__ import annotations

import re
import sys

_TAG = re.compile(r"(?<!\\)\[/?[a-z#@][^\[\]]*\]|(?<!\\)\[/\]")


def escape(text: str) -> str:
    """Protect brackets in text that is not markup (rich's rule: a backslash before a tag-like ``[``)."""
    return re.sub(r"(\\*)(\[[a-z#/@][^\[]*?\])", r"\1\\\2", text)


def strip(text: str) -> str:
    """Markup removed, escaped brackets restored."""
    return _TAG.sub("", text).replace("\\[", "[")


class Table:
    def __init__(self, title: str = "", **_):
        self.title, self.columns, self.right, self.rows = title, [], [], []

    def add_column(self, name: str, justify: str = "left", **_):
        self.columns.append(name)
        self.right.append(justify == "right")

    def add_row(self, *cells):
        self.rows.append([strip(str(c)) for c in cells])

    def lines(self) -> list[str]:
        widths = [max([len(c)] + [len(r[i]) for r in self.rows]) for i, c in enumerate(self.columns)]

        def line(cells):
            return "  ".join(c.rjust(w) if right else c.ljust(w)
                             for c, w, right in zip(cells, widths, self.right, strict=True)).rstrip()

        rule = "  ".join("-" * w for w in widths)
        return ([self.title] if self.title else []) + [line(self.columns), rule] + [line(r) for r in self.rows]


class Console:
    def __init__(self, **_):
        pass

    def print(self, *objects, **_):
        for o in objects:
            print("\n".join(o.lines()) if isinstance(o, Table) else strip(str(o)), file=sys.stdout, flush=True)
