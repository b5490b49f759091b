"""A pretrained model's heads on the lesson sentence: a tiny random model and a tokenizer trained here, offline."""

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from attnlab.lesson import hf_heads  # noqa: E402
from attnlab.results import write_json  # noqa: E402

from . import tiny  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny.with_tokenizer(tmp_path_factory.mktemp("heads-model"))


@pytest.mark.slow
def test_heads_on_the_lesson_sentence_found_by_measurement(model_dir, tmp_path, round_trip):
    r = hf_heads.model_heads(str(model_dir))
    print("tokens:", r.tokens, "| it ->", r.tokens[r.query_token], "| animal ->", [r.tokens[i] for i in r.key_tokens])
    print(f"most weight from 'it' on 'animal': layer {r.best_layer} head {r.best_head}: {r.best_weight:.3f}")
    assert "".join(t for t in r.tokens if t.strip()) == r.text.replace(" ", "")  # the tokens cover the text
    assert len(r.key_tokens) >= 2 and "".join(r.tokens[i] for i in r.key_tokens) == "animal"  # sub-words
    assert r.tokens[r.query_token] == "it"
    # the number is the weight itself: recompute it with transformers' own eager attention
    eager = hf_heads.model_heads(str(model_dir), impl="eager")
    w = torch.tensor(eager.weights[r.best_layer][r.best_head])  # (T, T)
    assert abs(float(w[r.query_token, r.key_tokens].sum()) - r.best_weight) < 1e-3
    assert (eager.best_layer, eager.best_head) == (r.best_layer, r.best_head)
    listens = torch.tensor(r.listens)
    assert r.best_weight == pytest.approx(float(listens.max()))
    for layer in r.weights:  # causal rows of weights: each sums to 1 and never looks ahead
        for head in layer:
            a = torch.tensor(head)
            assert torch.allclose(a.sum(-1), torch.ones(len(a)), atol=1e-3) and float(a.triu(1).abs().max()) == 0
    assert len(r.entropy) == 2 and len(r.entropy[0]) == 4 and all(0 < p <= 1 for row in r.peak for p in row)
    assert write_json(r, tmp_path / "heads.json").stat().st_size > 1000
    round_trip(r)


def test_any_text_and_missing_words(model_dir):
    r = hf_heads.model_heads(str(model_dir), "the dog saw the cat and it ran", query_word="it", key_word="dog")
    assert r.tokens[r.query_token] == "it" and "".join(r.tokens[i] for i in r.key_tokens) == "dog"
    with pytest.raises(hf_heads.WordNotFound, match="'animal' is not a word of the text"):
        hf_heads.model_heads(str(model_dir), "no such word here")
    with pytest.raises(ValueError, match="impl must be 'matrix' or 'eager'"):
        hf_heads.model_heads(str(model_dir), impl="flash")
