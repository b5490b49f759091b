"""`attnlab bench` end to end, on tiny sizes (in a subprocess where its allocator must be set up), and its usage
errors. Timings are not asserted."""

import csv
import json

import pytest

from attnlab.cli import main
from attnlab.cli.bench import parse_size

PNG = b"\x89PNG\r\n\x1a\n"
TINY = ["--seq", "256", "512", "1024", "--heads", "2", "--head-dim", "16", "--repeats", "2", "--matmul-size", "256"]


@pytest.mark.slow
def test_bench_writes_table_json_csv_and_plot(run_cli, tmp_path):
    # every block of 64 KiB or more on its own pages: the resident peak counts live tensors exactly
    r = run_cli("bench", *TINY, "--impl", "matrix", "--impl", "sdpa,matrix", "--out", "out",
                env={"MALLOC_MMAP_THRESHOLD_": "65536"})
    print(r.stdout, r.stderr)
    assert r.returncode == 0, r.stderr
    for text in ("attnlab bench", "matmul peak:", "GFLOP/s", "noise floor", "growth with T", "matrix", "done in",
                 "quadratic memory growth measured: matrix peak memory grows as T^"):
        assert text in r.stdout
    out = tmp_path / "out"
    j = json.loads((out / "bench.json").read_text())
    assert set(j) == {"machine", "versions", "config", "matmul_gflops", "results", "exponents", "fit_lengths"}
    assert j["config"]["impls"] == ["matrix", "sdpa"] and j["config"]["seq"] == [256, 512, 1024]
    assert len(j["results"]) == 6 and set(j["exponents"]) == {"matrix", "sdpa"}
    assert all(x["skipped"] is None and x["time_s"] > 0 and x["gflops"] > 0 and x["peak_bytes"] > 0
               for x in j["results"])
    assert "MALLOC_MMAP_THRESHOLD_=65536" in j["machine"]["memory_method"]
    assert 1.75 < j["exponents"]["matrix"]["memory"] < 2.25  # three L x S matrices alive at once, measured
    rows = list(csv.DictReader((out / "bench.csv").read_text().splitlines()))
    assert len(rows) == 6 and rows[0]["impl"] == "matrix" and rows[0]["seq"] == "256"
    data = (out / "bench.png").read_bytes()
    assert data.startswith(PNG) and len(data) > 20_000


@pytest.mark.slow
def test_guard_prints_a_skip_line(capsys, tmp_path):
    assert main(["bench", "--seq", "16", "32", "--heads", "1", "--head-dim", "8", "--repeats", "1", "--impl", "matrix",
                 "--matmul-size", "64", "--max-memory", "1K", "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    out = captured.out
    assert "skipped matrix T=16: estimated" in out and "(--max-memory)" in out
    assert "[ ] quadratic memory growth measured" in out
    # every case skipped: a failed job, not a result -- one line, and no bench.json that holds nothing
    assert captured.err.startswith("attnlab bench: error: nothing was measured: every case was skipped (the table "
                                   "says why; matrix at T=16: estimated")
    assert len(captured.err.strip().splitlines()) == 1 and not (tmp_path / "bench.json").exists()


@pytest.mark.parametrize("args, msg", [
    (["--seq", "0", "16"], "seq must be"),
    (["--impl", "fast,matrix"], "unknown impl 'fast'"),
    (["--impl", ""], "--impl '': an empty form name; give one or more of loops, matrix"),
    (["--impl", "flash,", "--impl", "matrix"], "--impl 'flash,' --impl 'matrix': an empty form name"),
    (["--causal", "--mask", "causal"], "either causal or a mask"),
    (["--max-memory", "lots"], "--max-memory 'lots'"),
    (["--mask", "zigzag"], "unknown mask 'zigzag'"),
    (["--dtype", "int8"], "dtype 'int8'"),
    (["--budget", "-1"], "--budget: must be a positive number of seconds, at most 86400"),
    (["--seq", "x"], "invalid int value"),
    (["--seed", "99999999999999999999999"], "expected a seed from 0 to"),
])
def test_bad_flags_are_one_line_and_exit_2(capsys, args, msg):
    try:
        code = main(["bench", *args])
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and msg in err


def test_parse_size():
    assert parse_size("512") == 512
    assert parse_size("4K") == 4096
    assert parse_size("1.5g") == int(1.5 * 2**30)
    assert parse_size("2GiB") == 2 * 2**30
    for bad in ("", "G", "-1M", "0"):
        with pytest.raises(ValueError, match="--max-memory"):
            parse_size(bad)


def test_help_states_the_config_defaults():
    from attnlab.cli import build_parser
    from attnlab.measure.bench import BenchConfig

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["bench"]
    helps = {a.dest: a.help or "" for a in sub._actions}
    d = BenchConfig()
    assert f"default: {' '.join(map(str, d.seq))})" in helps["seq"]
    for dest, field in [("batch", "batch"), ("heads", "heads"), ("head_dim", "head_dim"), ("dtype", "dtype"),
                        ("device", "device"), ("repeats", "repeats"), ("warmup", "warmup"), ("budget", "budget_s"),
                        ("seed", "seed")]:
        value = getattr(d, field)
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        assert f"default: {shown})" in helps[dest], dest
