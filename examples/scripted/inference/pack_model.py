"""The model file and inputs for infer.c, from examples/model/mlp_model.h (the int8 MLP the
model example tests compiled in): the same weights, shipped as a file the way a product
updates its model without a new firmware."""

from __future__ import annotations

import re
import struct
from pathlib import Path

HEADER = Path(__file__).resolve().parents[2] / "model" / "mlp_model.h"


def _values(text: str) -> dict[str, int | list[int]]:
    found: dict[str, int | list[int]] = {}
    for name, value in re.findall(r"#define (MLP_\w+) \(?(-?\d+)\)?", text):
        found[name] = int(value)
    for name, body in re.findall(r"static const \w+ (mlp_\w+)\[[^]]*\] = \{([^}]*)\};", text):
        found[name] = [int(v) for v in body.replace("\n", " ").split(",") if v.strip()]
    return found


def model() -> dict[str, int | list[int]]:
    return _values(HEADER.read_text())


def pack(directory: Path) -> tuple[Path, list[Path], list[list[int]]]:
    """model.bin, one input file per sample, and each sample's expected logits."""
    m = model()
    n_in, n_out = m["MLP_IN"], m["MLP_OUT"]
    header = b"MLP1" + struct.pack(
        "<10i",
        n_in,
        m["MLP_HIDDEN"],
        n_out,
        m["MLP_IN_ZP"],
        m["MLP_HIDDEN_ZP"],
        m["MLP_OUT_ZP"],
        m["MLP_M1"],
        m["MLP_S1"],
        m["MLP_M2"],
        m["MLP_S2"],
    )
    body = b"".join(
        struct.pack(f"<{len(m[name])}{kind}", *m[name])
        for name, kind in (("mlp_w1", "b"), ("mlp_b1", "i"), ("mlp_w2", "b"), ("mlp_b2", "i"))
    )
    path = directory / "model.bin"
    path.write_bytes(header + body)
    inputs, expected = [], []
    for s in range(m["MLP_SAMPLES"]):
        sample = directory / f"input{s}.bin"
        sample.write_bytes(struct.pack(f"<{n_in}b", *m["mlp_inputs"][s * n_in : (s + 1) * n_in]))
        inputs.append(sample)
        expected.append(m["mlp_expected"][s * n_out : (s + 1) * n_out])
    return path, inputs, expected
