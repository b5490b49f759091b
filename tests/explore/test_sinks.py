"""`attnlab explore sinks`: the shares it measures against cases worked by hand, its finding from given numbers (and
its wording when they flip), and the command's files, refusals and Ctrl-C."""

import dataclasses
import json
import math
import os
import signal

import pytest
import torch

from attnlab.cli import main
from attnlab.explore import sinks
from attnlab.nn import GPT, GPTConfig
from attnlab.results import to_dict

PNG = b"\x89PNG\r\n\x1a\n"


def test_shares_of_weights_written_by_hand():
    w = torch.tensor([[[[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]],  # no sink: rows sum to 1
                       [[0.5, 0, 0], [0.2, 0.4, 0], [0.1, 0.1, 0.3]]]], dtype=torch.float64)  # a sink took .5 .4 .5
    first, sink = sinks.shares(w)
    # query 0 has no choice and is left out: the means are over queries 1 and 2
    assert first.tolist() == pytest.approx([(0.5 + 0.2) / 2, (0.2 + 0.1) / 2], abs=1e-12)
    assert sink.tolist() == pytest.approx([0.0, (0.4 + 0.5) / 2], abs=1e-12)
    assert sinks.uniform_first(3) == pytest.approx((1 / 2 + 1 / 3) / 2)
    with pytest.raises(ValueError, match="T >= 2"):
        sinks.shares(torch.ones(1, 1, 1, 1))


def _flat_model(sinks_on: bool, logits=None):
    """A 2-layer GPT whose queries and keys are 0: every score is 0, so a row's weights are even over the keys it
    sees (and the sink, whose logit is set)."""
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=7, block_size=8, n_layer=2, n_head=2, d_model=8, impl="matrix", sinks=sinks_on))
    with torch.no_grad():
        for b, sl in zip(m.blocks, logits or [None, None], strict=True):
            qk = 2 * b.attn.d_model  # the q and k rows of the fused projection
            b.attn.qkv.weight[:qk].zero_()
            b.attn.qkv.bias[:qk].zero_()
            if sl is not None:
                b.attn.sinks.copy_(torch.tensor(sl))
    return m


def test_measure_a_model_whose_attention_is_set_by_hand():
    T = 6
    idx = torch.randint(7, (3, T), generator=torch.Generator().manual_seed(1))
    first, sink, per_first, per_sink = sinks.measure(_flat_model(False), [idx, idx.flip(0)])
    even = sum(1 / (i + 1) for i in range(1, T)) / (T - 1)  # query i spreads over keys 0..i
    assert _flat(first) == pytest.approx([even] * 4, abs=1e-6)
    assert _flat(sink) == pytest.approx([0.0] * 4, abs=1e-6) and per_first == pytest.approx([even] * 2, abs=1e-6)
    # a sink of logit log(a) weighs as much as a keys whose score is 0: query i gives a / (i + 1 + a) to it
    a = [[1.0, 2.0], [3.0, 0.5]]
    m = _flat_model(True, [[math.log(x) for x in row] for row in a])
    first, sink, _, per_sink = sinks.measure(m, [idx])

    def mean(f):
        return sum(f(i) for i in range(1, T)) / (T - 1)

    assert _flat(first) == pytest.approx([mean(lambda i, x=x: 1 / (i + 1 + x)) for x in _flat(a)], abs=1e-6)
    assert _flat(sink) == pytest.approx([mean(lambda i, x=x: x / (i + 1 + x)) for x in _flat(a)], abs=1e-6)
    assert per_sink[0] == pytest.approx(sum(_flat(sink)) / 4, abs=1e-6)


def _result(plain, with_sinks, sink, batch_plain, batch_sinks, **kw):
    cfg = dataclasses.asdict(sinks.config("tiny"))
    return sinks.SinksResult(0, "tiny", cfg, {"name": "hand"}, len(plain), len(plain[0]), {"plain": plain,
                             "sinks": with_sinks}, sink, [[0.0] * len(plain[0])] * len(plain),
                             {"plain": batch_plain, "sinks": batch_sinks}, [0.3] * len(batch_plain), 0.1,
                             {"plain": 2.5, "sinks": 2.4}, {"batches": len(batch_plain), "rows": 8, "T": 32},
                             1.0, 1.2, {}, {}, **kw)


def test_the_finding_is_computed_from_the_numbers_and_flips_with_them():
    falls = _result([[0.6, 0.1]], [[0.1, 0.05]], [[0.55, 0.2]], [0.34, 0.36, 0.35, 0.35], [0.07, 0.08, 0.075, 0.075])
    f = sinks.finding(falls)
    assert "the weight on the first token falls from 0.350 to 0.075 on average over the 2 heads" in f
    assert "a change of -0.275" in f and "at least 0.02 and at least 3 standard errors" in f
    assert "1 of 2 heads give it at least 0.3: attention sinks in StreamingLLM's sense" in f
    assert "The sink takes 0.375 of the weight on average (most: 0.550, layer 0 head 0)" in f
    assert "heads giving it at least 0.3: 1 of 2" in f and "Held-out loss 2.500 without, 2.400 with" in f
    rises = dataclasses.replace(falls, first={"plain": falls.first["sinks"], "sinks": falls.first["plain"]},
                                batch_first={"plain": falls.batch_first["sinks"], "sinks": falls.batch_first["plain"]})
    assert "rises from 0.075 to 0.350" in sinks.finding(rises) and "falls" not in sinks.finding(rises)
    assert "no head gives it 0.3 or more: no attention sink" in sinks.finding(rises)
    # the same means, but the batches disagree: within noise
    noisy = _result([[0.2, 0.1]], [[0.19, 0.1]], [[0.1, 0.1]], [0.10, 0.20, 0.10, 0.20], [0.20, 0.09, 0.19, 0.10])
    diff, se, limit = sinks.change(noisy)
    assert diff == pytest.approx(-0.005) and limit == pytest.approx(3 * se) and limit > 0.02
    f = sinks.finding(noisy)
    assert "does not change measurably: 0.150 without, 0.145 with" in f and "is within noise" in f
    # steady batches, a change beyond their noise but under the least change called one
    small = _result([[0.2, 0.1]], [[0.19, 0.1]], [[0.1, 0.1]], [0.15, 0.151, 0.149, 0.15], [0.145, 0.146, 0.144, 0.145])
    assert "beyond the noise of the held-out batches but smaller than 0.02" in sinks.finding(small)


def test_the_result_reads_back_from_its_json():
    r = _result([[0.6, 0.1]], [[0.1, 0.05]], [[0.55, 0.2]], [0.34, 0.36], [0.07, 0.08])
    back = sinks.SinksResult.from_dict(json.loads(json.dumps(to_dict(r))))
    assert back == r and sinks.finding(back) == sinks.finding(r)


def test_the_estimate_counts_both_models_and_the_measuring():
    from attnlab.train.estimate import Estimate

    cfg = sinks.config()
    est = {"plain": Estimate(0.1, 0.4), "sinks": Estimate(0.2, 0.4)}
    logs = cfg.steps // cfg.eval_every + 2
    want = (cfg.steps * 0.1 + logs * 0.4) + (cfg.steps * 0.2 + logs * 0.4) + sinks.FORWARDS * (0.1 + 0.2) / 3
    assert sinks.seconds(est, cfg) == pytest.approx(want)
    resumed = sinks.seconds(est, cfg, {"plain": 0, "sinks": 100})  # plain finished, sinks 100 steps short
    assert resumed == pytest.approx(100 * 0.2 + (100 // cfg.eval_every + 2) * 0.4 + sinks.FORWARDS * 0.3 / 3)
    # before training, the command chooses its threads and times each model: the lesson build counts that too
    assert sinks.timing_s(est) == pytest.approx(sinks.TIMING_STEPS * 0.15 + 0.8)
    same = dict.fromkeys(sinks.VARIANTS, Estimate(0.1, sinks.LOG_STEPS * 0.1))
    assert sinks.seconds_from_step(0.1) == pytest.approx(sinks.timing_s(same) + sinks.seconds(same, cfg))


@pytest.mark.parametrize("argv,said", [
    (["explore", "trust", "--preset", "tiny"], "--preset applies to the experiments that train (sinks)"),
    (["explore", "sinks", "--resume"], "--resume: no checkpoint in"),
    (["explore", "sinks", "--preset", "huge"], "invalid choice: 'huge'"),
])
def test_bad_arguments_are_one_line_and_exit_2(argv, said, tmp_path, capsys):
    try:
        code = main([*argv, "--out", str(tmp_path / "out")])
    except SystemExit as e:  # argparse's refusals end the parse itself
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and said in err, err


@pytest.mark.slow
def test_the_command_writes_its_json_and_figure_and_says_its_estimate(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["explore", "sinks", "--preset", "tiny", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "estimate: about" in said and "train sinks: step 20/20" in said and "trained and measured in" in said
    j = json.loads((out / "explore-sinks.json").read_text())
    assert (out / "explore-sinks.png").read_bytes().startswith(PNG)
    assert set(j["first"]) == {"plain", "sinks"} and len(j["first"]["plain"]) == 1 and len(j["sink"][0]) == 2
    assert all(0 < x < 1 for row in j["sink"] for x in row) and j["estimate_s"] > 0 and j["seconds"] > 0
    r = sinks.SinksResult.from_dict(j)
    assert f"sinks: {sinks.finding(r)[:60]}" in said.replace("\n", " ")
    # another preset would replace this run: refused, one line
    assert main(["explore", "sinks", "--out", str(out)]) == 2
    assert "holds experiment sinks with other settings (preset: 'tiny' -> 'default')" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.long
def test_ctrl_c_stops_saying_how_to_go_on_and_the_resumed_run_is_the_whole_one(tmp_path, capsys, monkeypatch):
    from attnlab.report import train as train_report

    whole = tmp_path / "whole"
    assert main(["explore", "sinks", "--preset", "tiny", "--out", str(whole)]) == 0
    progress = train_report.train_progress

    def interrupted(total, names):  # a Ctrl-C (SIGINT) in the middle of the second model
        def gen():
            with progress(total, names) as on_step:
                def step(name, s, *rest):
                    if name == "sinks" and s == 7:
                        os.kill(os.getpid(), signal.SIGINT)
                    on_step(name, s, *rest)
                yield step
        from contextlib import contextmanager
        return contextmanager(gen)()

    out = tmp_path / "out"
    monkeypatch.setattr(train_report, "train_progress", interrupted)
    capsys.readouterr()
    assert main(["explore", "sinks", "--preset", "tiny", "--out", str(out)]) == 130
    said = capsys.readouterr().err
    assert said == (f"attnlab explore: stopped (Ctrl-C) at step 7 of sinks; go on from where it stopped: attnlab "
                    f"explore sinks --out {out} --preset tiny --resume\n")
    assert not (out / "explore-sinks.json").exists()
    monkeypatch.setattr(train_report, "train_progress", progress)
    assert main(["explore", "sinks", "--preset", "tiny", "--out", str(out), "--resume"]) == 0
    assert "resuming sinks from step 7" in capsys.readouterr().out
    a, b = (json.loads((d / "explore-sinks.json").read_text()) for d in (whole, out))
    for key in ("first", "sink", "sink_logit", "val_loss"):
        assert _flat(b[key]) == pytest.approx(_flat(a[key]), abs=1e-5), key


def _flat(x):
    if isinstance(x, dict):
        return [v for k in sorted(x) for v in _flat(x[k])]
    return [v for item in x for v in _flat(item)] if isinstance(x, list) else [x]
