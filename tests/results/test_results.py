"""Results read back through their classes: ``from_dict(to_dict(r)) == r``, and a wrong field is named."""

import json
import math
from dataclasses import dataclass, field

import pytest

from attnlab import demo
from attnlab.distributed import budget as ring_budget
from attnlab.distributed.ring import RingConfig
from attnlab.results import BadField, Result, write_json


@dataclass
class Inner(Result):
    name: str
    err: float


@dataclass
class Outer(Result):
    lengths: tuple[int, ...]
    span: tuple[int, int]
    by_width: dict[int, list[float]]
    inner: list[Inner]
    best: Inner | None = None
    note: str | None = None
    extra: dict = field(default_factory=dict)


def test_tuples_number_keys_nested_results_and_none_come_back(tmp_path, round_trip):
    r = Outer((16, 32), (3, 5), {64: [0.5, 0.25], 256: [0.125]}, [Inner("out", 1e-7), Inner("dq", 2.5)],
              best=Inner("out", 1e-7), extra={"a": [1, 2]})
    back = round_trip(r)
    assert back.lengths == (16, 32) and back.span == (3, 5) and list(back.by_width) == [64, 256]
    assert back.note is None and isinstance(back.best, Inner)
    data = json.loads(write_json(r, tmp_path / "r.json").read_text())
    assert data["by_width"] == {"64": [0.5, 0.25], "256": [0.125]} and Outer.from_dict(data) == r


def test_non_finite_numbers_are_written_as_null_and_read_as_nan():
    data = Inner("out", math.inf).to_dict()
    assert data == {"name": "out", "err": None} and math.isnan(Inner.from_dict(data).err)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.pop("span"), "span is missing"),
    (lambda d: d.update(span=[1, 2, 3]), "span should be a list of 2, got a list"),
    (lambda d: d.update(lengths="16"), "lengths should be a list, got the string '16'"),
    (lambda d: d["inner"][1].update(err="big"), "inner[1].err should be a number, got the string 'big'"),
    (lambda d: d["inner"][0].pop("name"), "inner[0].name is missing"),
    (lambda d: d.update(by_width={"wide": [1.0]}), "by_width.wide: the key should be an integer"),
    (lambda d: d.update(lengths=[16, True]), "lengths[1] should be an integer, got true"),
])
def test_a_wrong_field_is_named_with_its_path(edit, message):
    data = Outer((16, 32), (3, 5), {64: [0.5]}, [Inner("out", 1.0), Inner("dq", 2.0)]).to_dict()
    edit(data)
    with pytest.raises(BadField) as e:
        Outer.from_dict(data)
    assert str(e.value) == message and isinstance(e.value, ValueError)


def test_demo_and_the_ring_estimate_round_trip(round_trip):
    r = round_trip(demo.run(seed=0, T=8, d=16, map_T=6, scale_T=16))
    assert isinstance(r.checks[0], demo.Check) and r.checks[0].ok
    est = ring_budget.estimate(RingConfig(world=2, seq=64), rate=1e9, rate64=1e8)
    assert round_trip(est).peak_bytes == est.peak_bytes > 0
