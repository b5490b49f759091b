"""`attnlab lesson --model`: the page of a pretrained model's heads, on a tiny random model and a tokenizer trained
here, offline; its "it -> animal" head checked against a measurement of our own on transformers' eager attention."""

import json
import re

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import transformers as T  # noqa: E402

from attnlab.lesson import heads  # noqa: E402
from attnlab.lesson.walkthrough import SENTENCE  # noqa: E402
from tests.helpers import cli  # noqa: E402

from . import tiny  # noqa: E402

OTHER = tiny.TEXT


def _eager(model_dir, text):
    """Tokens and (layers, H, T, T) weights from transformers' own eager attention, nothing of attnlab's."""
    tok = T.AutoTokenizer.from_pretrained(model_dir)
    model = T.AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager").eval()
    enc = tok(text, return_offsets_mapping=True, return_tensors="pt")
    with torch.no_grad():
        att = model(input_ids=enc["input_ids"], output_attentions=True).attentions
    return [tuple(s) for s in enc["offset_mapping"][0].tolist()], torch.stack([a[0] for a in att]).double()


@pytest.mark.slow
def test_page_and_json_hold_the_models_tokens_and_heads(model_lesson):
    r, out, _ = model_lesson
    assert r.returncode == 0, r.stderr
    page, js = out / "lesson-tiny-llama.html", out / "lesson-tiny-llama.json"
    assert page.exists() and js.exists(), r.stdout
    assert "wrote" in r.stdout and "most weight from 'it' on 'animal': layer" in r.stdout
    html = page.read_text()
    data = json.loads(js.read_text())
    assert [t["heads"]["text"] for t in data["texts"]] == [SENTENCE, OTHER]
    for t in data["texts"]:
        toks = t["heads"]["tokens"]
        assert "".join(toks) == t["heads"]["text"].replace(" ", "")  # the tokens cover the text, in pieces
        assert json.dumps(toks, separators=(",", ":")) in html  # the page carries the model's own tokens ...
        for layer in t["stats"]:  # ... and every head's statistics and label
            for s in layer:
                assert json.dumps(s["label"]).replace("</", "<\\/") in html
    assert len(data["texts"][0]["heads"]["key_tokens"]) >= 2  # "animal" in word pieces
    assert data["texts"][1]["heads"]["best_layer"] is None  # no "animal" in the second text: nothing claimed
    assert "computed when the page\n    was built" in html and "tiny-llama" in html
    assert "http://" not in html and "https://" not in html


@pytest.mark.slow
def test_it_animal_head_equals_an_independent_measurement(model_lesson):
    r, out, model_dir = model_lesson
    assert r.returncode == 0, r.stderr
    data = json.loads((out / "lesson-tiny-llama.json").read_text())
    first = data["texts"][0]
    spans, att = _eager(model_dir, SENTENCE)
    a_lo = SENTENCE.index("animal")
    i_lo = re.search(r"\bit\b", SENTENCE).start()
    key = [j for j, (a, b) in enumerate(spans) if a < a_lo + 6 and b > a_lo]
    query = [j for j, (a, b) in enumerate(spans) if a < i_lo + 2 and b > i_lo][-1]
    listens = att[:, :, query][..., key].sum(-1)  # (layers, H)
    layer, head = divmod(int(listens.argmax()), listens.shape[1])
    h = first["heads"]
    diff = (torch.tensor(h["listens"]) - listens).abs().max().item()
    print(f"it -> animal: page says layer {h['best_layer']} head {h['best_head']} {h['best_weight']:.4f}; eager says "
          f"layer {layer} head {head} {float(listens[layer, head]):.4f}; max |listens diff| {diff:.1e}")
    assert (h["best_layer"], h["best_head"]) == (layer, head)
    assert (h["query_token"], h["key_tokens"]) == (query, key)
    assert abs(h["best_weight"] - float(listens[layer, head])) < 1e-3 and diff < 1e-3
    worst = 0.0  # the statistics on the page against head_stats on the eager weights
    pairs = enumerate(zip(h["tokens"], spans, strict=True))
    tokens = [(" " if i and a > spans[i - 1][1] else "") + t for i, (t, (a, _)) in pairs]  # where words start
    assert tokens == first["marked"]
    for li, layer_stats in enumerate(first["stats"]):
        for hi, s in enumerate(layer_stats):
            ref = heads.head_stats(tokens, att[li, hi], query, li, hi)
            assert (s["pattern"], s["word"]) == (ref.pattern, ref.word)
            worst = max(worst, *(abs(s[k] - getattr(ref, k)) for k in ("previous", "same", "first", "entropy")))
    print(f"head statistics against eager weights: max diff {worst:.1e}")
    assert worst < 1e-3


@pytest.mark.slow
def test_bad_input_is_one_line_and_exit_2(tmp_path, model_lesson, capsys):
    from attnlab.cli import main

    model_dir = model_lesson[2]
    empty = tmp_path / "empty"
    empty.mkdir()
    t5 = tmp_path / "t5"  # an encoder-decoder: not a causal LM
    T.T5ForConditionalGeneration(T.T5Config(vocab_size=64, d_model=16, d_kv=4, d_ff=16, num_layers=1,
                                            num_heads=2)).save_pretrained(t5)
    tiny.tokenizer().save_pretrained(t5)
    cases = [(["--model", str(empty)], "is not a saved model"),
             (["--model", str(tmp_path / "nope")], "no such folder"),
             (["--model", str(t5)], "is not a causal language model (its type, 't5'"),
             (["--model", str(model_dir), "--text", "   "], "--text"),
             (["--model", str(model_dir), "--text", "\u0301"], "to no tokens"),
             (["--text", "a cat"], "--text goes with --model")]
    said = []
    for args, says in cases:  # in this process: each a fraction of a second, no interpreter to start
        capsys.readouterr()
        code = main(["lesson", *args, "--out", str(tmp_path / "out")])
        err = capsys.readouterr().err
        said.append(err.strip())
        assert code == 2 and len(err.strip().splitlines()) == 1, (args, err)
        assert says in err and err.startswith("attnlab lesson: error:")
    print("", *said, sep="\n")  # captured: shown with the test's report when it fails (or under -s)
    blocker = tmp_path / "blocker"  # a transformers that cannot be imported, in a process of its own
    blocker.mkdir()
    (blocker / "transformers.py").write_text("raise ImportError('No module named transformers')\n")
    r = cli("lesson", "--model", model_dir, "--out", tmp_path / "out", env={"PYTHONPATH": str(blocker)})
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "attnlab lesson: error: transformers is not installed (No module named transformers); install it with "
        "pip install 'attnlab[hf]'"], r.stderr

def test_words_start_after_a_dropped_space_or_a_special_token():
    from attnlab.lesson.pretrained import marked

    text = "the animal ran"  # "<s>" as Llama's tokenizer adds it (an empty span), GPT-2-like offsets without spaces
    tokens, spans = ["<s>", "the", "an", "imal", "ran"], [(0, 0), (0, 3), (4, 6), (6, 10), (11, 14)]
    assert [text[a:b] for a, b in spans[1:]] == tokens[1:]
    m = marked(tokens, spans)
    assert m == ["<s>", " the", " an", "imal", " ran"]
    assert heads.words(m)[1] == ["<s>", "the", "animal", "ran"]
    assert marked([" it", "Ġwas"], [(0, 3), (4, 7)]) == [" it", "Ġwas"]  # a mark of its own is kept as it is
