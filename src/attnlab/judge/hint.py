"""A failing row's hints: what a reading of its rows found, and the one place their text is written and read.

A hint is one reading of a failing case (:attr:`attnlab.judge.judge.Row.hints`): the keys of the wrong semantics (or
precision models, or probe measurements) whose answer the function gave, and how the case holds them --

* several keys that explain exactly the same rows alike are a **tie** (the first leads; the function's other cases
  settle it), written ``a|b``;
* a reading met only on rows its answer leaves with no key **supports** a cause other cases name and names nothing
  alone, written ``~a``;
* a key may carry its **variant** (``dead-rows=nan``, a packing end's ``varlen-keys-late=wrap``): the same cause's
  line, said of one of its forms; and a probe's measured difference is a key of its own kind (``measured:bias``).

The readings that find hints write them as this text, through :func:`tie` and :func:`as_support`; a row holds them
as :class:`Hint`, data that JSON writes field by field, and the diagnoses read their fields, never the text."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

TIE = "|"  # joins the keys of readings that explain exactly the same rows of a case
SUPPORT = "~"  # marks a hint that only joins a cause other cases name (rows that cannot tell readings apart)
VARIANT = "="  # a key's variant: key=variant
MEASURED = "measured:"  # a probe's measured difference: measured:<kind>


@dataclass(frozen=True, eq=False)
class Hint:
    """One reading of a failing case's rows: its keys (a tie where there are several, the first leading) and whether
    it only supports a cause other cases name. A row (:attr:`attnlab.judge.judge.Row.hints`) holds these, and JSON
    writes them as their fields; the text form (``a|b``, ``~a``) is what the readings that find them write, through
    :func:`tie` and :func:`as_support`, read back by :meth:`of` where a row is made. A hint is never equal to text:
    ask for its keys (``h.names(key)``, ``h.lead``)."""

    keys: tuple[str, ...]
    supporting: bool = False

    @classmethod
    def of(cls, text: str) -> Hint:
        mark = text.startswith(SUPPORT)
        return cls(tuple(text[len(SUPPORT) if mark else 0:].split(TIE)), mark)

    from_text = of  # what a result's JSON reader calls for a hint written as text (attnlab.results.convert)

    def __post_init__(self):
        object.__setattr__(self, "keys", tuple(self.keys))  # (JSON reads a list)

    def __str__(self) -> str:
        return (SUPPORT if self.supporting else "") + TIE.join(self.keys)

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            raise TypeError(f"a Hint compared with the text {other!r}: compare its keys (names, lead)")
        return isinstance(other, Hint) and (self.keys, self.supporting) == (other.keys, other.supporting)

    def __hash__(self) -> int:
        return hash((self.keys, self.supporting))

    @property
    def lead(self) -> str:
        return self.keys[0]

    @property
    def tied(self) -> bool:
        return len(self.keys) > 1

    def names(self, key: str) -> bool:
        """Whether ``key`` is one of its readings."""
        return key in self.keys

    def only(self, key: str) -> bool:
        """Whether it is the one reading ``key``, said on its own (no tie, no support mark)."""
        return self.keys == (key,) and not self.supporting

    @property
    def has_variant(self) -> bool:
        """Whether a reading carries its variant (``dead-rows=nan``)."""
        return any(has_variant(k) for k in self.keys)

    @property
    def measured(self) -> bool:
        """Whether its lead is a probe's measured difference."""
        return measured(self.lead)

    def kept(self, keep) -> Hint | None:
        """The hint with only the readings ``keep(key)`` holds, its support mark kept; None where none is left."""
        keys = tuple(k for k in self.keys if keep(k))
        return Hint(keys, self.supporting) if keys else None

    def as_support(self) -> Hint:
        return Hint(self.keys, True)


def hint(h: Hint | str) -> Hint:
    """A hint as data, from a hint or its text."""
    return h if isinstance(h, Hint) else Hint.of(h)


def readings(h: Hint | str) -> tuple[str, ...]:
    """The keys a hint holds (one, or a tie's), without its support mark."""
    return hint(h).keys


def lead(h: Hint | str) -> str:
    """The key a hint puts first."""
    return hint(h).lead


def tied(h: Hint | str) -> bool:
    return hint(h).tied


def supporting(h: Hint | str) -> bool:
    return hint(h).supporting


def tie(keys: Iterable[str], support: bool = False) -> str:
    """The text of the hint of these keys, in order: a tie where there are several; "" where there are none (what
    the readings that find hints write)."""
    keys = tuple(keys)
    return str(Hint(keys, support)) if keys else ""


def as_support(text: str) -> str:
    """A hint's text, marked as one that only supports what other cases name."""
    return text if supporting(text) else SUPPORT + text


def base(key: str) -> str:
    """A key without its variant."""
    return key.split(VARIANT)[0]


def has_variant(key: str) -> bool:
    return VARIANT in key


def variant(key: str) -> str:
    """A key's variant ("" where it has none): dead-rows=nan -> nan."""
    return key.split(VARIANT, 1)[1] if VARIANT in key else ""


def measured(key: str) -> bool:
    """A probe's measured difference, not a cause's key."""
    return key.startswith(MEASURED)
