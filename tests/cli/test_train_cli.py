"""`attnlab train` and `attnlab sample` end to end on the tiny preset, in this process."""

import json
from pathlib import Path

import pytest

from attnlab.cli import main
from attnlab.train.train import TrainResult

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_train_writes_figure_json_checkpoints_then_sample_decodes(tmp_path, capsys, round_trip):
    out = tmp_path / "out"
    assert main(["train", "--preset", "tiny", "--steps", "8", "--eval-every", "4", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "Removing the 1/sqrt(d) scale visibly destabilised training" in said
    assert "final val loss" in said and "prediction:" in said
    assert (out / "train.png").read_bytes().startswith(PNG)
    j = json.loads((out / "train.json").read_text())
    assert set(j) >= {"config", "versions", "variants"} and list(j["variants"]) == ["sqrt", "none", "inv"]
    for v in j["variants"].values():
        assert v["step"] == [0, 4, 8]
        assert all(len(v[k]) == 3 for k in ("train_loss", "val_loss", "grad_norm", "entropy"))
        assert len(v["entropy"][0]) == j["config"]["n_layer"]
    assert round_trip(j, TrainResult).variants["sqrt"].step == [0, 4, 8]
    ckpt = out / "checkpoints" / "scale-sqrt.pt"
    assert main(["sample", "--ckpt", str(ckpt), "--prompt", "import ", "--tokens", "20"]) == 0
    s = capsys.readouterr()
    assert s.out.startswith("import ") and len(s.out) == len("import ") + 20 + 1
    assert "KV cache" in s.err


@pytest.mark.slow
def test_tie_kv_ablation_reports_both_losses(tmp_path, capsys, round_trip):
    code = main(["train", "--preset", "tiny", "--ablation", "tie-kv", "--steps", "4", "--eval-every", "2",
                 "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Tying the value projection to the key projection" in out and "tied vs" in out
    j = json.loads((tmp_path / "out" / "tie_kv.json").read_text())
    assert list(j["variants"]) == ["untied", "tied"]
    assert list(round_trip(j, TrainResult).variants) == ["untied", "tied"]
    assert (tmp_path / "out" / "tie_kv.png").read_bytes().startswith(PNG)


@pytest.mark.parametrize("args, msg", [
    (["train", "--scale", "half"], "invalid choice"),
    (["train", "--steps", "0"], "positive integer"),
    (["train", "--impl", "nope"], "unknown impl 'nope'"),
    (["train", "--corpus", "no/such/file.txt"], "no such file"),
    (["train", "--scale", "sqrt", "--ablation", "tie-kv"], "not allowed with"),
    (["train", "--device", "tpu"], "--device"),
    (["train", "--impl", "ring"], "torch.distributed group"),
    (["train", "--seed", "99999999999999999999999"], "a seed from 0 to"),
    (["explore", "same-token", "--seed", "99999999999999999999999"], "a seed from 0 to"),
    (["lesson", "--seed", "-3"], "a seed from 0 to"),
    (["sample", "--ckpt", "missing.pt"], "does not exist"),
    (["sample", "--ckpt", "missing.pt", "--impl", "ring"], "torch.distributed group"),
    (["sample"], "--ckpt"),
])
def test_bad_flags_are_one_line_and_exit_2(args, msg, capsys):
    try:
        code = main(args)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and msg in err and "Traceback" not in err


def test_unreadable_checkpoint_and_unwritable_folder_are_one_line(tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("not a checkpoint\n" * 50)
    assert main(["sample", "--ckpt", str(text)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "cannot be read" in err and "weights_only" not in err
    for args in (["train", "--preset", "tiny"], ["explore", "no-mask"], ["lesson", "--quick"]):
        assert main([*args, "--out", str(text / "sub")]) == 2, args  # a folder inside a file cannot be made
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "output folder" in err, err
        if Path("/proc").is_dir():  # a folder that exists but takes no files (even for root)
            assert main([*args, "--out", "/proc"]) == 2, args
            err = capsys.readouterr().err
            assert "cannot write to output folder /proc" in err, err
