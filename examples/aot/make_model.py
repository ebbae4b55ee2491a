"""Makes the example's model and its golden vectors, from a fixed seed: a float MLP
64 -> 32 (ReLU) -> 10 as a TensorFlow SavedModel (mlp_savedmodel/), and golden.h (with
rust/mlp-aot/tests/golden/mod.rs) holding four inputs and the outputs TensorFlow computes
for them. Needs TensorFlow (scripts/setup.sh --aot); the files it writes are committed, so
the tests do not run it.

    python examples/aot/make_model.py
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import tensorflow as tf

HERE = Path(__file__).resolve().parent
SEED = 20261126
INPUTS, HIDDEN, OUTPUTS, CASES = 64, 32, 10, 4


class Mlp(tf.Module):
    def __init__(self, rng: np.random.Generator) -> None:
        super().__init__()
        self.w1 = tf.constant(rng.normal(0, 0.2, (INPUTS, HIDDEN)).astype(np.float32))
        self.b1 = tf.constant(rng.normal(0, 0.1, HIDDEN).astype(np.float32))
        self.w2 = tf.constant(rng.normal(0, 0.2, (HIDDEN, OUTPUTS)).astype(np.float32))
        self.b2 = tf.constant(rng.normal(0, 0.1, OUTPUTS).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([1, INPUTS], tf.float32, name="x")])
    def __call__(self, x):
        hidden = tf.nn.relu(tf.matmul(x, self.w1) + self.b1)
        return {"logits": tf.matmul(hidden, self.w2) + self.b2}


def main() -> None:
    rng = np.random.default_rng(SEED)
    model = Mlp(rng)
    out = HERE / "mlp_savedmodel"
    shutil.rmtree(out, ignore_errors=True)
    tf.saved_model.save(model, str(out), signatures={"serving_default": model.__call__})
    inputs = rng.uniform(-1, 1, (CASES, INPUTS)).astype(np.float32)
    outputs = np.stack([model(inputs[i : i + 1])["logits"].numpy()[0] for i in range(CASES)])
    lines = [
        "// Golden vectors of examples/aot/mlp_savedmodel, as TensorFlow computes them: written by",
        f"// make_model.py (seed {SEED}); do not edit.",
        "#define GOLDEN_CASES 4",
    ]
    for name, values in (("kGoldenInput", inputs), ("kGoldenOutput", outputs)):
        body = ",\n".join("  {" + ", ".join(f"{v:.9g}f" for v in row) + "}" for row in values)
        lines.append(f"static const float {name}[{len(values)}][{values.shape[1]}] = {{\n{body}\n}};")
    (HERE / "golden.h").write_text("\n".join(lines) + "\n")
    rust = [
        "// Golden vectors of examples/aot/mlp_savedmodel, as TensorFlow computes them: written by",
        f"// examples/aot/make_model.py (seed {SEED}); do not edit.",
    ]
    for name, values in (("GOLDEN_INPUT", inputs), ("GOLDEN_OUTPUT", outputs)):
        body = ",\n".join("    [" + ", ".join(f"{v!r}" for v in row.tolist()) + "]" for row in values)
        rust.append(f"pub const {name}: [[f32; {values.shape[1]}]; {len(values)}] = [\n{body},\n];")
    (HERE / "rust" / "mlp-aot" / "tests" / "golden" / "mod.rs").write_text("\n".join(rust) + "\n")


if __name__ == "__main__":
    main()
