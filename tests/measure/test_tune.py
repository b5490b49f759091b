"""`attnlab tune`: the choice rule, a whole (small) measurement written to the cache and JSON, the command's errors."""

import json

import pytest

from attnlab.kernels import tuned
from attnlab.measure import tune
from attnlab.results import write_json


def test_a_candidate_is_kept_only_when_it_beats_the_default_by_the_margin():
    scores = {"short tiles": {"256 x 256": 1.0, "512 x 256": 0.96, "128 x 256": 1.2},
              "long tiles": {"256 x 256": 1.0, "512 x 256": 0.94, "512 x 512": 0.97},
              "bands": {"64 rows": 1.0, "32 rows": 1.3}}
    assert tune.choose(scores, 0.05) == {"short tiles": "256 x 256", "long tiles": "512 x 256", "bands": "64 rows"}
    assert tune.choose(scores, 0.0)["short tiles"] == "512 x 256"
    assert tune.choose(scores, 0.1)["long tiles"] == "256 x 256"


def test_candidates_put_the_default_first():
    for group in ("short tiles", "long tiles", "bands"):
        first = next(iter(tune.candidates(group).values()))
        assert first.tiles(2048) == (256, 256) or first.tiles(8192) == (256, 256) or first.band_rows == 64


def test_a_measurement_times_every_candidate_and_caches_the_choice(tiles_cache, tmp_path):
    lines = []
    r = tune.measure(rounds=1, lengths={"short": 64, "long": 128, "sparse": 256}, say=lines.append)
    print("\n".join(lines))
    assert lines[0].startswith("tuning the flash form's tiles: 32 candidate calls x 2, about ")
    n = {g: len(tune.candidates(g)) for g in ("short tiles", "long tiles", "bands")}
    assert len(r.trials) == 2 * n["short tiles"] + n["long tiles"] + 2 * n["bands"]
    assert all(t.median_s > 0 and t.ratio > 0 for t in r.trials)
    assert all(t.ratio == 1.0 for t in r.trials if t.candidate == next(iter(tune.candidates(t.group))))
    assert set(r.scores) == {"short tiles", "long tiles", "bands"}
    assert r.cache == str(tiles_cache)
    entry = json.loads(tiles_cache.read_text())[tuned.key()]
    assert entry == r.sizes and entry["source"].startswith("measured by attnlab tune on ")
    assert tuned.current() == tuned.Sizes.from_dict(r.sizes)
    # the winner of each group is in the sizes (the default's fields are left as None)
    for group, name in tune.choose(r.scores, r.margin).items():
        picked = tune.candidates(group)[name]
        for f, v in picked.as_dict().items():
            if f != "source" and v is not None and name != next(iter(tune.candidates(group))):
                assert r.sizes[f] == v, (group, name, f)
    assert len(tune.describe(r)) == 3
    back = tune.Tuning.from_dict(json.loads(write_json(r, tmp_path / "tune.json").read_text()))
    assert back.sizes == r.sizes and len(back.trials) == len(r.trials)


def test_the_command_refuses_bad_arguments_in_one_line(capsys, tmp_path, monkeypatch):
    from attnlab.cli import main

    for args, env, says in ((["--rounds", "0"], {}, "--rounds 0"), (["--margin", "1"], {}, "--margin 1"),
                            ([], {"ATTNLAB_TILES": "off"}, "--no-save")):  # (--threads: tests/cli/test_errors.py)
        monkeypatch.setenv("ATTNLAB_TILES", env.get("ATTNLAB_TILES", str(tmp_path / "t.json")))
        assert main(["tune", *args]) == 2
        err = capsys.readouterr().err
        print(err)
        assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "t.json").exists()


@pytest.mark.slow
def test_show_prints_what_is_cached(run_cli, tmp_path):
    path = tmp_path / "tiles.json"
    r = run_cli("tune", "--show", "--threads", "1", env={"ATTNLAB_TILES": str(path)})
    assert r.returncode == 0 and "tiles 256 x 256 up to T = 3072" in r.stdout and "(default)" in r.stdout
    import torch

    torch.set_num_threads(1)
    tuned.save(tuned.Sizes(long_q=512, source="measured in a test"), threads=1, path=path)
    r = run_cli("tune", "--show", "--threads", "1", env={"ATTNLAB_TILES": str(path)})
    assert "512 x 256 above" in r.stdout and "measured in a test" in r.stdout, r.stdout


def test_an_unwritable_cache_is_refused_before_measuring_and_a_failed_save_is_one_line(capsys, tmp_path,
                                                                                      monkeypatch):
    from attnlab.cli import main
    from attnlab.results.files import CannotWrite

    folder = tmp_path / "a folder"
    folder.mkdir()
    monkeypatch.setenv("ATTNLAB_TILES", str(folder))
    measured = []
    monkeypatch.setattr(tune, "measure", lambda **kw: measured.append(1))
    assert main(["tune"]) == 2
    err = capsys.readouterr().err
    assert "cannot write the tile cache" in err and "it is a folder" in err and len(err.strip().splitlines()) == 1
    assert not measured  # refused before a minute of measuring
    monkeypatch.undo()
    path = tmp_path / "tiles.json"
    monkeypatch.setenv("ATTNLAB_TILES", str(path))

    def full(*a, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tuned, "save", full)
    with pytest.raises(CannotWrite, match="No space left on device"):
        tune.measure(rounds=1, lengths={"short": 64, "long": 128, "sparse": 256}, say=lambda line: None)
    assert not path.exists() and not list(tmp_path.glob("*.tmp"))


def test_alternate_warms_up_then_reverses_the_order_every_other_round():
    from attnlab.measure import timing

    seen = []
    calls = {n: (lambda n=n: seen.append(n)) for n in "abc"}
    times = timing.alternate(calls, 3, warm=["b"])
    assert seen == ["b", "a", "b", "c", "c", "b", "a", "a", "b", "c"]
    assert {n: len(t) for n, t in times.items()} == {"a": 3, "b": 3, "c": 3} and all(
        x >= 0 for t in times.values() for x in t)
