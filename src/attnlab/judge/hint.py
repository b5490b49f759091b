"""A failing row's hints: what a reading of its rows found, and the one place their text is written and read.

A hint is one reading of a failing case (:attr:`attnlab.judge.judge.Row.hints`): the keys of the wrong semantics (or
precision models, or probe measurements) whose answer the function gave, and how the case holds them --

* several keys that explain exactly the same rows alike are a **tie** (the first leads; the function's other cases
  settle it), written ``a|b``;
* a reading met only on rows its answer leaves with no key **supports** a cause other cases name and names nothing
  alone, written ``~a``;
* a key may carry its **variant** (``dead-rows=nan``, a packing end's ``varlen-keys-late=wrap``): the same cause's
  line, said of one of its forms; and a probe's measured difference is a key of its own kind (``measured:bias``).

Rows keep their hints as this text so that they travel as JSON and print as they are; :class:`Hint` is the same
reading as data, and every module that takes a hint apart or builds one does it with the functions here."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

TIE = "|"  # joins the keys of readings that explain exactly the same rows of a case
SUPPORT = "~"  # marks a hint that only joins a cause other cases name (rows that cannot tell readings apart)
VARIANT = "="  # a key's variant: key=variant
MEASURED = "measured:"  # a probe's measured difference: measured:<kind>


@dataclass(frozen=True)
class Hint:
    """One reading of a failing case's rows: its keys (a tie where there are several, the first leading) and whether
    it only supports a cause other cases name."""

    keys: tuple[str, ...]
    supporting: bool = False

    @classmethod
    def of(cls, text: str) -> Hint:
        mark = text.startswith(SUPPORT)
        return cls(tuple(text[len(SUPPORT) if mark else 0:].split(TIE)), mark)

    def __str__(self) -> str:
        return (SUPPORT if self.supporting else "") + TIE.join(self.keys)

    @property
    def lead(self) -> str:
        return self.keys[0]

    @property
    def tied(self) -> bool:
        return len(self.keys) > 1


def readings(hint: str) -> tuple[str, ...]:
    """The keys a hint holds (one, or a tie's), without its support mark."""
    return Hint.of(hint).keys


def lead(hint: str) -> str:
    """The key a hint puts first."""
    return Hint.of(hint).lead


def tied(hint: str) -> bool:
    return Hint.of(hint).tied


def supporting(hint: str) -> bool:
    return Hint.of(hint).supporting


def tie(keys: Iterable[str], support: bool = False) -> str:
    """The hint of these keys, in order: a tie where there are several; "" where there are none."""
    keys = tuple(keys)
    return str(Hint(keys, support)) if keys else ""


def as_support(hint: str) -> str:
    """The hint, marked as one that only supports what other cases name."""
    return hint if supporting(hint) else SUPPORT + hint


def kept(hint: str, keep) -> str:
    """The hint with only the readings ``keep(key)`` holds, its support mark kept; "" where none is left."""
    h = Hint.of(hint)
    return tie((k for k in h.keys if keep(k)), h.supporting)


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
