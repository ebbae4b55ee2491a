"""Inference on the device with the model as a file: push the int8 model and an input,
run the program built for the board, check the top class and the logits against the
generator's integer pipeline, and record the latency (a JUnit property per sample)."""

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pack_model import pack

pytestmark = pytest.mark.board(kind=["linux", "android", "host"])

LATENCY_BUDGET_US = 50_000  # generous: an emulated Pi under load; a real board is ~100x under it


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return pack(tmp_path_factory.mktemp("model"))


@pytest.mark.parametrize("sample", range(4))
def test_top_class_and_latency(device, packed, sample, record_property):
    model, inputs, expected = packed
    infer = device.build("infer.c")
    device.push(model)
    device.push(inputs[sample], "input.bin")
    result = device.run([infer, "model.bin", "input.bin", "50"], check=True)
    logits = [int(v) for v in re.search(r"logits: (.*)", result.stdout).group(1).split()]
    assert logits == expected[sample]
    top = int(re.search(r"top: (\d+)", result.stdout).group(1))
    assert top == max(range(len(logits)), key=logits.__getitem__)
    latency = float(re.search(r"latency_us: ([\d.]+)", result.stdout).group(1))
    record_property("latency_us", latency)
    assert 0 < latency < LATENCY_BUDGET_US


def test_a_damaged_model_is_refused(device, packed, tmp_path):
    model, inputs, _ = packed
    bad = tmp_path / "model.bin"
    bad.write_bytes(model.read_bytes()[:-5])
    device.push(bad)
    device.push(inputs[0], "input.bin")
    result = device.run([device.build("infer.c"), "model.bin", "input.bin"])
    assert result.returncode == 2 and "is not an MLP1 model" in result.stderr
