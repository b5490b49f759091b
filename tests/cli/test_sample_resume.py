"""`sample` streams and takes only a finite temperature > 0; `train --resume` says where it continues, or why not."""

import pytest
import torch

from attnlab.cli import main
from attnlab.train import sample


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("train") / "out"
    assert main(["train", "--preset", "tiny", "--scale", "sqrt", "--steps", "4", "--eval-every", "2",
                 "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("t", ["inf", "-inf", "nan", "0", "-1"])
def test_temperature_must_be_finite_and_positive(trained, t, capsys):
    assert main(["sample", "--ckpt", str(trained / "checkpoints" / "scale-sqrt.pt"), f"--temperature={t}"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == f"attnlab sample: error: --temperature must be a finite number > 0, got {float(t)}"
    assert captured.out == ""
    with pytest.raises(ValueError, match="temperature must be a finite number > 0, got inf"):
        sample.sample(trained / "checkpoints" / "scale-sqrt.pt", temperature=float("inf"))


def test_sample_streams_each_character_as_it_is_drawn(trained, capsys, monkeypatch, round_trip):
    ckpt = str(trained / "checkpoints" / "scale-sqrt.pt")
    pieces = []
    r = sample.sample(ckpt, "def ", 12, on_text=pieces.append)
    assert pieces == list(r.text) and len(pieces) == 12
    round_trip(r)
    draw, calls = torch.multinomial, []

    def interrupted_after_five(*args, **kw):  # Ctrl-C while the sixth character is drawn
        calls.append(1)
        if len(calls) == 6:
            raise KeyboardInterrupt
        return draw(*args, **kw)

    monkeypatch.setattr(torch, "multinomial", interrupted_after_five)
    assert main(["sample", "--ckpt", ckpt, "--prompt", "def ", "--tokens", "12"]) == 130
    captured = capsys.readouterr()
    assert captured.out == "def " + r.text[:5] + "\n"  # what was drawn was on the screen already
    assert captured.err == "attnlab sample: stopped (Ctrl-C); run it again for the whole text (the same --seed " \
                           "draws the same characters)\n"


def test_resume_without_a_checkpoint_is_exit_2_naming_the_folder(tmp_path, capsys):
    assert main(["train", "--preset", "tiny", "--resume", "--out", str(tmp_path / "fresh")]) == 2
    err = capsys.readouterr().err
    print(err)
    assert len(err.strip().splitlines()) == 1
    assert f"--resume: no checkpoint in {tmp_path / 'fresh' / 'checkpoints'} (looked for scale-sqrt.pt, " \
           "scale-none.pt, scale-inv.pt)" in err


@pytest.mark.slow
def test_resume_says_the_step_it_continues_from(trained, capsys):
    assert main(["train", "--preset", "tiny", "--scale", "sqrt", "--steps", "6", "--eval-every", "2", "--resume",
                 "--out", str(trained)]) == 0
    out = capsys.readouterr().out
    assert f"resuming sqrt from step 4 ({trained / 'checkpoints' / 'scale-sqrt.pt'})" in out
    assert main(["train", "--preset", "tiny", "--steps", "6", "--eval-every", "2", "--resume",
                 "--out", str(trained)]) == 0  # the other variants were never trained here: they start afresh
    out = capsys.readouterr().out
    assert "resuming sqrt from step 6" in out and "none: no checkpoint in" in out and "starts at step 0" in out


# The cases of this module measured over 0.3 s of CPU in two runs of make test (tests/costs.py; AMD EPYC, 2 cores),
# where the module's others take hundredths: slow-marked (tests/conftest.py), so make test-fast leaves them to make
# test
SLOW_CASES = {
    "test_temperature_must_be_finite_and_positive[inf]",
}
