"""masks.from_spec: the names the command line and configs use for mask functions."""

import pytest
import torch

from attnlab import masks


@pytest.mark.parametrize("spec, built", [
    ("causal", masks.causal()),
    ("causal_lower_right", masks.causal_lower_right()),
    ("sliding_window:3", masks.sliding_window(3)),
    ("prefix_lm:0", masks.prefix_lm(0)),
    ("prefix_lm:4", masks.prefix_lm(4)),
    ("document:3", masks.document(torch.arange(12) * 3 // 12)),
])
def test_a_spec_is_the_mask_its_function_builds(spec, built):
    m = masks.from_spec(spec, 12)
    assert m.name == built.name
    assert torch.equal(m.dense(1, 1, 12, 12), built.dense(1, 1, 12, 12))


@pytest.mark.parametrize("name", ["sliding_window", "prefix_lm"])
def test_the_number_in_the_spec_round_trips_through_the_name(name):
    for n in (1, 5, 512):
        assert masks.from_spec(f"{name}:{n}").name == f"{name}({n})"


@pytest.mark.parametrize("spec", ["", "nonsense", "causal:3", "sliding_window", "sliding_window:0",
                                  "sliding_window:-2", "sliding_window:2.5", "sliding_window:²", "document:0",
                                  "prefix_lm:x", "Causal"])
def test_a_bad_spec_names_itself_and_the_known_names(spec):
    with pytest.raises(ValueError) as e:
        masks.from_spec(spec, 8)
    text = str(e.value)
    assert text.startswith(f"unknown mask {spec!r}; choose from ")
    assert all(name in text for name in masks.SPECS)


def test_document_needs_the_length():
    with pytest.raises(ValueError, match=r"mask 'document:2' needs the sequence length"):
        masks.from_spec("document:2")


def test_a_spec_is_a_string():
    with pytest.raises(TypeError, match="a mask spec is a string"):
        masks.from_spec(3)
