"""Results are data: every experiment's result serialises to JSON with the machine and versions, and reads back.

A result dataclass inherits :class:`Result`: ``r.to_dict()`` is what ``write_json`` writes, and
``type(r).from_dict(d)`` rebuilds the same object from it, field by field against the class's
annotations (nested results, tuples that JSON wrote as lists, dict keys it wrote as strings, None).
A value that does not fit raises :class:`BadField` naming the field's path, such as
``results[3].seq should be an integer, got the string 'x'``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from pathlib import Path

import torch

from attnlab.results.host import machine, versions  # noqa: F401 -- every result carries them


def _clean(x):
    """Make a value JSON-safe: tuples -> lists, NaN/inf -> None, tensors -> lists."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _clean(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    if isinstance(x, torch.Tensor):
        return _clean(x.detach().cpu().tolist())
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if hasattr(x, "item") and callable(x.item):  # numpy scalars
        return _clean(x.item())
    return x


def to_dict(result) -> dict:
    return _clean(result)


class BadField(ValueError):
    """A JSON value that does not fit the result field it is read into; the message names the field."""


_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "an object",
          list: "a list"}


def _json_type(v) -> str:
    return {dict: "an object", list: "a list", str: f"the string {v!r}"[:60], bool: str(v).lower(),
            type(None): "null"}.get(type(v), repr(v)[:40])


def _fail(where: str, want: str, got) -> BadField:
    return BadField(f"{where} should be {want}, got {_json_type(got)}")


def convert(tp, value, where: str = ""):
    """``value`` (parsed JSON) as type ``tp``; BadField naming ``where`` when it does not fit."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return _union(args, value, where)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, str) and hasattr(tp, "from_text"):  # a value a result once wrote as its text
            return tp.from_text(value)
        return _dataclass(tp, value, where)
    if origin in (list, tuple) or tp in (list, tuple):
        return _sequence(tp, origin or tp, args, value, where)
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise _fail(where, "an object", value)
        if not args:
            return value
        return {_key(args[0], k, f"{where}.{k}"): convert(args[1], x, f"{where}.{k}") for k, x in value.items()}
    return _scalar(tp, value, where)


def _union(args, value, where: str):
    if value is None and type(None) in args:
        return None
    rest = [a for a in args if a is not type(None)]
    for a in rest[:-1]:
        try:
            return convert(a, value, where)
        except BadField:
            pass
    return convert(rest[-1], value, where)


def _dataclass(tp, value, where: str):
    if not isinstance(value, dict):
        raise _fail(where, "an object", value)
    hints = typing.get_type_hints(tp)
    kw = {}
    for f in dataclasses.fields(tp):
        sub = f"{where}.{f.name}" if where else f.name
        if f.name in value:
            kw[f.name] = convert(hints[f.name], value[f.name], sub)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise BadField(f"{sub} is missing")
    return tp(**kw)


def _sequence(tp, kind, args, value, where: str):
    """A list, or a tuple that JSON wrote as a list: ``tuple[int, ...]`` or fixed ``tuple[int, int]``."""
    if not isinstance(value, list | tuple):
        raise _fail(where, "a list", value)
    if not args:
        out = list(value)
    elif kind is list or (len(args) == 2 and args[1] is Ellipsis):
        out = [convert(args[0], x, f"{where}[{i}]") for i, x in enumerate(value)]
    elif len(value) != len(args):
        raise _fail(where, f"a list of {len(args)}", value)
    else:
        out = [convert(a, x, f"{where}[{i}]") for i, (a, x) in enumerate(zip(args, value, strict=True))]
    return out if kind is list else tuple(out)


def _key(tp, key: str, where: str):
    """A dict key: JSON writes every key as a string, so a number key is read back as the number it was."""
    if tp in (int, float) and isinstance(key, str):
        try:
            return tp(key)
        except ValueError:
            raise BadField(f"{where}: the key should be {_NAMES[tp]}") from None
    return convert(tp, key, where)


def _scalar(tp, value, where: str):
    """Numbers, strings and booleans (NaN and infinity were written as null)."""
    if tp is float:
        if value is None:
            return math.nan
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _fail(where, "a number", value)
        return float(value)
    if tp is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise _fail(where, "an integer", value)
    if tp in (str, bool) and not isinstance(value, tp):
        raise _fail(where, _NAMES[tp], value)
    return value


class Result:
    """What every result dataclass inherits: ``to_dict()`` for JSON, ``from_dict(d)`` to rebuild it."""

    def to_dict(self) -> dict:
        return to_dict(self)

    @classmethod
    def from_dict(cls, d: dict):
        """The result ``d`` (as ``to_dict`` or ``write_json`` wrote it) describes; BadField names a wrong field."""
        return convert(cls, d, "")


def write_json(result, path: str | Path) -> Path:
    """Write ``result`` as JSON to ``path`` (whole or not at all: :func:`attnlab.results.files.write_text`)."""
    from attnlab.results.files import write_text

    return write_text(path, json.dumps(to_dict(result), indent=2) + "\n")
