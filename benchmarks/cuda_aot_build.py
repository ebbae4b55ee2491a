"""What CUDA tests and compiled models cost to build, side by side with doing it by hand.

    python benchmarks/cuda_aot_build.py [--runs 5]

CUDA: the plugin's cold build of examples/cuda (`--build-only`, a fresh cache each run)
for jetson-cuda (cross) and host-cuda, against the same compiles and link run by hand:
nvcc on each .cu file with the board's flags, the host runtime by the board's C compiler,
one link with the static CUDA runtime. Runs alternate (plugin, by hand, plugin, ...) and
the medians are compared. The bar: the plugin within 1.2 x the hand-run commands.

Models: the plugin's cold build of examples/aot per board (tfcompile, the generated entry,
the test, the link) beside tfcompile alone on the same SavedModel and triple.

Needs scripts/setup.sh --cuda --aot.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from _timing import timed

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pytest_ondevice.compiling import aot, cuda  # noqa: E402
from pytest_ondevice.config.board import BoardRegistry  # noqa: E402

PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--build-only"]


def plugin_cold(board: str, example: str, work: Path) -> list[str]:
    """A fresh cache and build dir, then the plugin's build of the example for the board."""
    return [
        "sh",
        "-c",
        f"rm -rf {work}/cache {work}/build && exec {' '.join(PYTEST)} --board={board} "
        f"-o ondevice_cache_dir={work}/cache -o ondevice_build_dir={work}/build {example}",
    ]


def cuda_by_hand(board_name: str, src: Path, out: Path) -> list[str]:
    """The compiles and the link the plugin runs for examples/cuda, as one shell script."""
    board = BoardRegistry().get(board_name)
    tk = cuda.toolkit(board)
    cxx = "c++" if board.toolchain.gnu == "" else f"{board.toolchain.gnu}-g++"
    cc = "cc" if board.toolchain.gnu == "" else f"{board.toolchain.gnu}-gcc"
    include = REPO / "pytest_ondevice" / "include"
    flags = [*board.toolchain.cxxflags, f"-I{include}", f"-I{src}", "-c"]
    steps = [f"rm -rf {out} && mkdir -p {out}"]
    for name in ("gemm_cuda.cu", "gemm_cuda_test.cu"):
        argv = cuda.compile_argv(tk, board, (cxx,), [*flags, str(src / name)])
        steps.append(" ".join([*argv, "-o", str(out / (name + ".o"))]))
    runtime = REPO / "boards" / "runtime" / "host" / "ondevice_host.c"
    steps.append(" ".join([cc, *board.toolchain.cflags, f"-I{include}", "-c", str(runtime), "-o", str(out / "rt.o")]))
    objects = " ".join(str(out / n) for n in ("gemm_cuda.cu.o", "gemm_cuda_test.cu.o", "rt.o"))
    link = [cxx, objects, *board.toolchain.ldflags, *cuda.link_flags(tk, board), "-lm", "-o", str(out / "t.elf")]
    steps.append(" ".join(link))
    return ["sh", "-c", " && ".join(steps)]


def tfcompile_alone(board_name: str, out: Path) -> list[str]:
    board = BoardRegistry().get(board_name)
    triple = aot.native_triple() if board.aot.triple == "native" else board.aot.triple
    argv = [
        str(aot.compiler().cli), "aot_compile_cpu", "--dir", str(REPO / "examples" / "aot" / "mlp_savedmodel"),
        "--tag_set", "serve", "--signature_def_key", "serving_default", "--output_prefix", str(out / "model"),
        "--cpp_class", "Model", "--target_triple", triple, "--variables_to_feed", "",
    ]  # fmt: skip
    if board.aot.cpu:
        argv += ["--target_cpu", board.aot.cpu]
    return argv


def side_by_side(label: str, a: list[str], b: list[str], runs: int, cwd: Path) -> None:
    ta, tb = [], []
    timed(a, cwd)  # warm the disk and the page cache for both
    timed(b, cwd)
    for _ in range(runs):
        ta.append(timed(a, cwd))
        tb.append(timed(b, cwd))
    ma, mb = statistics.median(ta), statistics.median(tb)
    ratio = statistics.median(x / y for x, y in zip(ta, tb, strict=True))
    print(f"{label:44} plugin {ma:6.2f} s   by hand {mb:6.2f} s   ratio {ratio:.2f}  (median of {runs})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        project = work / "project"
        shutil.copytree(REPO / "examples" / "cuda", project / "cuda")
        shutil.copytree(
            REPO / "examples" / "aot", project / "aot", ignore=shutil.ignore_patterns("rust", "__pycache__")
        )
        (project / "pytest.ini").write_text("[pytest]\n")
        for board in ("jetson-cuda", "host-cuda"):
            side_by_side(
                f"CUDA examples, cold, {board}",
                plugin_cold(board, "cuda", work),
                cuda_by_hand(board, project / "cuda", work / "hand"),
                args.runs,
                project,
            )
        for board in ("host", "mps2-an386"):
            side_by_side(
                f"model examples/aot, cold, {board}",
                plugin_cold(board, "aot", work),
                tfcompile_alone(board, work / "tf"),
                args.runs,
                project,
            )


if __name__ == "__main__":
    main()
