"""A hint's text is written and read in one place (attnlab.judge.hint): a tie's keys, the support mark, a key's
variant, a probe's measured key -- each read back as it was written."""

from attnlab.judge import hint as H


def test_a_hint_reads_back_as_it_was_written():
    for keys, support in ((("gqa",), False), (("flex-block-size", "tail-dropped"), True), (("a+b", "c"), False)):
        text = H.tie(keys, support)
        h = H.Hint.of(text)
        assert (h.keys, h.supporting, str(h)) == (keys, support, text)
        assert H.readings(text) == keys and H.lead(text) == keys[0] and H.tied(text) == (len(keys) > 1)
    assert H.tie([]) == ""


def test_support_is_marked_once_and_kept_through_a_filter():
    assert H.as_support("gqa") == H.as_support(H.as_support("gqa")) == "~gqa"
    assert H.supporting("~gqa|window") and not H.supporting("gqa|window")
    assert H.Hint.of("~gqa|window").kept(lambda k: k != "gqa") == H.Hint(("window",), True)
    assert H.Hint.of("gqa|window").kept(lambda k: False) is None


def test_a_row_holds_its_hints_as_data_and_json_writes_their_fields():
    from attnlab.judge.judge import Row

    row = Row("f", "case", "float32", "fail", hints=["~gqa|window", "dead-rows=nan"])
    assert row.hints == [H.Hint(("gqa", "window"), True), H.Hint(("dead-rows=nan",))]
    assert row.hints[0].names("window") and not row.hints[0].only("gqa") and row.hints[1].has_variant
    d = row.to_dict()
    assert d["hints"] == [{"keys": ["gqa", "window"], "supporting": True},
                          {"keys": ["dead-rows=nan"], "supporting": False}], d["hints"]
    assert Row.from_dict(d).hints == row.hints
    d["hints"] = ["~gqa|window", "dead-rows=nan"]  # a result written when rows held the text
    assert Row.from_dict(d).hints == row.hints


def test_a_hint_is_never_taken_for_its_text():
    import pytest

    h = H.Hint(("max-subtraction",))
    with pytest.raises(TypeError, match="compare its keys"):
        _ = h == "max-subtraction"
    with pytest.raises(TypeError):
        _ = "=" in h


def test_variants_and_measured_keys_are_told_apart_from_causes():
    assert (H.base("dead-rows=nan"), H.variant("dead-rows=nan"), H.has_variant("dead-rows=nan")) == \
        ("dead-rows", "nan", True)
    assert (H.base("gqa"), H.variant("gqa"), H.has_variant("gqa")) == ("gqa", "", False)
    assert H.measured("measured:bias") and not H.measured("gqa")
