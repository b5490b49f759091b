"""One lesson page, built once through the command line, for the page tests and the browser test."""

import json
import os
import subprocess
import sys

import pytest
import torch


def sinks_result(preset="default", seed=0):
    """A made-up result of `attnlab explore sinks` (2 layers of 3 heads), as this version writes it."""
    import dataclasses

    from attnlab.explore import sinks
    from attnlab.results import machine, versions

    first = {"plain": [[0.61, 0.05, 0.04], [0.06, 0.42, 0.02]], "sinks": [[0.08, 0.04, 0.04], [0.05, 0.06, 0.02]]}
    sink, logits = [[0.55, 0.1, 0.08], [0.11, 0.38, 0.07]], [[2.1, -0.4, -0.6], [-0.2, 1.3, -0.8]]
    return sinks.SinksResult(seed, preset, dataclasses.asdict(sinks.config(preset, seed)), {"name": "python stdlib"},
                             2, 3, first, sink, logits,
                             {"plain": [0.19, 0.2, 0.21, 0.2], "sinks": [0.05, 0.048, 0.05, 0.052]},
                             [0.2, 0.21, 0.2, 0.19], 0.059, {"plain": 2.33, "sinks": 2.31},
                             {"batches": 4, "rows": 32, "T": 64, "queries": "1 .. T-1", "split": "validation"}, 93.0,
                             88.0, machine(), versions())

# Schema-true results as `attnlab bench` and `attnlab train` write them (issues 4 and 5), small and made up, so the
# page's reading of those files is tested without spending minutes measuring.
BENCH = {"machine": {}, "versions": {}, "config": {"seq": [128, 512]}, "matmul_gflops": 50.0,
         "results": [{"impl": i, "seq": s, "time_s": t * s * s, "time_min_s": t * s * s * 0.9,
                      "time_max_s": t * s * s * 1.1, "gflops": 1.0, "peak_bytes": m * s * s, "skipped": None}
                     for i, t, m in (("matrix", 4e-8, 8), ("sdpa", 1e-8, 1), ("flash", 3e-8, 1)) for s in (128, 512)]
         + [{"impl": "loops", "seq": s, "skipped": "estimated 97.5 s a call x 5 calls > budget 30 s"}
            for s in (128, 512)],
         "exponents": {"matrix": {"time": 2.0, "memory": 2.0}, "sdpa": {"time": 1.9, "memory": 1.1}}}


def _log(scale_entropy, qk_growth=1.5):
    return {"step": [0, 10], "train_loss": [4.0, 3.0], "val_loss": [4.1, 3.2 + scale_entropy / 10],
            "grad_norm": [1.0, 0.5], "entropy": [[2.0, 2.1], [scale_entropy, scale_entropy]],
            "peak": [[0.2, 0.2], [0.5, 0.5]], "qk_grad_norm": [[0.3, 0.3], [0.1, 0.1]],
            "score_grad_norm": [[0.02, 0.02], [0.01 * scale_entropy, 0.01 * scale_entropy]],
            "qk_norm": [[30.0, 30.0], [30.0 * qk_growth, 30.0 * qk_growth]]}


TRAIN = {"config": {"kind": "scale", "uniform_entropy": 2.1, "head_dim": 16}, "versions": {}, "machine": {},
         "variants": {"sqrt": _log(1.9), "none": _log(0.2), "inv": _log(3.2, qk_growth=4.0)}}
TIE = {"config": {"kind": "tie-kv", "uniform_entropy": 2.1}, "versions": {}, "machine": {},
       "variants": {"untied": _log(1.9), "tied": _log(2.5)}}


def tiny_checkpoint(path, block_size=64):
    """A real checkpoint in `attnlab train`'s format (its model, its saver), with untrained weights."""
    from attnlab.nn.gpt import GPT, GPTConfig
    from attnlab.train import checkpoint

    chars = sorted(set("the animal did not cross the street because it was tired.,"))
    cfg = GPTConfig(vocab_size=len(chars), block_size=block_size, n_layer=2, n_head=2, d_model=32)
    torch.manual_seed(0)
    checkpoint.save(path, {"model_config": cfg.to_dict(), "model": GPT(cfg).state_dict(), "chars": chars, "step": 0})


@pytest.fixture(scope="session")
def lesson(tmp_path_factory):
    """(completed process, out folder) of `attnlab lesson --quick --open` on a folder with bench, train and a
    checkpoint; the address --open passed to the browser is in out/../opened.txt."""
    out = tmp_path_factory.mktemp("lesson") / "out"
    (out / "checkpoints").mkdir(parents=True)
    (out / "bench.json").write_text(json.dumps(BENCH))
    (out / "train.json").write_text(json.dumps(TRAIN))
    (out / "tie_kv.json").write_text(json.dumps(TIE))
    from attnlab.results import write_json

    write_json(sinks_result(), out / "explore-sinks.json")  # its section, with a table and a figure, on the page
    tiny_checkpoint(out / "checkpoints" / "scale-sqrt.pt")
    # --open goes through Python's webbrowser, which honours $BROWSER: a script that notes the address it was given
    opened = out.parent / "opened.txt"
    recorder = out.parent / "record_url.py"
    recorder.write_text(f"import sys\nopen({str(opened)!r}, 'w').write(sys.argv[1])\n")
    r = subprocess.run([sys.executable, "-m", "attnlab", "lesson", "--quick", "--open", "--out", str(out)],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "BROWSER": f"{sys.executable} {recorder} %s"})
    return r, out
