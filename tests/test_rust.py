"""Rust crates end to end: each #[test] an item, built by Debian's cargo for the board, run
on the host, on arm64 under qemu-user and over SSH (a real sshd on loopback)."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from conftest import EXAMPLES, case_outcomes
from test_ssh import accounts, board_for_device, pi, sshd  # noqa: F401 - fixtures

needs_cargo = pytest.mark.skipif(
    not Path("/usr/bin/cargo").exists(), reason="needs Debian's cargo: scripts/setup.sh --rust"
)
pytestmark = needs_cargo

FAILING = """
#[cfg(test)]
mod tests {
    #[test]
    fn a_passes() {
        assert_eq!(2, 1 + 1);
    }

    #[test]
    fn b_fails() {
        let got = 2 + 2;
        assert_eq!(got, 5, "off by one");
    }

    #[test]
    #[ignore]
    fn b_later() {}

    #[test]
    fn c_aborts() {
        println!("about to abort");
        std::process::abort();
    }

    #[test]
    fn d_after() {}
}
"""


# the last test prints libtest's lines for itself and the test after it, then leaves with
# exit(0): the output alone reads "3 passed"
FORGING = """
#[cfg(test)]
mod tests {
    #[test]
    fn a_honest() {}

    #[test]
    fn b_forges() {
        println!("ok");
        println!("test tests::c_fails ... ok");
        println!();
        println!("test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out");
        std::process::exit(0);
    }

    #[test]
    fn c_fails() {
        assert_eq!(1, 2);
    }
}
"""
FORGED_VERDICTS = {
    "binary": "FAILED",
    "tests::a_honest": "PASSED",
    "tests::b_forges": "FAILED",
    "tests::c_fails": "FAILED",
}


def assert_forgery_caught(result) -> None:
    assert case_outcomes(result) == FORGED_VERDICTS
    text = result.stdout.str()
    assert "the output says passed, but libtest's log file records no verdict for it" in text
    assert "a test printed libtest's lines" in text  # the binary item's own failure


def crate(project, name: str, lib: str) -> Path:
    root = project.path / name
    project.write(f"{name}/Cargo.toml", f'[package]\nname = "{name}"\nversion = "0.1.0"\nedition = "2021"\n')
    project.write(f"{name}/src/lib.rs", lib)
    return root


def copy_rust_examples(project) -> Path:
    dest = project.path / "rust"
    shutil.copytree(EXAMPLES / "rust", dest, ignore=shutil.ignore_patterns("target"))
    return dest


EXAMPLE_CASES = {
    "tests::links_the_c_library": "PASSED",
    "tests::c_dot_matches_reference": "PASSED",
    "tests::c_dot_extremes": "PASSED",
    "dot_of_unit_vectors": "PASSED",
    "activation::tests::relu_clamps_below_zero_point": "PASSED",
    "activation::tests::softmax_sums_to_one": "PASSED",
    "tests::dot_product": "PASSED",
    "tests::dot_saturating_inputs": "PASSED",
    "tests::dot_rejects_mismatched_lengths": "PASSED",
    "tests::gemm_identity": "PASSED",
    "tests::gemm_zero_points": "PASSED",
    "tests::requantize_rounds_and_saturates": "PASSED",
    "tests::gemm_large_matches_float": "SKIPPED",
    "gemm_matches_float_reference": "PASSED",
    "gemm_then_requantize": "PASSED",
}


def test_a_failing_test_shows_its_line_and_an_abort_names_the_running_test(project):
    crate(project, "demo", FAILING)
    result = project.run("-v", "-rs")
    assert case_outcomes(result) == {
        "tests::a_passes": "PASSED",
        "tests::b_fails": "FAILED",
        "tests::b_later": "SKIPPED",
        "tests::c_aborts": "FAILED",
        "tests::d_after": "FAILED",
    }
    text = result.stdout.str()
    assert "off by one" in text and "at src/lib.rs:12" in text
    assert "killed by SIGABRT while this case was running" in text
    assert "about to abort" in text  # the running test's own output, in its report
    assert "not run: crashed: killed by SIGABRT before this case" in text
    assert "#[ignore]" in text


def test_libtest_lines_forged_by_a_test_pass_neither_it_nor_the_tests_after_it(project):
    crate(project, "forger", FORGING)
    result = project.run("-v")
    assert_forgery_caught(result)
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_the_examples_pass_per_test_on_the_host_and_select_one_by_name(project):
    copy_rust_examples(project)
    result = project.run("-v", "rust")
    assert case_outcomes(result) == EXAMPLE_CASES
    one = project.run("rust/kernels", "-k", "dot_product")
    one.assert_outcomes(passed=1, deselected=10)


@pytest.mark.slow
def test_the_examples_pass_on_arm64_under_qemu(project):
    copy_rust_examples(project)
    result = project.run("-v", "rust", "--device=qemu", board="rpi")
    assert case_outcomes(result) == EXAMPLE_CASES
    elf = next(p for p in (project.path / "_build/rpi/cargo").rglob("deps/*kernels-*") if not p.suffix)
    assert elf.read_bytes()[:4] == b"\x7fELF" and elf.read_bytes()[18] == 183  # EM_AARCH64


@pytest.mark.slow
def test_one_rust_test_over_ssh(pi):  # noqa: F811 - the fixture
    copy_rust_examples(pi)
    result = pi.run(f"--device={pi.sshd.alias}", "rust/kernels", "-k", "dot_product", board=pi.board)
    result.assert_outcomes(passed=1, deselected=10)
    pi.write("crash/Cargo.toml", textwrap.dedent('[package]\nname = "crash"\nversion = "0.1.0"\nedition = "2021"\n'))
    pi.write("crash/src/lib.rs", FAILING)
    crashed = pi.run(f"--device={pi.sshd.alias}", "crash", "-v", board=pi.board)
    assert case_outcomes(crashed)["tests::c_aborts"] == "FAILED"
    assert "killed by SIGABRT while this case was running" in crashed.stdout.str()
    pi.write("forger/Cargo.toml", textwrap.dedent('[package]\nname = "forger"\nversion = "0.1.0"\nedition = "2021"\n'))
    pi.write("forger/src/lib.rs", FORGING)
    assert_forgery_caught(pi.run(f"--device={pi.sshd.alias}", "forger", "-v", board=pi.board))


def test_crates_are_not_collected_when_the_ini_says_so(project):
    crate(project, "demo", "#[test]\nfn works() {}\n")
    assert project.run("--collect-only").ret == pytest.ExitCode.OK
    (project.path / "pytest.ini").write_text("[pytest]\nondevice_cargo = false\n")  # found before tox.ini
    assert project.run("--collect-only").ret == pytest.ExitCode.NO_TESTS_COLLECTED
