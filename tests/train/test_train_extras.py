"""What training says around the steps: an estimate before it starts, progress lines in a log, the final model's
heads measured, and the tie-kv ablation reusing the 1/sqrt(d) run it would repeat."""

import dataclasses

import pytest
import torch

from attnlab.report import train as report
from attnlab.train import checkpoint, train
from attnlab.train import estimate as train_time

TINY = dataclasses.replace(train.PRESETS["tiny"], block_size=32, steps=12, eval_every=6)


def test_the_estimate_is_timed_on_real_steps(data):
    before = torch.random.get_rng_state()
    est = train_time.estimate(TINY, data)
    assert torch.equal(torch.random.get_rng_state(), before)  # training after it draws the same numbers
    assert 0 < est.step_s < 5 and 0 < est.log_s < 30
    assert est.seconds(100, 10, variants=3) == pytest.approx(3 * (100 * est.step_s + 12 * est.log_s))
    line = report.estimate_line(est, 200.0)
    assert line.startswith("  estimate: about 3 min on this machine now (") and "timed on a few steps" in line


def test_progress_is_a_line_per_tenth_when_not_on_a_terminal(capsys):
    with report.train_progress(20, ["sqrt", "none"]) as on_step:
        for name in ("sqrt", "none"):
            for s in range(1, 21):
                on_step(name, s, 20, 2.5, 1000.0)
    lines = [x for x in capsys.readouterr().out.splitlines() if x.strip()]
    assert len(lines) == 20 and lines[0].startswith("  train sqrt: step 2/20, loss 2.500, 1,000 tokens/s")
    assert "left" in lines[0] and lines[-1].startswith("  train none: step 20/20") and "left" not in lines[-1]


@pytest.mark.slow(first="two training runs of the tiny model, in the worker kept for them")
def test_the_final_heads_are_measured_and_tie_kv_reuses_the_same_run(data, tmp_path):
    scale = train.run(TINY, variants=["sqrt"], out=tmp_path, data=data)
    c = scale.variants["sqrt"].circuits
    assert c is not None and c.segment == 16 and len(c.heads) == TINY.n_layer * TINY.n_head
    assert train.reusable(TINY, "tie-kv", "untied", tmp_path, data.vocab_size) == checkpoint.path_of(
        tmp_path, "scale", "sqrt")
    assert train.reusable(TINY, "tie-kv", "tied", tmp_path, data.vocab_size) is None  # another model
    longer = dataclasses.replace(TINY, steps=13)
    assert train.reusable(longer, "tie-kv", "untied", tmp_path, data.vocab_size) is None  # another run
    tie = train.run(TINY, kind="tie-kv", variants=["untied"], out=tmp_path, data=data)
    assert tie.variants["untied"].val_loss == scale.variants["sqrt"].val_loss  # the same run, not a second one
    assert tie.variants["untied"].circuits == c
    state = checkpoint.load(checkpoint.path_of(tmp_path, "tie-kv", "untied"))
    assert state["variant"] == "untied" and state["step"] == TINY.steps


@pytest.mark.slow
@pytest.mark.long  # ~3 min: the default preset trained in full
def test_the_default_model_grows_a_previous_token_and_an_induction_head(tmp_path):
    """The lesson's model, trained as `attnlab train` trains it (the 1/sqrt(d) run alone): both heads measured."""
    r = train.run(train.PRESETS["default"], variants=["sqrt"], out=tmp_path)
    c = r.variants["sqrt"].circuits
    p, i = c.best("previous"), c.best("induction")
    print(f"default model after {train.PRESETS['default'].steps} steps: previous-token layer {p.layer} head {p.head} "
          f"{p.previous:.2f}, induction layer {i.layer} head {i.head} {i.induction:.2f}, loss {c.loss_first:.2f} -> "
          f"{c.loss_repeat:.2f}, lowest at one length {c.lowest():.2f}; {r.variants['sqrt'].seconds:.0f} s")
    assert c.found and p.layer == 0 and i.layer == 1  # the induction head reads what layer 0 wrote
    # on the reader's kind of text (random letters, repeats allowed) at every length from 10 to 30: a letter with
    # several earlier copies leaves the next one uncertain, so the repeat's loss stays above zero
    assert c.lengths[0] == 10 and c.lengths[-1] == 30 and c.lowest() >= 0.5 and c.copies
