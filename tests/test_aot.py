"""Models compiled ahead of time (XLA's tfcompile, from TensorFlow's wheel: scripts/setup.sh
--aot), linked into C tests through the C entry the plugin generates, with no runtime: the
example against TensorFlow's own outputs on host, QEMU user mode and Cortex-M boards; the
build store's keys; and the errors a user meets (a damaged model, a board XLA cannot target,
a model that needs XLA's runtime)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import EXAMPLES, build_report, case_outcomes

from pytest_ondevice.compiling import aot

try:
    aot.compiler()
    HAVE_TF = True
except aot.AotError:
    HAVE_TF = False

pytestmark = pytest.mark.skipif(not HAVE_TF, reason="needs TensorFlow's tfcompile: scripts/setup.sh --aot")
NEEDS_QEMU = pytest.mark.skipif(shutil.which("qemu-system-arm") is None, reason="needs qemu-system-arm")


@pytest.fixture
def mlp(project):
    shutil.copytree(EXAMPLES / "aot", project.path / "aot", ignore=shutil.ignore_patterns("__pycache__", "rust"))
    return project


def tensorflow(script: str, cwd: Path) -> None:
    """A few lines of TensorFlow, in a process of their own (it takes seconds to import)."""
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]


@pytest.mark.parametrize(
    ("board", "device"),
    [
        ("host", ()),
        pytest.param("rpi", ("--device=qemu",), marks=pytest.mark.slow),
        pytest.param("mps2-an386", (), marks=[pytest.mark.slow, NEEDS_QEMU]),
        pytest.param("mps2-an385", (), marks=[pytest.mark.slow, NEEDS_QEMU]),
    ],
)
def test_the_compiled_model_matches_tensorflow_and_reports_its_latency(mlp, board, device):
    result = mlp.run("aot", "-v", *device, board=board)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            f"ondevice model mlp on {board}: kernels * B of code, weights 18 816 B (flash), buffers 512 B of RAM*",
            f"mlp_aot_inference*{board}*MAC*",  # the bench table: the work is the model's MACs
        ]
    )


def test_changing_one_weight_recompiles_the_model_and_nothing_else(mlp):
    first = mlp.run("aot", board="host")
    first.assert_outcomes(passed=2)
    tensorflow(
        """
        import sys
        sys.path.insert(0, "aot")
        import numpy as np, tensorflow as tf, make_model
        m = make_model.Mlp(np.random.default_rng(make_model.SEED))  # the example's weights
        w1 = m.w1.numpy()
        w1[0, 0] += 0.5
        m.w1 = tf.constant(w1)
        tf.saved_model.save(m, "aot/changed", signatures={"serving_default": m.__call__})
        """,
        mlp.path,
    )
    shutil.rmtree(mlp.path / "aot" / "mlp_savedmodel")
    (mlp.path / "aot" / "changed").rename(mlp.path / "aot" / "mlp_savedmodel")
    again = mlp.run("aot", "-v", board="host")
    # tfcompile ran once more; the generated entry, the test and the runtime were reused
    assert build_report(again) == {"compiled": 1, "reused": 3, "linked": 1, "link_reused": 0}
    outcomes = case_outcomes(again)
    assert outcomes["MatchesTensorFlowOnTheGoldenInputs"] == "FAILED"  # the binary runs the new weights
    unchanged = mlp.run("aot", board="host")
    assert build_report(unchanged)["compiled"] == 0 and build_report(unchanged)["linked"] == 0


MODEL_TEST = """
#include "micro_test.h"
#include "net_model.h"
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(Runs) {
  float x[NET_X_COUNT] = {0}, y[NET_Y_COUNT];
  TF_LITE_MICRO_EXPECT_EQ(net_run(x, y), 0);
}
TF_LITE_MICRO_TESTS_END
"""


def with_net(project, saved: Path | None = None) -> None:
    """A directory whose test calls net_run() of the model in net/ (a copy of `saved`, if given)."""
    if saved is not None:
        shutil.copytree(saved, project.path / "net")
    project.write("ondevice.toml", '[models.net]\nsaved_model = "net"\n')
    project.write("net_test.c", MODEL_TEST)


def test_a_damaged_saved_model_is_an_error_naming_the_model_the_board_and_tfcompiles_message(mlp):
    with_net(mlp, mlp.path / "aot" / "mlp_savedmodel")
    (mlp.path / "net" / "saved_model.pb").write_bytes(b"\x08\x01garbage, not a protobuf")
    result = mlp.run("net_test.c", "-rE", board="host")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*model 'net' could not be compiled for board 'host' (target x86_64-pc-linux; tfcompile*"]
    )
    assert "Traceback" not in result.stdout.str().split("could not be compiled")[0]


def test_a_board_without_a_target_triple_is_an_error_naming_the_model_and_the_board(mlp):
    with_net(mlp, mlp.path / "aot" / "mlp_savedmodel")
    result = mlp.run("net_test.c", "-rE", board="riscv32-qemu")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*model 'net' (*ondevice.toml) cannot be compiled for board 'riscv32-qemu'*[[]aot[]] triple*"]
    )


def test_a_misspelt_model_directory_names_the_file_and_the_key(project):
    project.write("ondevice.toml", '[models.net]\nsaved_model = "nowhere"\n')
    project.write("net_test.c", MODEL_TEST)
    result = project.run("net_test.c", board="host")
    result.stdout.fnmatch_lines(
        ["*ondevice.toml: key 'models.net.saved_model': nowhere is not a SavedModel directory*"]
    )
    assert result.ret != 0


def test_a_convolution_needs_xlas_runtime_and_is_an_error_naming_it(project):
    tensorflow(
        """
        import numpy as np, tensorflow as tf
        class Conv(tf.Module):
            def __init__(self):
                super().__init__()
                self.k = tf.constant(np.ones((3, 3, 1, 2), np.float32))
            @tf.function(input_signature=[tf.TensorSpec([1, 8, 8, 1], tf.float32, name="x")])
            def __call__(self, x):
                return {"y": tf.nn.conv2d(x, self.k, 1, "SAME")}
        m = Conv()
        tf.saved_model.save(m, "net", signatures={"serving_default": m.__call__})
        """,
        project.path,
    )
    with_net(project)
    result = project.run("net_test.c", "-rE", board="host")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*model 'net' cannot run on board 'host' without XLA's runtime: it compiles to Convolution Thunk*"]
    )


def test_the_generated_entry_is_callable_from_cpp(mlp):
    mlp.write(
        "aot/cpp_test.cc",
        """
        #include "micro_test.h"
        #include "mlp_model.h"
        #include "golden.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(CallsTheModelFromCpp) {
          float logits[MLP_LOGITS_COUNT];
          TF_LITE_MICRO_EXPECT_EQ(mlp_run(kGoldenInput[1], logits), 0);
          TF_LITE_MICRO_EXPECT_NEAR(kGoldenOutput[1][3], logits[3], 1e-5f);
        }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    mlp.run("aot/cpp_test.cc", board="host").assert_outcomes(passed=1)


INT8_TEST = """
#include "micro_test.h"
#include "q_model.h"
#include "golden.h"
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(Int8MatchesTensorFlowExactly) {
  int8_t y[Q_Y_COUNT];
  TF_LITE_MICRO_EXPECT_EQ(q_run(kX, y), 0);
  for (int i = 0; i < Q_Y_COUNT; ++i) TF_LITE_MICRO_EXPECT_EQ(kY[i], y[i]);
}
TF_LITE_MICRO_TESTS_END
"""


@pytest.mark.parametrize("board", ["host", pytest.param("mps2-an386", marks=[pytest.mark.slow, NEEDS_QEMU])])
def test_an_int8_model_with_int32_accumulation_runs_without_a_runtime_and_matches_exactly(project, board):
    tensorflow(
        """
        import numpy as np, tensorflow as tf
        rng = np.random.default_rng(1)
        w = rng.integers(-127, 128, (64, 16)).astype(np.int8)
        class Q(tf.Module):
            def __init__(self):
                super().__init__()
                self.w = tf.constant(w)
            @tf.function(input_signature=[tf.TensorSpec([1, 64], tf.int8, name="x")])
            def __call__(self, x):  # int8 in, int32 accumulation, requantized by a multiply and a shift
                acc = tf.matmul(tf.cast(x, tf.int32), tf.cast(self.w, tf.int32))
                return {"y": tf.cast(tf.clip_by_value(tf.bitwise.right_shift(acc * 3, 8), -128, 127), tf.int8)}
        m = Q()
        tf.saved_model.save(m, "q", signatures={"serving_default": m.__call__})
        x = rng.integers(-128, 128, (1, 64)).astype(np.int8)
        y = m(tf.constant(x))["y"].numpy()[0]
        c = lambda v: ", ".join(str(int(i)) for i in v)
        open("golden.h", "w").write(
            f"static const int8_t kX[64] = {{{c(x[0])}}};\\nstatic const int8_t kY[16] = {{{c(y)}}};\\n"
        )
        """,
        project.path,
    )
    project.write("ondevice.toml", '[models.q]\nsaved_model = "q"\n')
    project.write("q_test.c", INT8_TEST)
    project.run("q_test.c", board=board).assert_outcomes(passed=1)


@pytest.mark.skipif(not Path("/usr/bin/cargo").exists(), reason="needs Debian's cargo: scripts/setup.sh --rust")
@pytest.mark.parametrize("board", ["host", pytest.param("rpi", marks=pytest.mark.slow)])
def test_a_rust_crate_calls_the_compiled_model_through_the_generated_entry(mlp, board):
    crate = shutil.ignore_patterns("target", "Cargo.lock")
    shutil.copytree(EXAMPLES / "aot" / "rust", mlp.path / "aot" / "rust", ignore=crate)
    device = ("--device=qemu",) if board == "rpi" else ()
    result = mlp.run("aot/rust", "-v", *device, board=board)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"*inference.rs::matches_tensorflow_on_the_golden_inputs[[]{board}[]] PASSED*"])


def test_a_triple_xla_rejects_is_an_error_naming_the_model_the_board_and_tfcompiles_end(mlp):
    """XLA takes the arm... spellings only: thumbv7em makes tfcompile abort."""
    mlp.write("boards/m4-thumb.toml", 'extends = "mps2-an386"\n[aot]\ntriple = "thumbv7em-none-eabihf"\n')
    with_net(mlp, mlp.path / "aot" / "mlp_savedmodel")
    result = mlp.run("net_test.c", "-rE", "--build-only", board="m4-thumb")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*model 'net' could not be compiled for board 'm4-thumb' (target thumbv7em-none-eabihf; tfcompile killed "
            "by signal 6): Unsupported CPU type: thumbv7em-unknown-none-eabihf"
        ]
    )


def test_two_models_in_a_directory_and_two_directories_with_a_model_of_one_name_each_link_their_own(mlp):
    """Each model's symbols carry its name, and each SavedModel's entry has a place of its
    own: a and b both call theirs "mlp", and a also has "second"."""
    for d in ("a", "b"):
        shutil.copytree(mlp.path / "aot" / "mlp_savedmodel", mlp.path / d / "saved")
    shutil.copytree(mlp.path / "aot" / "mlp_savedmodel", mlp.path / "a" / "second")
    (mlp.path / "b" / "saved" / "fingerprint.pb").write_bytes(b"another SavedModel's bytes")  # a content of its own
    mlp.write("a/ondevice.toml", '[models.mlp]\nsaved_model = "saved"\n[models.second]\nsaved_model = "second"\n')
    mlp.write("b/ondevice.toml", '[models.mlp]\nsaved_model = "saved"\n')
    both = """
        #include "micro_test.h"
        #include "mlp_model.h"
        {extra}
        #include "../aot/golden.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Runs) {{
          float y[MLP_LOGITS_COUNT];
          TF_LITE_MICRO_EXPECT_EQ(mlp_run(kGoldenInput[0], y), 0);
          TF_LITE_MICRO_EXPECT_NEAR(kGoldenOutput[0][0], y[0], 1e-5f);
          {call}
        }}
        TF_LITE_MICRO_TESTS_END
    """
    mlp.write(
        "a/a_test.c",
        both.format(
            extra='#include "second_model.h"', call="TF_LITE_MICRO_EXPECT_EQ(second_run(kGoldenInput[1], y), 0);"
        ),
    )
    mlp.write("b/b_test.c", both.format(extra="", call=""))
    mlp.run("a", "b", board="host").assert_outcomes(passed=2)
