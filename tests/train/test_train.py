"""Training: the loss falls, resuming after Ctrl-C equals never stopping, and the corpus is deterministic."""

import dataclasses
import os
import signal

import pytest
import torch

from attnlab.results import to_dict
from attnlab.train import corpus, train
from attnlab.train import summary as train_summary

TINY = train.PRESETS["tiny"]


def test_stdlib_corpus_is_split_by_file_and_deterministic(data):
    again = corpus.stdlib(max_chars=200_000)
    assert torch.equal(data.train, again.train) and torch.equal(data.val, again.val)
    assert data.files[0] > 0 and data.files[1] > 0
    assert len(data.train) > 150_000 and len(data.val) > 15_000
    text = "def f(x):\n    return x\n"
    assert data.decode(data.encode(text)) == text


def test_text_file_corpus_and_its_errors(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("abcab" * 400 + "é")
    c = corpus.from_file(p, max_vocab=3)
    assert c.chars == ("a", "b", corpus.UNKNOWN)  # the two most frequent, then one unknown for the rest
    assert len(c.train) == 1801 and c.decode(c.val[-2:]) == "b" + corpus.UNKNOWN
    with pytest.raises(ValueError, match="does not exist"):
        corpus.from_file(tmp_path / "missing.txt")
    (tmp_path / "short.txt").write_text("abc")
    with pytest.raises(ValueError, match="at least"):
        corpus.from_file(tmp_path / "short.txt")


# thirty training steps and a save: about 2 s of CPU where it is the first training in its worker, 0.17 s after
@pytest.mark.slow(first="the training modules and the model's first kernels")
def test_thirty_steps_lower_the_loss(data, tmp_path, round_trip):
    r = train.run(TINY, variants=["sqrt"], out=tmp_path, data=data)
    log = r.variants["sqrt"]
    print("val loss", log.val_loss, "entropy", log.entropy)
    assert log.step == [0, 10, 20, 30]
    assert log.val_loss[-1] < log.val_loss[0] - 0.8 and log.train_loss[-1] < log.train_loss[0] - 0.8
    assert log.diverged_at is None and log.tokens == 30 * 8 * 32
    assert (tmp_path / "checkpoints" / "scale-sqrt.pt").is_file()
    j = to_dict(r)
    assert set(j["variants"]["sqrt"]) >= {"step", "train_loss", "val_loss", "grad_norm", "entropy"}
    assert len(j["variants"]["sqrt"]["entropy"][0]) == TINY.n_layer
    round_trip(r)


@pytest.mark.slow
def test_resume_after_ctrl_c_reproduces_the_uninterrupted_run_exactly(data, tmp_path):
    cfg = dataclasses.replace(TINY, steps=12, eval_every=5, eval_batches=1, dropout=0.1)
    steps_a: list[float] = []
    a = train.run(cfg, variants=["sqrt", "none"], out=tmp_path / "a", data=data,
                  on_step=lambda n, s, S, loss, tps: steps_a.append((n, s, loss)))

    steps_b: list[float] = []

    def interrupt_at_7(name, step, steps, loss, tps):
        steps_b.append((name, step, loss))
        if name == "none" and step == 7:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: finish the step, save, stop

    with pytest.raises(KeyboardInterrupt, match="step 7"):
        train.run(cfg, variants=["sqrt", "none"], out=tmp_path / "b", data=data, on_step=interrupt_at_7)
    b = train.run(cfg, variants=["sqrt", "none"], out=tmp_path / "b", data=data, resume=True,
                  on_step=lambda n, s, S, loss, tps: steps_b.append((n, s, loss)))
    assert steps_b == steps_a  # every step's loss, bit for bit
    for name in ("sqrt", "none"):
        la, lb = a.variants[name], b.variants[name]
        for key in ("step", "train_loss", "val_loss", "grad_norm", "entropy", "peak", "qk_grad_norm",
                    "score_grad_norm"):
            assert getattr(la, key) == getattr(lb, key), (name, key)

    with pytest.raises(ValueError, match="lr"):
        train.run(dataclasses.replace(cfg, lr=1e-4), variants=["sqrt"], out=tmp_path / "b", data=data, resume=True)


def test_variants_share_initial_weights_and_data_and_the_summary_reads_them(data, tmp_path, round_trip):
    r = train.run(dataclasses.replace(TINY, steps=10), out=tmp_path, data=data)
    # same init and batches: at step 0 only the scale differs, so sqrt and inv losses are close but not equal
    v = r.variants
    assert v["sqrt"].val_loss[0] != v["none"].val_loss[0]
    assert v["none"].entropy[0][0] < v["sqrt"].entropy[0][0] < v["inv"].entropy[0][0] <= r.config["uniform_entropy"]
    summaries, preds = train_summary.summarise(r)
    assert set(summaries) == {"sqrt", "none", "inv"} and len(preds) == 3
    assert all(p.evidence for p in preds)
    for x in [*summaries.values(), *preds]:
        round_trip(x)
    # "below a quarter of uniform throughout" is read at every log, not only the first and the last
    none = r.variants["none"]
    quarter = 0.25 * r.config["uniform_entropy"]
    low, high = [quarter / 2] * TINY.n_layer, [quarter * 2] * TINY.n_layer
    none.entropy = [low, low, low]
    assert train_summary.summarise(r)[1][0].holds
    none.entropy = [low, high, low]  # one log in the middle above the line: not "throughout"
    assert not train_summary.summarise(r)[1][0].holds


def test_bad_arguments():
    with pytest.raises(ValueError, match="steps"):
        dataclasses.replace(TINY, steps=0)
    with pytest.raises(ValueError, match="kind"):
        train.run(TINY, kind="tie-q")
    with pytest.raises(ValueError, match="variants"):
        train.run(TINY, variants=["half"])
