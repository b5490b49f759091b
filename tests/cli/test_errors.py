"""What a newcomer meets when something goes wrong on the command line, as a table: one line per case.

Each case is (command, exit code, the first words on stderr). Every case runs in this process through
``attnlab.cli.main`` and must end with that code, its stderr must start with those words and, for an
error, be that one line; a traceback anywhere fails it. Names in braces are files made once for the
table (``{full}`` is a new folder each time, whose every output file lies on a full device: each
``NAME.tmp`` is a link to the full device, so the write fails with the kernel's own ENOSPC); the modules of
functions given as ``--impl module:function`` lie in ``{code}``, on the path of the child process that
verify runs them in. A new case is one more line.
"""

import json
import os
import shlex
import subprocess
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch

from attnlab import kernels
from attnlab.cli import main
from attnlab.nn.gpt import GPT, GPTConfig
from attnlab.train import checkpoint
from attnlab.train.train import PRESETS
from tests.helpers import full_device

TRITON = kernels.get("triton").why_not("cpu") is not None  # no interpreter in this process: triton cannot run

# Every file a command writes into its --out folder.
OUTPUTS = ["attention_map.png", "scale_demo.png", "demo.json", "bench.json", "bench.csv", "bench.png",
           "explore-no-mask.png", "explore-no-mask.json", "lesson.html", "train.png", "train.json",
           "checkpoints/scale-sqrt.pt", "checkpoints/scale-none.pt", "checkpoints/scale-inv.pt", "attention_lab.py"]
BENCH = "bench --seq 16 --impl matrix --heads 1 --head-dim 8 --repeats 1 --warmup 1 --matmul-size 64"
TINY = "train --preset tiny --scale sqrt --steps 1 --eval-every 1"
BIG = "99999999999999999999999"  # past what torch's generator takes: was an OverflowError traceback

E = "error:"
_DEF, _TINY = PRESETS["default"], PRESETS["tiny"]  # the refusals name the settings that differ
CASES = [
    # a checkpoint that is not what `sample` needs: named in one line
    ("sample --ckpt {marker}", 2, f"attnlab sample: {E} checkpoint {{marker}} has no model_config, model, chars, "
                                  "step: it is not a whole checkpoint"),
    ("sample --ckpt {unknown}", 2, f"attnlab sample: {E} checkpoint {{unknown}}: model_config has settings this "
                                   "attnlab does not know: flavour"),
    ("sample --ckpt {shape}", 2, f"attnlab sample: {E} checkpoint {{shape}}: weight wte.weight has shape (5, 8), but "
                                 "the model its model_config describes has (5, 16)"),
    ("sample --ckpt {vocab}", 2, f"attnlab sample: {E} checkpoint {{vocab}} has a vocabulary of 2 characters for a "
                                 "model of 5 tokens"),
    ("sample --ckpt {nan}", 2, f"attnlab sample: {E} checkpoint {{nan}}: weight wte.weight holds NaN or infinite "
                               "values (the run diverged at step 7)"),
    ("sample --ckpt {notafile}", 2, f"attnlab sample: {E} checkpoint {{notafile}} cannot be read"),
    # odd numbers
    ("sample --ckpt {good} --prompt ab --tokens 4 --temperature 1e-320", 0, "[4 characters from sqrt at step 3"),
    ("sample --ckpt {good} --tokens 100000000000000000000", 2, f"attnlab sample: {E} --tokens "
                                                              "100000000000000000000: at most 1,000,000 characters"),
    pytest.param("sample --ckpt {good} --impl triton", 2, f"attnlab sample: {E} --impl triton cannot run on cpu here",
                 marks=pytest.mark.skipif(not TRITON, reason="Triton's interpreter is on in this process")),
    # bench: a form named that could only be skipped, a mask that cannot be built
    pytest.param("train --impl triton --preset tiny --out {folder}", 2, f"attnlab train: {E} --impl triton cannot "
                 "run on cpu here", marks=pytest.mark.skipif(not TRITON, reason="Triton's interpreter is on")),
    pytest.param("verify --impl triton --quick", 2, f"attnlab verify: {E} form 'triton' cannot be checked on cpu here",
                 marks=pytest.mark.skipif(not TRITON, reason="Triton's interpreter is on in this process")),
    # verify: a name that names nothing, a device that is not here, a function whose module ends the process
    ("verify --model ''", 2, f"attnlab verify: {E} --model needs a Hugging Face hub name or a local folder, got an "
                             "empty name"),
    ("verify --device cuda --impl matrix", 2, f"attnlab verify: {E} --device cuda: no such device here"),
    ("verify --device nonsense", 2, f"attnlab verify: {E} --device 'nonsense' is not a torch device"),
    ("verify --only 'no such case'", 2, f"attnlab verify: {E} --only 'no such case' matches no case; case names "
                                        "read like: basic, causal"),
    pytest.param("verify --impl ends_at_import:f --quick", 2, f"attnlab verify: {E} loading --impl ends_at_import:f "
                 "ended the process (exit code 0) before the function was found", marks=pytest.mark.slow),
    pytest.param("verify --impl exits_at_import:f --quick", 2, f"attnlab verify: {E} module 'exits_at_import' called "
                 "sys.exit(0) when imported for --impl 'exits_at_import:f'", marks=pytest.mark.slow),
    ("bench --mod alibi --impl sdpa", 2, f"attnlab bench: {E} impl 'sdpa' takes no score modifier (mod 'alibi'); "
                                         "forms that do: loops, matrix, flash"),
    pytest.param("bench --impl triton", 2, f"attnlab bench: {E} impl 'triton' cannot run on cpu here",
                 marks=pytest.mark.skipif(not TRITON, reason="Triton's interpreter is on in this process")),
    ("bench --mask document:100 --seq 10", 2, f"attnlab bench: {E} mask 'document:100' asks for 100 documents in 10 "
                                              "positions"),
    # --json naming a folder: refused before the run (it used to leave DIR.tmp behind after it)
    ("ring --json {folder}", 2, f"attnlab ring: {E} --json {{folder}} is a folder; give the name of a file"),
    ("verify --json {folder}", 2, f"attnlab verify: {E} --json {{folder}} is a folder"),
    # a run must not replace a run with other settings
    ("demo --seed 3 --out {ran}", 2, f"attnlab demo: {E} {{ran}}/demo.json holds the demo with other settings (seed: "
                                     "0 -> 3); add --force to replace it, or give this run its own --out DIR"),
    ("explore no-mask --seed 2 --out {ran}", 2, f"attnlab explore: {E} {{ran}}/explore-no-mask.json holds experiment "
                                                "no-mask with other settings (seed: 0 -> 2)"),
    ("train --preset tiny --out {ran}", 2, f"attnlab train: {E} {{ran}}/train.json holds a training run with other "
                                           f"settings (steps: {_DEF.steps} -> {_TINY.steps}; batch_size: "
                                           f"{_DEF.batch_size} -> {_TINY.batch_size}"),
    ("train --preset tiny --procs 2 --out {ran}", 2, f"attnlab train: {E} {{ran}}/train.json holds a training run "
                                                     f"with other settings (steps: {_DEF.steps} -> {_TINY.steps};"),
    (f"train --steps {2 * _DEF.steps} --out {{ran}}", 2, f"attnlab train: {E} {{ran}}/train.json holds a training "
     f"run with other settings (steps: {_DEF.steps} -> {2 * _DEF.steps}); add --resume to train on from where it "
     "stopped, add --force"),
    ("train --preset tiny --scale sqrt --out {interrupted}", 2, f"attnlab train: {E} "
     f"{{interrupted}}/checkpoints/scale-sqrt.pt holds a checkpoint with other settings (steps: {_DEF.steps} -> "
     f"{_TINY.steps}"),
    (f"{BENCH} --out {{ran}}", 2, f"attnlab bench: {E} {{ran}}/bench.json holds a benchmark with other settings "
                                  "(seq: [128, 512, 2048] -> [16]"),
    # train --resume from a checkpoint that is not whole
    ("train --preset tiny --scale sqrt --resume --out {resume_marker}", 2,
     f"attnlab train: {E} checkpoint {{resume_marker}}/checkpoints/scale-sqrt.pt has no model_config, model, chars, "
     "step, train_config"),
    ("lesson --quick --out {lesson_bad}", 2, f"attnlab lesson: {E} checkpoint "
     "{lesson_bad}/checkpoints/scale-sqrt.pt has no model_config"),
    # a full disk: the file that could not be written, the reason, and that the others are whole
    pytest.param("demo --out {full}", 2, f"attnlab demo: {E} cannot write {{full}}/attention_map.png: No space left "
                 "on device; attention_map.png was not created, and the files written before it are complete",
                 marks=pytest.mark.slow),
    pytest.param("explore no-mask --out {full}", 2, f"attnlab explore: {E} cannot write {{full}}/explore-no-mask.png: "
                 "No space left on device", marks=pytest.mark.slow),
    pytest.param(f"{BENCH} --out {{full}}", 2, f"attnlab bench: {E} cannot write {{full}}/bench.json: No space left "
                 "on device", marks=pytest.mark.slow),
    # lesson.html on a full disk: the whole command, and the function that writes it
    # (test_the_lesson_page_on_a_full_disk_is_a_cannot_write: the page before it is kept)
    pytest.param("lesson --quick --out {full}", 2, f"attnlab lesson: {E} cannot write {{full}}/lesson.html: No space "
                 "left on device", marks=pytest.mark.slow),
    (f"{TINY} --out {{full}}", 2, f"attnlab train: {E} cannot write {{full}}/checkpoints/scale-sqrt.pt: "
     "No space left on device"),
    # (train --procs 2 on a full disk: tests/cli/test_nothing_left.py, which also checks no rank is left running)
    pytest.param(f"{BENCH} --max-memory 1", 2, f"attnlab bench: {E} nothing was measured: every case was skipped",
                 marks=pytest.mark.slow),
    # devices that torch names but that are not here, checked before anything runs (a user's function too)
    ("verify --device cpu:1 --impl matrix", 2, f"attnlab verify: {E} --device cpu:1: no such device here (torch has "
                                               "one CPU device, cpu"),
    ("verify --device meta --impl matrix", 2, f"attnlab verify: {E} --device meta: meta tensors hold shapes without "
                                              "numbers, so there is nothing to check on it"),
    ("verify --device meta --impl plain:attention", 2, f"attnlab verify: {E} --device meta: meta tensors hold shapes"),
    ("verify --device cuda:99 --impl matrix", 2, f"attnlab verify: {E} --device cuda:99: no such device here ("),
    # --json and --out that would write nothing, or onto a full device
    ("verify --json '' --impl matrix", 2, f"attnlab verify: {E} --json '': an empty file name; give the name of a "
                                         "file to write"),
    ("ring --json ''", 2, f"attnlab ring: {E} --json '': an empty file name"),
    ("verify --json {devfull} --impl matrix --quick --only basic --show failures", 2,
     f"attnlab verify: {E} cannot write {{devfull}}: No space left on device; the files written before "
     "it are complete"),
    ("demo --out ''", 2, f"attnlab demo: {E} --out '': an empty folder name; give a folder, or leave --out out"),
    (f"{BENCH} --out ''", 2, f"attnlab bench: {E} --out '': an empty folder name"),
    # --impl package.module:function spelt with a space: named before a child process looks for ' fn'
    ("verify --impl 'plain: attention'", 2, f"attnlab verify: {E} --impl 'plain: attention' has a space in it; "
                                           "write package.module:function without spaces, e.g. 'plain:attention'"),
    ("verify --impl plain:", 2, f"attnlab verify: {E} --impl 'plain:': '' is not a function name"),
    # lab start onto a full disk: no file is left, so a second run fails the same way (the next case's own folder)
    ("lab start {full}", 2, f"attnlab lab: {E} cannot write {{full}}/attention_lab.py: No space left on device; no "
                            "file was left, run it again when there is room"),
    # lesson --build: a log that cannot be written stops it in one line
    ("lesson --build --out {logdir}", 2, f"attnlab lesson: {E} cannot write {{logdir}}/lesson-build.log: Is a "
                                         "directory"),
    # (its log on a full disk: test_the_build_log_on_a_full_disk_is_a_cannot_write, on the log itself)
    # empty names that quietly meant "every form", "the default", "here"; folders where a file belongs
    ("verify --impl ''", 2, f"attnlab verify: {E} --impl '': an empty form name; give one or more of"),
    ("verify --impl matrix,", 2, f"attnlab verify: {E} --impl 'matrix,': an empty form name"),
    (f"{BENCH} --max-memory ''", 2, f"attnlab bench: {E} --max-memory '': give a size such as 512M"),
    ("lesson --model ''", 2, f"attnlab lesson: {E} --model needs a Hugging Face hub name or a local folder, got an "
                             "empty name"),
    ("sample --ckpt ''", 2, f"attnlab sample: {E} --ckpt needs a checkpoint file"),
    ("sample --ckpt {folder}", 2, f"attnlab sample: {E} checkpoint {{folder}} is a folder, not a file"),
    ("train --preset tiny --corpus {folder}", 2, f"attnlab train: {E} --corpus {{folder}}: no such file (it is a "
                                                 "folder)"),
    ("lab start ''", 2, f"attnlab lab: {E} lab start DIR: an empty folder name"),
    ("lesson --quick --out {resultdir}", 2, f"attnlab lesson: {E} {{resultdir}}/demo.json is a folder, not a result "
                                           "file; remove it or run the command again"),
    # lab check: the learner's file loaded in a process of its own; whatever it does at import is one line
    ("lab check {code}/binary.py", 2, f"attnlab lab: {E} {{code}}/binary.py: cannot read it ('utf-8' codec can't "
                                     "decode byte 0xff"),
    ("lab check {folder}", 2, f"attnlab lab: {E} {{folder}}: no such file (it is a folder)"),
    pytest.param("lab check {code}/ends_at_import.py", 2, f"attnlab lab: {E} loading {{code}}/ends_at_import.py "
                 "ended the process (exit code 0) before the function was found", marks=pytest.mark.slow),
    pytest.param("lab check {code}/killed_at_import.py", 2, f"attnlab lab: {E} loading {{code}}/killed_at_import.py "
                 "ended the process (signal 9, SIGKILL: out of memory, or killed)", marks=pytest.mark.slow),
    pytest.param("lab check {code}/ctrl_c_at_import.py", 2, f"attnlab lab: {E} {{code}}/ctrl_c_at_import.py, line 1: "
                 "importing it raised KeyboardInterrupt", marks=pytest.mark.slow),
    pytest.param("verify --impl ctrl_c_at_import:f", 2, f"attnlab verify: {E} cannot import module "
                 "'ctrl_c_at_import' for --impl 'ctrl_c_at_import:f': importing it raised KeyboardInterrupt",
                 marks=pytest.mark.slow),
    # the usage errors each command once met in a subprocess of its own (the entry point itself: tests/cli/test_cli.py)
    ("nope", 2, "attnlab: error: argument COMMAND: invalid choice: 'nope' (choose from 'demo', 'verify'"),
    ("demo --seed x", 2, f"attnlab demo: {E} argument --seed: expected an integer seed, got 'x'"),
    ("demo --seed -1", 2, f"attnlab demo: {E} argument --seed: expected a seed from 0 to 4294967295, got -1"),
    (f"demo --seed {BIG}", 2, f"attnlab demo: {E} argument --seed: expected a seed from 0 to 4294967295, got {BIG}"),
    (f"verify --seed {BIG}", 2, f"attnlab verify: {E} argument --seed: expected a seed from 0 to 4294967295"),
    (f"ring --seed {BIG}", 2, f"attnlab ring: {E} argument --seed: expected a seed from 0 to 4294967295"),
    ("verify --dtype int8", 2, f"attnlab verify: {E} --dtypes 'int8': choose from float32, float64, bfloat16"),
    pytest.param("verify --impl nosuchmodule:fn", 2, f"attnlab verify: {E} cannot import module 'nosuchmodule' for "
                 "--impl 'nosuchmodule:fn'", marks=pytest.mark.slow),  # imported in verify's child process
    ("verify --impl fast", 2, f"attnlab verify: {E} unknown impl 'fast'; known forms: flash, loops, matrix"),
    ("verify --impl ring", 2, f"attnlab verify: {E} form 'ring' runs only across the ranks of a torch.distributed "
                              "process group; check it with `attnlab ring`"),
    ("verify --impl matrix --quick --json {afile}/v.json", 2, f"attnlab verify: {E} cannot write {{afile}}/v.json"),
    ("demo --out {afile}", 2, f"attnlab demo: {E} --out {{afile}} is a file, not a folder"),
    ("demo --out /proc", 2, f"attnlab demo: {E} cannot write to output folder /proc"),
    # seconds past a day: 1e12 s hung verify (its worker's wait overflowed) and was a traceback from lab check
    ("verify --timeout 1e12", 2, f"attnlab verify: {E} argument --timeout: must be a positive number of seconds, at "
                                 "most 86400 (a day), got '1e12'"),
    ("lab check x.py --max-seconds 1e12", 2, f"attnlab lab check: {E} argument --max-seconds: must be a positive "
                                             "number of seconds, at most 86400 (a day), got '1e12'"),
    ("bench --budget 1e20", 2, f"attnlab bench: {E} argument --budget: must be a positive number of seconds, at most "
                               "86400 (a day)"),
    ("train --timeout 86401", 2, f"attnlab train: {E} argument --timeout: must be a positive number of seconds, at "
                                 "most 86400 (a day), got '86401'"),
    ("ring --timeout 1e20", 2, f"attnlab ring: {E} timeout (the process group's) must be a positive number of seconds, "
                               "at most 86400 (a day), got 1e+20"),
    ("ring --time-limit 1e12", 2, f"attnlab ring: {E} launch timeout must be a positive number of seconds, at most "
                                  "86400 (a day), got 1000000000000.0"),
    # more threads than cores: refused before anything runs (1,024 ran minutes at load 300; 100,000 segfaulted)
    ("tune --threads 1024", 2, f"attnlab tune: {E} argument --threads: 1024 threads on a machine with "),
    ("tune --threads 100000 --show", 2, f"attnlab tune: {E} argument --threads: 100000 threads on a machine with "),
    ("tune --threads 99999999999 --show", 2, f"attnlab tune: {E} argument --threads: 99999999999 threads on a "),
    ("tune --threads 0 --show", 2, f"attnlab tune: {E} argument --threads: expected a positive integer, got 0"),
    ("bench --threads 4096 --seq 16", 2, f"attnlab bench: {E} argument --threads: 4096 threads on a machine with "),
    ("bench --out /proc --seq 16 --impl matrix", 2, f"attnlab bench: {E} cannot write to output folder /proc"),
    ("bench --mod softcap:zero --seq 16", 2, f"attnlab bench: {E} unknown score modifier 'softcap:zero'; choose from "
                                             "softcap:CAP, alibi"),
    ("explore no-such-thing", 2, f"attnlab explore: {E} unknown experiment 'no-such-thing'; choose one of: no-mask"),
    ("lesson --out {afile}", 2, f"attnlab lesson: {E} --out {{afile}} is a file, not a folder"),
    ("lesson --quick --out {demo_unreadable}", 2, f"attnlab lesson: {E} {{demo_unreadable}}/demo.json is not readable "
                                                  "JSON (Expecting property name"),
    ("lesson --quick --out {demo_wrong}", 2, f"attnlab lesson: {E} {{demo_wrong}}/demo.json: checks should be a list, "
                                             "got an object, so it is not a result of `attnlab demo`"),
]


class Files(dict):
    """The table's files by name; ``{full}`` is a new full folder for each case (:meth:`case`)."""

    def __init__(self, root: Path, **files):
        super().__init__({k: str(v) for k, v in files.items()})
        self.root, self.fulls = root, 0

    def case(self) -> dict:
        """The names for one case: the same ``{full}`` in its command and its message."""
        self.fulls += 1
        return {**self, "full": str(full_folder(self.root / f"full{self.fulls}"))}


def full_folder(path: Path) -> Path:
    """A folder in which every output file lies on a full device (its NAME.tmp links to one)."""
    full = full_device(path.parent)
    for name in OUTPUTS:
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / f"{name}.tmp").symlink_to(full)
    return path


def _checkpoints(root: Path) -> dict:
    """A good tiny checkpoint and the broken ones of the table."""
    cfg = GPTConfig(vocab_size=5, block_size=16, n_layer=1, n_head=2, d_model=8)
    torch.manual_seed(0)
    model = GPT(cfg)
    good = {"model_config": cfg.to_dict(), "model": model.state_dict(), "chars": list("abcd "), "step": 3,
            "variant": "sqrt"}
    nan = {k: v.clone() for k, v in model.state_dict().items()}
    nan["wte.weight"][0, 0] = float("nan")
    kinds = {"good": good, "unknown": {**good, "model_config": {**cfg.to_dict(), "flavour": 1}},
             "shape": {**good, "model_config": {**cfg.to_dict(), "d_model": 16}},
             "vocab": {**good, "chars": ["a", "b"]}, "nan": {**good, "model": nan, "log": {"diverged_at": 7}}}
    paths = {name: checkpoint.save(root / f"{name}.pt", state) for name, state in kinds.items()}
    paths["marker"] = root / "marker.pt"
    torch.save({"format": checkpoint.FORMAT}, paths["marker"])
    paths["notafile"] = root / "notes.pt"
    paths["notafile"].write_text("not a checkpoint\n")
    return paths


def _ran(root: Path) -> Path:
    """A folder that holds the results of runs with the default settings."""
    ran = root / "ran"
    ran.mkdir()
    (ran / "demo.json").write_text(json.dumps({"seed": 0}))
    (ran / "explore-no-mask.json").write_text(json.dumps({"seed": 0}))
    config = {**asdict(PRESETS["default"]), "variants": {"sqrt": {}, "none": {}, "inv": {}}, "data_parallel": 1,
              "context_parallel": 1}
    (ran / "train.json").write_text(json.dumps({"config": config}))
    from attnlab.measure.bench import BenchConfig, known_impls
    from attnlab.results import to_dict

    default = replace(BenchConfig(), impls=tuple(known_impls()))  # as a sweep with default flags writes it
    (ran / "bench.json").write_text(json.dumps({"config": to_dict(default)}))
    return ran


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("errors")
    (root / "folder").mkdir()
    (root / "afile").write_text("")
    for name, text in (("demo_unreadable", "{not json"), ("demo_wrong", '{"seed": 0, "T": 32, "d": 64, "checks": {}}')):
        (root / name).mkdir()
        (root / name / "demo.json").write_text(text)  # a demo.json the lesson cannot read
    made = _checkpoints(root)
    for name in ("resume_marker", "lesson_bad"):  # an output folder whose checkpoint is only a format marker
        (root / name / "checkpoints").mkdir(parents=True)
        (root / name / "checkpoints" / "scale-sqrt.pt").write_bytes(made["marker"].read_bytes())
    code = root / "code"  # the modules of functions given as --impl module:function (on the path of verify's child)
    code.mkdir()
    (code / "ends_at_import.py").write_text("import os\nos._exit(0)\n")
    (code / "exits_at_import.py").write_text("import sys\nsys.exit(0)\n")
    (code / "killed_at_import.py").write_text("import os\nos.kill(os.getpid(), 9)\n")
    (code / "ctrl_c_at_import.py").write_text("raise KeyboardInterrupt\n")
    (code / "binary.py").write_bytes(b"\xff\xfe\x00def attention_by_hand(q, k, v):\n")
    (code / "plain.py").write_text("from torch.nn.functional import scaled_dot_product_attention as attention\n")
    (root / "logdir" / "lesson-build.log").mkdir(parents=True)  # lesson --build's log: a folder, or on a full device
    (root / "resultdir" / "demo.json").mkdir(parents=True)  # a folder where lesson reads demo's result
    (root / "devfull.json").symlink_to("/dev/full")  # written through, the link's target is a full device
    interrupted = root / "interrupted"  # a default run stopped before it wrote train.json: checkpoints only
    checkpoint.save(checkpoint.path_of(interrupted, "scale", "sqrt"), {"train_config": asdict(PRESETS["default"])})
    return Files(root, code=code, folder=root / "folder", afile=root / "afile", ran=_ran(root),
                 demo_unreadable=root / "demo_unreadable", demo_wrong=root / "demo_wrong",
                 resume_marker=root / "resume_marker", lesson_bad=root / "lesson_bad", interrupted=interrupted,
                 logdir=root / "logdir", devfull=root / "devfull.json",
                 resultdir=root / "resultdir", **made)


def _id(case) -> str:
    command = case.values[0] if hasattr(case, "values") else case[0]
    return command[:100]


@pytest.mark.parametrize("command, code, says", CASES, ids=[_id(c) for c in CASES])
def test_the_case_ends_as_the_table_says(files, tmp_path, monkeypatch, capsys, command, code, says):
    monkeypatch.chdir(tmp_path)  # nothing lands in the checkout
    monkeypatch.setenv("PYTHONPATH", files["code"])
    names = files.case() if "{full}" in command else files
    argv = shlex.split(command.format_map(names))
    says = says.format_map(names)
    try:
        assert main(argv) == code
    except SystemExit as e:  # argparse's own errors
        assert e.code == code
    captured = capsys.readouterr()
    err = captured.err
    print(" ".join(argv), "->", code, "\n", err)
    assert "Traceback" not in err + captured.out
    assert err.startswith(says), err
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err


def test_the_build_log_on_a_full_disk_is_a_cannot_write(tmp_path):
    """lesson --build's log: the first line it cannot write stops the build as a CannotWrite naming the log (the
    command turns a CannotWrite into its one line: the {logdir} row of the table)."""
    from types import SimpleNamespace

    from attnlab.cli._lesson_build import _Log
    from attnlab.results.files import CannotWrite

    (tmp_path / "lesson-build.log").symlink_to(full_device(tmp_path))
    log = _Log(tmp_path, SimpleNamespace())  # opening it writes nothing yet: a full device takes that
    with pytest.raises(CannotWrite) as e:
        log.say("step 1: demo")
    print(e.value.path, e.value.reason)
    assert e.value.path == tmp_path / "lesson-build.log" and e.value.reason == "No space left on device"


def test_the_lesson_page_on_a_full_disk_is_a_cannot_write(tmp_path):
    """The page's writer: a full disk is a CannotWrite naming lesson.html, and no lesson.html (nor its .tmp) is
    left; one that was there keeps what it held."""
    from attnlab.report.lesson import _write
    from attnlab.results.files import CannotWrite

    (tmp_path / "lesson.html").write_text("the page before")
    (tmp_path / "lesson.html.tmp").symlink_to(full_device(tmp_path))
    with pytest.raises(CannotWrite) as e:
        _write("<html>a new page</html>", tmp_path / "lesson.html")
    print(e.value.path, e.value.reason)
    assert e.value.path == tmp_path / "lesson.html" and e.value.reason == "No space left on device"
    assert (tmp_path / "lesson.html").read_text() == "the page before"


@pytest.mark.slow
def test_after_a_failed_write_the_files_before_it_are_whole_and_the_old_one_kept(tmp_path, capsys):
    """demo on a folder whose demo.json cannot be replaced: both figures are complete, demo.json as it was."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "demo.json").write_text('{"seed": 0, "earlier": true}')
    (out / "demo.json.tmp").symlink_to(full_device(tmp_path))
    assert main(["demo", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == (f"attnlab demo: error: cannot write {out}/demo.json: No space left on device; "
                                    "demo.json keeps what it held, and the files written before it are complete")
    assert f"wrote {out}/attention_map.png" in captured.out and f"wrote {out}/scale_demo.png" in captured.out
    for png in ("attention_map.png", "scale_demo.png"):
        assert (out / png).read_bytes().startswith(b"\x89PNG") and (out / png).read_bytes().endswith(b"IEND\xaeB`\x82")
    assert json.loads((out / "demo.json").read_text()) == {"seed": 0, "earlier": True}
    assert sorted(p.name for p in out.iterdir()) == ["attention_map.png", "demo.json", "scale_demo.png"]  # no .tmp


@pytest.mark.slow
def test_a_real_full_disk(tmp_path, capsys):
    """A 16 KiB tmpfs (where this process may mount one): demo fills it, and says which file did not fit."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(disk)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root and the right to mount)")
    try:
        assert main(["demo", "--out", str(disk)]) == 2
        err = capsys.readouterr().err
        print(err)
        (line,) = err.strip().splitlines()
        assert line.startswith(f"attnlab demo: error: cannot write {disk}/") and "No space left on device" in line
        assert not list(disk.glob("*.tmp"))
        for f in disk.iterdir():  # what was written before is whole
            assert f.suffix != ".png" or f.read_bytes().endswith(b"IEND\xaeB`\x82")
    finally:
        subprocess.run(["umount", str(disk)], check=False)


@pytest.mark.slow
def test_force_replaces_a_run_with_other_settings(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "demo.json").write_text(json.dumps({"seed": 0}))
    assert main(["demo", "--seed", "3", "--out", str(out)]) == 2
    assert json.loads((out / "demo.json").read_text()) == {"seed": 0}  # refused: nothing replaced
    assert main(["demo", "--seed", "3", "--force", "--out", str(out)]) == 0
    assert json.loads((out / "demo.json").read_text())["seed"] == 3
    assert main(["demo", "--seed", "3", "--out", str(out)]) == 0  # the same settings again: a rerun, not a refusal
    assert capsys.readouterr().err.count("error") == 1


def test_a_denormal_temperature_decodes_greedily(files):
    """--temperature 1e-320 (the table's case): the likeliest character every time, whatever the seed, not NaN."""
    from attnlab.train.sample import sample

    greedy = sample(files["good"], prompt="ab", tokens=12, top_k=1).text
    tiny = [sample(files["good"], prompt="ab", tokens=12, temperature=1e-320, seed=s).text for s in (0, 1, 2)]
    print(repr(greedy), tiny)
    assert tiny == [greedy] * 3 and len(greedy) == 12
    assert sample(files["good"], prompt="ab", tokens=12, seed=1).text != greedy  # a real temperature draws


def test_lab_start_on_a_full_disk_leaves_no_file_and_a_second_run_fails_too(tmp_path, capsys):
    """The starter is written whole or not at all: no empty attention_lab.py for the next run to take for the
    learner's; an empty one (as an earlier version left) is written over, a learner's file never."""
    from attnlab.lab.files import starter_text

    folder = tmp_path / "lab"
    folder.mkdir()
    for _ in range(2):
        (folder / "attention_lab.py.tmp").symlink_to("/dev/full")  # the starter's file lies on a full device
        assert main(["lab", "start", str(folder)]) == 2
        err = capsys.readouterr().err
        assert err.strip() == (f"attnlab lab: error: cannot write {folder}/attention_lab.py: No space left on device; "
                               "no file was left, run it again when there is room")
        assert not (folder / "attention_lab.py").exists() and not (folder / "attention_lab.py.tmp").exists()
    (folder / "attention_lab.py").write_text("")
    assert main(["lab", "start", str(folder)]) == 0
    assert f"wrote {folder}/attention_lab.py over the empty file that was there" in capsys.readouterr().out
    assert (folder / "attention_lab.py").read_text() == starter_text()
    (folder / "attention_lab.py").write_text("def attention_by_hand(): ...\n")
    assert main(["lab", "start", str(folder)]) == 0
    assert "is already there: it is yours" in capsys.readouterr().out
    assert (folder / "attention_lab.py").read_text() == "def attention_by_hand(): ...\n"


# The cases of this module measured over 0.3 s of CPU in two runs of make test (tests/costs.py; AMD EPYC, 2 cores),
# where the module's others take hundredths: slow-marked (tests/conftest.py), so make test-fast leaves them to make
# test
SLOW_CASES = {
    "test_the_case_ends_as_the_table_says[train --preset tiny --scale sqrt --steps 1 --eval-every 1 --out {full}]",
}
