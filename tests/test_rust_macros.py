"""A crate whose tests are all made by a macro (itoa's tests/test.rs: `#[test] fn $name()`
in a macro_rules! body) is run, not dropped: the scan names no case, so one item builds
and runs the target's binary, and each test it runs is an item of its own (as for a C
file whose cases a macro makes)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from test_ssh import accounts, board_for_device, pi, sshd  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(
    not Path("/usr/bin/cargo").exists(), reason="needs Debian's cargo: scripts/setup.sh --rust"
)

ITOA = next(iter(sorted(Path("/usr/share/cargo/registry").glob("itoa-1.*"))), None)
needs_itoa = pytest.mark.skipif(ITOA is None, reason="Debian's itoa crate is not installed (librust-itoa-dev)")
ITOA_TESTS = {
    "test_u64_0",
    "test_u64_half",
    "test_u64_max",
    "test_i64_min",
    "test_i16_0",
    "test_i16_min",
    "test_u128_0",
    "test_u128_max",
    "test_i128_min",
}

MADE = """
macro_rules! check {
    ($($name:ident($got:expr, $want:expr))*) => {
        $(
            #[test]
            fn $name() {
                assert_eq!($got, $want, "made by check!");
            }
        )*
    }
}

check! {
    adds(1 + 1, 2)
    subtracts(3 - 1, 2)
    multiplies(2 * 2, 5)
}
"""


def outcomes(result, file: str) -> dict[str, str]:
    """test name -> PASSED/FAILED/..., from the -v lines of one file's items."""
    found = {}
    for line in result.outlines:
        m = re.match(rf"{re.escape(file)}::(\S+)\[\S+\] (PASSED|FAILED|SKIPPED|ERROR)", line)
        if m:
            found[m.group(1)] = m.group(2)
    return found


def test_a_target_whose_tests_a_macro_makes_runs_them_all(project):
    project.write("made/Cargo.toml", '[package]\nname = "made"\nversion = "0.1.0"\nedition = "2021"\n')
    project.write("made/src/lib.rs", "pub fn unused() {}\n")  # no test: no item
    project.write("made/tests/made.rs", MADE)
    collected = project.run("--collect-only", "-q")
    assert "made/tests/made.rs::binary[host]" in collected.stdout.str()
    result = project.run("-v", "-rf")
    assert outcomes(result, "made/tests/made.rs") == {
        "binary": "PASSED",
        "adds": "PASSED",
        "subtracts": "PASSED",
        "multiplies": "FAILED",
    }
    result.assert_outcomes(passed=3, failed=1)
    text = result.stdout.str()
    assert "made by check!" in text and "case 'multiplies' ran on the device but was not found in the source" in text


@needs_itoa
def test_itoa_runs_its_nine_tests_on_the_host(project):
    assert ITOA is not None
    shutil.copytree(ITOA, project.path / "itoa")
    result = project.run("-v", "itoa")
    assert outcomes(result, "itoa/tests/test.rs") == {"binary": "PASSED", **dict.fromkeys(ITOA_TESTS, "PASSED")}
    result.assert_outcomes(passed=10)


@pytest.mark.slow
@needs_itoa
def test_itoa_runs_its_nine_tests_on_arm64_over_ssh(pi):  # noqa: F811 - the fixture
    assert ITOA is not None
    shutil.copytree(ITOA, pi.path / "itoa")
    result = pi.run(f"--device={pi.sshd.alias}", "-v", "itoa", board=pi.board)
    assert outcomes(result, "itoa/tests/test.rs") == {"binary": "PASSED", **dict.fromkeys(ITOA_TESTS, "PASSED")}
    result.assert_outcomes(passed=10)
