"""Hugging Face models that cannot be used as asked: a hub name that is not in the cache on a machine that cannot
reach the hub (one line at once, no minute of retries), a folder without a tokenizer, and a text longer than the
model reads (measured on its beginning, and said so)."""

import json
import time

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from attnlab.cli import main  # noqa: E402
from attnlab.lesson import hf_heads  # noqa: E402

from . import tiny  # noqa: E402

MISSING = "attnlab-tests/no-such-model"  # a hub name no cache holds


@pytest.fixture
def no_hub(monkeypatch, tmp_path):
    """A hub that refuses connections (a closed port on this machine) and an empty cache."""
    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.delenv(v, raising=False)


@pytest.mark.parametrize("command", [["verify", "--impl", "matrix"], ["lesson"]])
def test_a_hub_name_not_in_the_cache_fails_at_once_without_a_hub(no_hub, tmp_path, capsys, command):
    t0 = time.monotonic()
    assert main([*command, "--model", MISSING, "--out" if command[0] == "lesson" else "--seed",
                 str(tmp_path / "out") if command[0] == "lesson" else "0"]) == 2
    seconds = time.monotonic() - t0
    err = capsys.readouterr().err
    print(err, f"{seconds:.1f} s")
    assert len(err.strip().splitlines()) == 1 and "Retrying" not in err
    assert f"{MISSING} is not in the local Hugging Face cache" in err
    assert "the hub cannot be reached (127.0.0.1:9: Connection refused)" in err
    assert seconds < 60  # transformers' own retries took 30 s before it said anything


def test_a_folder_without_a_tokenizer_says_so(tmp_path, capsys):
    model = tiny.build("llama", tmp_path)
    capsys.readouterr()  # saving the model can draw transformers' progress bar (until a command turns bars off)
    assert main(["lesson", "--model", str(model), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attnlab lesson: error: {model} has no tokenizer (none of tokenizer.json, ")
    assert "tokenizer.save_pretrained(folder)" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_text_longer_than_the_model_reads_is_measured_on_its_beginning(tmp_path, capsys):
    import transformers as T

    model = tiny.with_tokenizer(tmp_path / "tiny-llama")
    limit = hf_heads.token_limit(T.AutoConfig.from_pretrained(model))
    assert limit == hf_heads.MAX_TOKENS and hf_heads.token_limit(tiny.config("llama")) == 128  # the model's own
    long = " ".join(["the cat sat on the mat because it was tired"] * 500)  # 5000 words
    assert main(["lesson", "--model", str(model), "--text", long, "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert f"the text has more tokens than {limit}, the most measured with this model: measured on its first" in out
    page = json.loads((tmp_path / "out" / "lesson-tiny-llama.json").read_text())
    measured = page["texts"][1]["heads"]
    print(len(measured["text"]), "characters,", len(measured["tokens"]), "tokens")
    assert long.startswith(measured["text"]) and len(measured["text"]) < len(long)
    assert limit - 2 <= len(measured["tokens"]) <= limit
    assert len(measured["weights"][0][0]) == len(measured["tokens"])
