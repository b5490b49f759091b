"""On a GPU the default dtypes are float16 and bfloat16 (issue 42 §7): flash kernels refuse float32 and float64, so
verify's CPU defaults would judge a GPU kernel on refusals. The device logic is tested on the CPU: the dtypes
follow the device's type, on the command line and in attnlab.testing alike, and float32 is there when asked."""

import pytest
import torch

import attnlab.testing
from attnlab.cli import main
from attnlab.cli.verify import _dtypes
from attnlab.judge.cases import default_dtypes


@pytest.mark.parametrize("device, want", [
    ("cpu", ("float32", "float64", "bfloat16")),
    ("cuda", ("float16", "bfloat16")),
    ("cuda:1", ("float16", "bfloat16")),
    (torch.device("cuda", 0), ("float16", "bfloat16")),
])
def test_the_default_dtypes_follow_the_device(device, want):
    assert default_dtypes(device) == want


def test_verify_takes_the_devices_dtypes_unless_dtypes_names_others():
    assert _dtypes(None, "cuda") == ["float16", "bfloat16"]
    assert _dtypes(None, "cpu") == ["float32", "float64", "bfloat16"]
    assert _dtypes("float16,bfloat16,float32", "cuda") == ["float16", "bfloat16", "float32"]


def test_attnlab_testing_takes_the_devices_dtypes_unless_told():
    on_gpu = attnlab.testing.cases(device="cuda", only="basic")
    assert {p.values[0].dtype for p in on_gpu} == {"float16", "bfloat16"}
    assert {p.values[0].dtype for p in attnlab.testing.cases(only="basic")} == {"float32", "float64", "bfloat16"}
    asked = attnlab.testing.cases(["float32"], device="cuda", only="basic")
    assert {p.values[0].dtype for p in asked} == {"float32"}


def test_the_help_says_the_gpu_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["verify", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "float32,float64,bfloat16 on the CPU; float16,bfloat16 on a GPU" in text, text
