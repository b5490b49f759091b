"""The lesson page's data and HTML, without a browser."""

import base64
import json
import math
import re
from html import unescape
from pathlib import Path

import pytest
import torch

import attnlab
from attnlab.demo import DemoResult
from attnlab.kernels import matrix
from attnlab.lesson import code, model, sources, walkthrough, worked
from attnlab.measure.bench import BenchResult
from attnlab.report.lesson import numbers, sections, teach
from attnlab.train.train import TrainResult

from .conftest import BENCH, TRAIN, sinks_result, tiny_checkpoint


@pytest.mark.slow
def test_cli_builds_one_self_contained_page(lesson):
    r, out = lesson
    assert r.returncode == 0, r.stdout + r.stderr
    assert "wrote" in r.stdout and "lesson.html" in r.stdout
    assert "demo (quick run): demo.json was not in" in r.stdout
    assert "bench: from" in r.stdout and "train scale: from" in r.stdout and "train tie-kv: from" in r.stdout
    html = (out / "lesson.html").read_text()
    assert (out.parent / "opened.txt").read_text() == (out / "lesson.html").resolve().as_uri()  # --open
    # nothing to fetch: every src is inline data, every href an anchor on the page or a reading-list link
    assert not re.findall(r"""src\s*=\s*["'](?!data:)""", html)
    links = re.findall(r"""href\s*=\s*["'](?!#)([^"']*)""", html)
    source = [u for u in links if u.startswith("file://")]  # the production code, on this machine, for the curious
    assert len(source) == 3 and all(u.endswith(".py") for u in source)
    assert sorted(u for u in links if u not in source) == sorted(u for _, u in teach.READING)
    assert html.count("https://") == len(teach.READING) and "http://" not in html  # nowhere else
    assert not re.search(r"""url\((?!["']?data:)""", html)
    assert "{{" not in html.split('<script type="application/json"')[0]
    data = json.loads(re.search(r'<script type="application/json" id="lesson-data">(.*?)</script>', html, re.S)[1])
    m = data["model"]
    assert m["source"] == "trained" and "scale-sqrt.pt" in m["label"] and data["walk"]["text"] == walkthrough.SENTENCE
    assert len(base64.b64decode(m["blob"])) == 4 * sum(math.prod(t["shape"]) for t in m["tensors"])
    assert html.count("data:image/png;base64,") >= 8
    assert "quick run" in html and "Questions people ask" in html
    assert "1.900 → " not in html  # entropies are the mean over layers: start 2.05 -> end 1.90
    assert "2.05 → 1.90" in html  # the scale table read train.json
    assert "4.100" not in html and "3.390" in html  # final validation loss of sqrt = 3.2 + 0.19
    assert "3.450 tied against 3.390 separate" in html  # the tie-kv answer read the ablation's JSON
    assert "Measured here (tie_kv.json)" in html and "(bench.json, fastest of the repeats)" in html
    assert "took 4× as long as PyTorch" in html  # bench.json: matrix 4e-8 s·T² against sdpa's 1e-8
    sinks = html[html.index('id="explore-sinks"'):]
    assert "falls from 0.200 to 0.048 on average over the 6 heads" in unescape(sinks)  # explore-sinks.json's numbers
    assert "<td><b>0.610</b></td>" in sinks and "attnlab explore sinks" in sinks


def test_seeded_walkthrough_and_the_python_reference():
    m, w = walkthrough.seeded(seed=1)
    assert w.source == "seeded" and "seeded" in w.label and "never trained" in w.label
    assert w.tokens[w.query] == "t" and w.tokens[w.query - 1] == "i" and w.words[w.word_of[w.query]] == "it"
    ref = model.reference(m, w.text)
    T = len(w.tokens)
    weights, probs = torch.tensor(ref["weights"]), torch.tensor(ref["probs"])  # (L, H, T, T), (T, V)
    assert weights.shape == (2, 2, T, T) and probs.shape == (T, len(m.chars))
    assert torch.allclose(weights.sum(-1), torch.ones(2, 2, T), atol=1e-5)
    assert torch.all(weights.triu(1) == 0)  # causal: the future gets exactly zero
    assert torch.allclose(probs.sum(-1), torch.ones(T), atol=1e-5)
    logits, _ = m.model(torch.tensor([[m.chars.index(c) for c in w.text]]))
    assert torch.allclose(probs, torch.softmax(logits[0], -1))  # the reference is the model's own forward
    assert abs(sum(w.listens) + sum(weights[0, 0, w.query, j].item() for j in range(T) if w.word_of[j] < 0) - 1) < 1e-3
    assert w.listens[w.words.index("was")] == 0.0  # "was" comes after "it"
    assert len(w.heads) == 2 and len(w.heads[0]) == 2 and w.heads[1][1].layer == 1
    unscaled = torch.tensor(model.reference(m, w.text, scale="none")["weights"])
    assert unscaled.amax(-1).mean() > weights.amax(-1).mean()  # no 1/sqrt(d): the softmax is sharper
    with pytest.raises(ValueError, match="no token for 'é'"):
        model.reference(m, "café")


def test_trained_walkthrough_reads_a_checkpoint_character_by_character(tmp_path):
    tiny_checkpoint(tmp_path / "checkpoints" / "scale-sqrt.pt")
    path = walkthrough.find_checkpoint(tmp_path)
    m, w = walkthrough.trained(path)
    assert w.text == walkthrough.SENTENCE and "".join(w.tokens) == w.text and m.source == "trained"
    assert w.tokens[w.query] == "t" and w.tokens[w.query - 1] == "i" and w.words[w.word_of[w.query]] == "it"
    assert m.model.cfg.head_dim == 16 and len(w.heads) == 2 and len(w.heads[0]) == 2
    assert walkthrough.find_checkpoint(tmp_path / "nothing") is None
    short = tmp_path / "short" / "checkpoints" / "scale-sqrt.pt"
    tiny_checkpoint(short, block_size=8)  # "d tired": "it" is out of reach
    with pytest.raises(walkthrough.TooShort, match="reads at most 8 characters"):
        walkthrough.trained(short)
    odd = tmp_path / "odd" / "checkpoints" / "scale-sqrt.pt"  # a corpus without a "w": the sentence is unreadable
    tiny_checkpoint(odd)
    state = torch.load(odd, weights_only=True)
    state["chars"] = [c if c != "w" else "W" for c in state["chars"]]
    torch.save(state, odd)
    with pytest.raises(walkthrough.CannotRead, match="no token for 'w'"):  # collect() falls back to a seeded head
        walkthrough.trained(odd)
    unscaled = tmp_path / "unscaled" / "checkpoints" / "scale-none.pt"  # only `attnlab train --scale none` ran
    tiny_checkpoint(unscaled)
    state = torch.load(unscaled, weights_only=True)
    state["model_config"]["scale"] = "none"
    torch.save(state, unscaled)
    assert walkthrough.find_checkpoint(tmp_path / "unscaled") == unscaled
    with pytest.raises(walkthrough.CannotRead, match="scale 'none'"):  # the page's "÷√d" step would be wrong
        walkthrough.trained(unscaled)
    (tmp_path / "checkpoints" / "scale-sqrt.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot be read"):
        walkthrough.trained(path)


def test_packed_weights_are_the_models_own():
    m, _ = walkthrough.seeded(seed=0)
    p = model.pack(m)
    raw = torch.frombuffer(bytearray(base64.b64decode(p.blob)), dtype=torch.float32)
    state = m.model.state_dict()
    assert [t["name"] for t in p.tensors] == list(state)
    for t in p.tensors:
        n = math.prod(t["shape"])
        assert torch.equal(raw[t["offset"]:t["offset"] + n].view(t["shape"]), state[t["name"]])
    assert p.nbytes < 5 * 2**20 and p.chars == m.chars


def test_worked_example_by_hand():
    w = worked.run()
    print(f"worked example: |hand - matrix form| {w.err_matrix:.1e}, |hand - F.sdpa| {w.err_torch:.1e}")
    assert w.scores == [[2.0, 0.0, 2.0], [0.0, 2.0, 0.0], [1.0, 3.0, 4.0]]  # q_i . k_j, whole numbers
    assert w.scale == 0.5 and w.scaled[2] == [0.5, 1.5, 2.0]
    assert w.masked[0][1] is None and w.masked[0][2] is None and w.masked[1][2] is None
    assert w.weights[0] == [1.0, 0.0, 0.0]  # the first token sees only itself
    assert w.weights[1][0] == pytest.approx(1 / (1 + math.e)) and sum(w.weights[2]) == pytest.approx(1)
    assert w.err_matrix < 1e-12 and w.err_torch < 1e-12


def test_code_quotes_are_the_lessons_module_and_the_labs_starter():
    from attnlab.lab import starter

    c = code.collect()
    module = (Path(attnlab.__file__).parent / "nn" / "causal.py").read_text().splitlines()
    for step, snip in c.steps.items():
        assert snip.file == "nn/causal.py" and [module[n - 1].strip() for n in snip.lines] == snip.code, step
    lab = Path(starter.__file__).read_text().splitlines()
    for step, snip in c.lab_steps.items():
        assert snip.file == "attention_lab.py" and [lab[n - 1].strip() for n in snip.lines] == snip.code, step
    assert c.steps["scale"].code == ["scores = scores * self.scale  # keeps the spread of the scores the same at "
                                     "every head width"]
    assert "TODO 2 (mask)" in c.lab_steps["mask"].code[0]
    for whole in (c.module, c.starter):  # every line numbered, in order: no "65, 29, 31"
        assert whole.lines == sorted(whole.lines) and len(whole.lines) == len(whole.code)
    assert c.module.code[0].startswith("class CausalSelfAttention") and len(c.module.code) < 40
    assert any("def attention_by_hand" in x for x in c.starter.code)
    assert not any("def attention_matrix" in x for x in c.starter.code)  # level 2's answer is not given away
    assert set(c.links) == {"attnlab/nn/attention.py", "attnlab/kernels/matrix.py", "attnlab/kernels/loops.py"}
    assert all(u.startswith("file://") for u in c.links.values())
    html = teach.code_blocks(c)
    assert html.count('<details class="listing"') == 2 and "nn/causal.py, lines " in html
    with pytest.raises(RuntimeError, match="no longer has it"):
        code.quote(matrix, ["this line is not there"])


def test_sources_read_classify_and_measure(tmp_path):
    (tmp_path / "train-a.json").write_text(json.dumps(TRAIN))
    scale, tie = sources.train(tmp_path, quick=True)
    assert scale.origin == "file" and tie.origin == "not measured" and "--ablation tie-kv" in tie.note
    (tmp_path / "bench.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="does not hold a JSON object"):
        sources.bench(tmp_path, quick=True)
    (tmp_path / "explore-trust.json").write_text('{"seed": 0}')
    with pytest.raises(ValueError, match="explore-trust.json is not a result of `attnlab explore trust`"):
        sources.explore(tmp_path, seed=0)
    q = sources.quick_bench([8, 16], repeats=1)
    impls = {r.impl for r in q.results}
    assert {"matrix", "sdpa"} <= impls and all(r.time_s > 0 for r in q.results)
    assert "matrix" in q.exponents


def test_the_sinks_section_shows_the_runs_numbers(tmp_path):
    from attnlab.explore import sinks as lab_sinks
    from attnlab.results import write_json

    parts = sources.explore(tmp_path, seed=0, quick=True)  # no explore-sinks.json and --quick: not trained now
    assert parts["sinks"].origin == "not measured" and parts["sinks"].result is None
    assert f"`attnlab explore sinks --out {tmp_path}`" in parts["sinks"].note
    html = sections.explore({"sinks": parts["sinks"]}, {})
    assert "explore sinks</h3>" in html and "not measured" in html and 'class="finding"' not in html
    r = sinks_result()
    write_json(r, tmp_path / "explore-sinks.json")
    part = sources.explore(tmp_path, seed=0, quick=True)["sinks"]
    assert part.origin == "file" and part.result == r
    html = unescape(sections.explore({"sinks": part}, {"explore-sinks": {"src": "data:,", "width": 9, "height": 9}}))
    assert lab_sinks.finding(r) in html  # the finding, computed from the file's numbers
    assert "falls from 0.200 to 0.048" in html and "The sink takes 0.215 of the weight on average" in html
    table = html[html.index('<table class="sinks">'):html.index("</table>")]
    rows = re.findall(r"<tr><th>(layer\xa0\d head\xa0\d)</th>(.*?)</tr>", table)  # unescaped: no-break spaces
    assert [name for name, _ in rows] == [f"layer\xa0{li} head\xa0{h}" for li in range(2) for h in range(3)]
    # per head: the first token without sinks, with sinks, the sink, its logit (bold: 0.3 or more)
    assert rows[0][1] == "<td><b>0.610</b></td><td>0.080</td><td><b>0.550</b></td><td>+2.10</td>"
    assert rows[4][1] == "<td><b>0.420</b></td><td>0.060</td><td><b>0.380</b></td><td>+1.30</td>"
    assert '<tr class="mean"><th>mean</th><td>0.200</td><td>0.048</td><td>0.215</td>' in table
    assert "an even head" not in table and "would give the first token 0.059" in html and 'src="data:,"' in html


@pytest.mark.slow
def test_a_missing_sinks_result_is_a_tiny_run_said_to_be_one(tmp_path):
    part = sources.explore(tmp_path, seed=0)["sinks"]
    assert part.origin == "quick run" and part.result.preset == "tiny" and part.result.layers == 1
    assert "tiny models (--preset tiny: 1 layer, 20 steps each) were trained while this page was built" in part.note
    assert part.finding.startswith("With a learned sink the weight on the first token")


def test_quick_bench_growth_is_said_to_be_short_lengths():
    data = BenchResult.from_dict(BENCH | {
        "results": [{"impl": "matrix", "seq": s, "time_s": t} for s, t in ((16, 2e-3), (64, 4e-4))],
        "exponents": {"matrix": {"time": -1.16, "memory": None}}})
    quick = sections.bench(sources.Part("bench", "quick run", "now", data), {})
    assert "T<sup>-1.16</sup>" in quick and "At lengths this short" in quick
    assert "At lengths this short" not in sections.bench(sources.Part("bench", "file", "from bench.json", data), {})


def test_a_diverged_run_in_train_json_is_shown_not_a_crash():
    diverged = json.loads(json.dumps(TRAIN))
    v = diverged["variants"]["none"]  # NaN losses and entropies are written to JSON as null
    v["val_loss"][-1], v["entropy"][-1] = None, [None, None]
    diverged = TrainResult.from_dict(diverged)
    assert math.isnan(numbers.final_val(diverged)["none"])
    assert numbers.entropy_ends(diverged)["none"] == (pytest.approx(2.05), pytest.approx(2.05))
    html = sections.train(sources.Part("train scale", "file", "from train.json", diverged),
                          sources.Part("train tie-kv", "not measured", "none", None), {})
    assert "<td>nan</td>" in html


def test_numbers_quoted_in_the_prose():
    bench, train = BenchResult.from_dict(BENCH), TrainResult.from_dict(TRAIN)
    assert numbers.ratio(bench, "matrix") == (pytest.approx(4.0), 512)
    assert numbers.ratio(bench, "loops") is None
    assert numbers.final_val(train)["none"] == pytest.approx(3.22)
    assert numbers.entropy_ends(train)["inv"] == (pytest.approx(2.05), pytest.approx(3.2))
    assert numbers.fmt_time(0.0123) == "12.3 ms" and numbers.fmt_time(2e-5) == "20 µs"
    assert numbers.fmt_time(2.1) == "2.1 s"
    assert len(sections.QUIZ) == 7 and all(0 <= right < len(opts) and len(why) > 40
                                           for _, opts, right, why in sections.QUIZ)
    assert len({right for _, _, right, _ in sections.QUIZ}) > 1  # the right answer is not always in the same place


def test_no_right_answer_is_the_one_longest_option():
    """A reader who picks the longest option must not score: in no question is the right one uniquely longest."""
    for q, options, right, _ in sections.QUIZ:
        longest = max(map(len, options))
        assert len(options[right]) < longest or [len(o) for o in options].count(longest) > 1, q
    asked = " ".join(q for q, _, _, _ in sections.QUIZ)
    assert "mask[i, j]" in asked and "divided by" in asked and "normalise" in asked  # the lab's three slips


def test_bench_table_says_memory_reasons_noise_and_growth():
    data = json.loads(json.dumps(BENCH))
    data["results"].append({"impl": "flash", "seq": 2048, "skipped": "estimated 9.1 s a call x 3 calls > budget 20 s"})
    data["machine"] = {"load_average": 3.4, "cpu_count": 2}
    data["exponents"]["flash"] = {"time": 4.97, "memory": 1.0}
    html = sections.bench(sources.Part("bench", "file", "from bench.json", BenchResult.from_dict(data)), {})
    assert "<th>T = 128</th>" in html and "<th>T = 2048</th>" in html
    assert "128.0 KiB" in html  # matrix at T=128: 8 * 128^2 bytes of extra peak
    assert html.count("skipped <sup>") == 6  # loops everywhere, and matrix, sdpa and flash at 2048
    assert "flash at T = 2048: estimated 9.1 s a call x 3 calls &gt; budget 20 s" in html
    assert "loops at T = 512: estimated 97.5 s a call" in html and "sdpa at T = 2048: not in this run" in html
    assert "load 3.4 on 2 cores" in html and "flash T<sup>4.97</sup>" in html
    assert "Doubling the context quadruples the matrix form's memory: measured T<sup>2.00</sup>" in html
    quiet = BenchResult.from_dict(BENCH | {"machine": {"load_average": 0.5, "cpu_count": 2}})
    assert "noisy" not in sections.bench(sources.Part("bench", "file", "from bench.json", quiet), {})


def test_the_page_says_when_a_measured_claim_does_not_hold():
    """Result files where the lesson's claims fail: the page says so with the rule, and ticks nothing."""
    from .conftest import TIE

    tie = json.loads(json.dumps(TIE))
    tie["variants"]["tied"]["val_loss"][-1] = 3.36  # tied better than untied (3.39): the claim fails
    scale = json.loads(json.dumps(TRAIN))
    scale["variants"]["inv"]["val_loss"][-1] = 3.37  # 1/d beats 1/sqrt(d) (3.39), its q/k norms grew 4x against 1.5x
    part = sources.Part
    html = sections.train(part("train scale", "file", "from train.json", TrainResult.from_dict(scale)),
                          part("train tie-kv", "file", "from tie_kv.json", TrainResult.from_dict(tie)), {})
    assert "1/d learns worse than 1/√d</b>: <span class=\"verdict fails\">✗ does not hold at these settings" in html
    assert "from 30.0 to 120.0 (×4.00)" in html and "×2.67 as much as 1/√d did" in html
    assert "starts with scores 0.25 of 1/√d's; by the end they were 0.67 of them: it undid part" in html
    assert "nearly uniform" in html and "a worse final loss is not" in html
    assert "Tying them measurably reduces capability</b>: <span class=\"verdict fails\">✗" in html
    assert "cost nothing measurable" in html and "not tested here" in html
    assert "visibly destabilised training</b>: <b>measured, and it did not hold at these settings" in html
    assert "not measured at these settings" not in html  # it was measured: one of its rules failed
    assert "✓ holds" in html  # one prediction does hold (the gradient through the softmax), and only it is ticked
    assert html.count("✓ holds") == 1
    from types import SimpleNamespace

    explore = sources.explore(Path("/nonexistent"), seed=0, quick=True)
    demo = DemoResult.from_dict(demo_json(("loops", 3e-7)) | {"widths": [256], "peak": {"none": [0.9], "sqrt": [0.1],
                                                                                          "inv": [0.02]}})
    walk = walkthrough.seeded(0)[1]
    data = SimpleNamespace(demo=part("demo", "file", "from demo.json", demo), explore=explore, walkthrough=walk,
                           train_scale=part("train scale", "file", "from train.json", TrainResult.from_dict(scale)),
                           train_tie_kv=part("train tie-kv", "file", "from tie_kv.json", TrainResult.from_dict(tie)),
                           bench=part("bench", "file", "from bench.json", BenchResult.from_dict(BENCH)))
    answers = sections.questions(data)
    assert "does <b>not</b> show the destabilising the lesson predicts" in answers
    assert "That does <b>not</b> support the argument at these settings" in answers
    tie["variants"]["tied"]["val_loss"][-1] = 3.6
    data.train_tie_kv = part("train tie-kv", "file", "from tie_kv.json", TrainResult.from_dict(tie))
    assert "That supports the argument: the tied model learned measurably worse on every measurement." \
        in sections.questions(data)


def _heads(induction, repeat):
    """The circuits `attnlab train` measures on a final model: its best induction head and its loss on the repeat."""
    return {"segment": 24, "sequences": 16, "seed": 0, "example": "Kq#7v!zR", "loss_first": 4.1, "loss_repeat": repeat,
            "heads": [{"layer": 0, "head": 0, "previous": 0.7, "induction": 0.02},
                      {"layer": 1, "head": 1, "previous": 0.05, "induction": induction}]}


def test_a_verdict_weighs_every_measurement_and_says_when_they_disagree():
    """The learner's run: 1/d's validation loss as good as 1/√d's, but no induction head and no copying; tied K/V
    within a few thousandths, with half an induction head and a far worse repeat loss. The page cites every number
    and rule, says the measurements disagree, and never says 'did as well' or 'cost nothing' on the loss alone."""
    from .conftest import TIE

    scale, tie = json.loads(json.dumps(TRAIN)), json.loads(json.dumps(TIE))
    scale["variants"]["inv"]["val_loss"][-1] = 3.37  # 1/d's loss beats 1/√d's 3.39
    scale["variants"]["sqrt"]["circuits"], scale["variants"]["inv"]["circuits"] = _heads(0.62, 0.22), _heads(0.08, 3.57)
    tie["variants"]["tied"]["val_loss"][-1] = 3.392  # +0.002 on the separate model's 3.39
    tie["variants"]["untied"]["circuits"], tie["variants"]["tied"]["circuits"] = _heads(0.62, 0.22), _heads(0.49, 1.93)
    part = sources.Part
    html = unescape(sections.train(part("train scale", "file", "from train.json", TrainResult.from_dict(scale)),
                                   part("train tie-kv", "file", "from tie_kv.json", TrainResult.from_dict(tie)), {}))
    for line in ("1/d learns worse than 1/√d</b>: <span class=\"verdict mixed\">◐ the measurements disagree",
                 "final validation loss: 3.370 1/d against 3.390 1/√d (-0.020; rule: worse when more than 0.02 above) "
                 "— not worse",
                 "induction share (best head): 0.08 1/d against 0.62 1/√d (-0.54; rule: worse when below 0.5 while the "
                 "other's is not) — worse",
                 "loss on the repeated copy: 3.57 1/d against 0.22 1/√d (+3.35; rule: worse when more than 0.1 above) "
                 "— worse",
                 "The measurements disagree: the final validation loss says 1/d did as well, the induction share "
                 "(best head) and the loss on the repeated copy say it did worse: 1/d predicted the text about as "
                 "well, but did not learn to copy a sequence it had just read as the 1/√d model did",
                 "Tying them measurably reduces capability</b>: <span class=\"verdict mixed\">",
                 "final validation loss: 3.392 tied against 3.390 separate (+0.002;",
                 "induction share (best head): 0.49 tied against 0.62 separate (-0.13; rule: worse when below 0.5",
                 "loss on the repeated copy: 1.93 tied against 0.22 separate (+1.71;"):
        assert line in html, line
    assert "softer attention did as well" not in html and "cost nothing measurable" not in html
    # the same run with every measurement agreeing that 1/d did as well: then, and only then, the page says so
    scale["variants"]["inv"]["circuits"] = _heads(0.6, 0.25)
    html = unescape(sections.verdicts.small_scale(TrainResult.from_dict(scale)))
    assert "✗ does not hold at these settings" in html and "So here softer attention did as well" in html
    assert "disagree" not in html and "loss on the repeated copy: 0.25 1/d against 0.22 1/√d (+0.03;" in html
    # a run without the heads measured names what it did not measure
    html = unescape(sections.verdicts.tie_kv(TrainResult.from_dict(TIE)))
    assert "not measured in this run: induction share (best head), loss on the repeated copy" in html


@pytest.mark.slow  # over 0.3 s of CPU in two runs of make test (tests/costs.py)
def test_the_train_figure_keeps_its_legends_off_the_curves(tmp_path):
    import matplotlib

    from attnlab.report import train as train_figs

    matplotlib.use("Agg")
    seen = {}
    import matplotlib.figure

    save = matplotlib.figure.Figure.savefig

    def spy(fig, *a, **k):
        fig.canvas.draw()
        seen["boxes"] = [(ax.get_window_extent(), ax.get_legend().get_window_extent()) for ax in fig.axes]
        seen["texts"] = [[t.get_text() for t in ax.texts] for ax in fig.axes]
        seen["labels"] = [t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts()]
        return save(fig, *a, **k)

    matplotlib.figure.Figure.savefig = spy
    try:
        train_figs.figure(TrainResult.from_dict(TRAIN), tmp_path / "t.png", panels=("loss", "entropy"))
    finally:
        matplotlib.figure.Figure.savefig = save
    assert len(seen["boxes"]) == 2
    for axes, legend in seen["boxes"]:
        assert not axes.overlaps(legend), (axes, legend)
    assert seen["texts"] == [[], []]  # no words written over the curves ("uniform attention" is in the legend)
    assert any(t.startswith("uniform attention (") for t in seen["labels"])


DEMO = {"seed": 0, "T": 32, "d": 64}


def demo_json(*checks: tuple[str, float]) -> dict:
    """demo.json as `attnlab demo` writes it, with a check per (form, largest difference) and nothing else measured."""
    return DEMO | {"checks": [{"form": f, "causal": True, "max_err": e, "oracle_err": e, "torch_oracle_err": e,
                               "allowed": 1.0, "ok": True} for f, e in checks],
                   "map_weights": [], "widths": [], "peak": {}, "scale_T": 64, "seconds": 0.0, "machine": {},
                   "versions": {}}


@pytest.mark.parametrize(("name", "edit", "field"), [
    ("bench.json", lambda d: d["results"][1].update(seq="x"),
     "results[1].seq should be an integer, got the string 'x'"),
    ("train.json", lambda d: d["variants"]["sqrt"].update(val_loss="low"), "variants.sqrt.val_loss should be a list"),
    ("tie_kv.json", lambda d: d.pop("machine"), "machine is missing"),
    ("demo.json", lambda d: d.update(checks=[{"form": "loops"}]), "checks[0].causal is missing"),
])
def test_a_wrong_results_file_is_named_with_its_field(tmp_path, name, edit, field):
    from .conftest import TIE

    files = {"bench.json": BENCH, "train.json": TRAIN, "tie_kv.json": TIE, "demo.json": DEMO}
    data = json.loads(json.dumps(files[name]))
    edit(data)
    (tmp_path / name).write_text(json.dumps(data))
    read = {"bench.json": lambda: sources.bench(tmp_path, True), "demo.json": lambda: sources.demo(tmp_path, 0)}
    with pytest.raises(ValueError) as e:
        read.get(name, lambda: sources.train(tmp_path, True))()
    assert str(e.value).startswith(str(tmp_path / name)) and field in str(e.value) and "run it again" in str(e.value)


def test_head_labels_follow_the_measurements():
    from attnlab.lesson import heads

    tokens = list("the cat")
    T = len(tokens)
    prev = torch.zeros(T, T)
    prev[0, 0] = 1
    for i in range(1, T):
        prev[i, i - 1], prev[i, i] = 0.8, 0.2  # 0.8 one step back
    s = heads.head_stats(tokens, prev)
    assert s.pattern == "previous" and s.previous == pytest.approx(0.8) and s.same == pytest.approx(0.2)
    assert s.label == "previous-token head: 0.80 of its weight one step back"
    assert s.word == "cat" and s.word_share == pytest.approx(1.0)  # the last "t": 0.8 on "a", 0.2 on itself
    assert heads.head_stats(tokens, prev, query=4).word is None  # "c" puts 0.8 on the space: no word reaches 0.5
    uniform = torch.tril(torch.ones(T, T))
    uniform = uniform / uniform.sum(-1, keepdim=True)
    u = heads.head_stats(tokens, uniform)
    assert u.pattern == "broad" and "spreads its weight" in u.label
    assert u.boundary == pytest.approx(sum(1 / (i + 1) for i in range(3, T)) / (T - 1))  # the space at 3
    to_the = torch.zeros(T, T)
    to_the[:, 0] = 1.0  # every query on "t" of "the": a first-token head, and "-> the" for the last query
    f = heads.head_stats(tokens, to_the)
    assert f.pattern == "first" and f.word == "the" and f.word_share == 1.0
    word_of, ws = heads.words(["ĠThe", "Ġcat", "s", ",", "Ġsat"])  # word pieces: Ġ starts a word
    assert ws == ["The", "cats", "sat"] and word_of == [0, 1, 1, -1, 2]
    total, mean = heads.word_shares(list("a bb"), [0.1, 0.1, 0.4, 0.4])
    assert total == [0.1, 0.8] and mean == [0.1, 0.4]  # per character, a long word does not win by length
    with pytest.raises(ValueError, match="weights must be 7 x 7"):
        heads.head_stats(tokens, torch.zeros(6, 6))


def test_induction_and_the_even_spread_without_the_mask():
    from attnlab.lesson import heads

    tokens = list("abcabc")  # query 3..5 repeat 0..2: the token after the earlier copy is i - 2
    T = len(tokens)
    copy = torch.zeros(T, T)
    copy[0, 0], copy[1, 0], copy[2, 0] = 1, 1, 1
    for i in range(3, T):
        copy[i, i - 2] = 1.0
    s = heads.head_stats(tokens, copy)
    assert s.induction == pytest.approx(1.0) and s.pattern == "induction"
    assert s.label == "induction head: 1.00 of its weight on the token after an earlier copy of the query's"
    assert heads.head_stats(list("abcd"), torch.eye(4)).induction is None  # no token appears twice
    full = torch.full((T, T), 1.0 / T)  # no mask: every query spreads over all T keys
    causal, free = heads.head_stats(tokens, full), heads.head_stats(tokens, full, causal=False)
    assert free.label.endswith(f"even spread {math.log(T):.2f})")  # log T: every key visible
    assert heads.even_spread(T, causal=True) < math.log(T)
    assert causal.pattern == free.pattern == "broad" and causal.entropy == free.entropy
    assert heads.even_spread(T, causal=False) == pytest.approx(math.log(T))
