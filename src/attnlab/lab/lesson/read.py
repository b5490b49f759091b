"""Reading a command's JSON back through its result class, so a wrong file is named with the wrong field.

``attnlab lesson`` reads what ``demo``, ``bench`` and ``train`` wrote. A file from another version,
edited by hand or cut short should not surface as a KeyError deep inside the page builder: each
field is checked against the result dataclass's annotations, and the first that does not fit is
reported as ``bench.json: results[3].seq should be an integer, got "x"``.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path

_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "an object",
          list: "a list"}


class BadField(ValueError):
    pass


def _json_type(v) -> str:
    return {dict: "an object", list: "a list", str: f"the string {v!r}"[:60], bool: str(v).lower(),
            type(None): "null"}.get(type(v), repr(v)[:40])


def _fail(where: str, want: str, got) -> BadField:
    return BadField(f"{where} should be {want}, got {_json_type(got)}")


def convert(tp, value, where: str):
    """``value`` (parsed JSON) as type ``tp``; BadField naming ``where`` when it does not fit."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        for a in rest[:-1]:
            try:
                return convert(a, value, where)
            except BadField:
                pass
        return convert(rest[-1], value, where)
    if dataclasses.is_dataclass(tp):
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
    if origin is list or tp is list:
        if not isinstance(value, list):
            raise _fail(where, "a list", value)
        return [convert(args[0], x, f"{where}[{i}]") for i, x in enumerate(value)] if args else value
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise _fail(where, "an object", value)
        return {k: convert(args[1], x, f"{where}.{k}") for k, x in value.items()} if args else value
    if tp is float:
        if value is None:  # results write NaN and infinity as null
            return math.nan
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _fail(where, "a number", value)
        return float(value)
    if tp is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise _fail(where, "an integer", value)
    if tp in (str, bool) and not isinstance(value, tp):
        raise _fail(where, _NAMES[tp], value)
    return value


def result(cls, data, path: Path, command: str):
    """``data`` read from ``path`` as a ``cls``; ValueError naming the file, the field and the command to rerun."""
    try:
        return convert(cls, data, "")
    except BadField as e:
        raise ValueError(f"{path}: {e}, so it is not a result of `{command}`; run it again or remove the "
                         "file") from None
