"""A case whose binary already ran goes without pytest's capture around its phases; any
other code hooked into the phases is still captured."""

from __future__ import annotations

import contextlib

import pytest
from _pytest.capture import CaptureManager

FOUR_CASES = """
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(First) { TF_LITE_MICRO_EXPECT_EQ(1, 1); }
    TF_LITE_MICRO_TEST(Second) { TF_LITE_MICRO_EXPECT_EQ(2, 3); }
    TF_LITE_MICRO_TEST(Third) { TF_LITE_MICRO_EXPECT_EQ(3, 3); }
    TF_LITE_MICRO_TEST(Fourth) { TF_LITE_MICRO_EXPECT_EQ(4, 4); }
    TF_LITE_MICRO_TESTS_END
"""


@pytest.fixture
def captured_phases(monkeypatch) -> list[str]:
    """The phases pytest's capture wrapped, as (case, phase), in this process's runs."""
    seen: list[str] = []
    original = CaptureManager.item_capture

    @contextlib.contextmanager
    def counting(self, when, item):
        if item.name.endswith("[host]"):  # not this test's own phases
            seen.append(f"{item.name}:{when}")
        with original(self, when, item):
            yield

    monkeypatch.setattr(CaptureManager, "item_capture", counting)
    return seen


def test_only_the_cases_that_run_the_binary_or_end_the_file_are_captured(project, captured_phases):
    project.write("four_test.c", FOUR_CASES)
    result = project.run("-v")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*four_test.c::Second[[]host[]] FAILED*", "*(2 vs 3)*"])
    # First's setup runs the host binary; Fourth's teardown may tear down more than itself
    phases = ("setup", "call", "teardown")
    assert captured_phases == [f"{case}[host]:{p}" for case in ("First", "Fourth") for p in phases]


def test_with_x_every_case_is_captured(project, captured_phases):
    project.write("four_test.c", FOUR_CASES)
    result = project.run("-x")
    result.assert_outcomes(passed=1, failed=1)
    assert len(captured_phases) == 6  # a failure tears everything down in the failing case's teardown


def test_a_session_fixtures_teardown_in_the_last_case_is_captured(project):
    project.write("a_test.py", "def test_py(noisy):\n    pass\n")
    project.write(
        "conftest.py",
        """
        import logging
        import pytest

        @pytest.fixture(scope="session")
        def noisy():
            yield
            print("noisy torn down")
            logging.getLogger("noisy").warning("noisy warns at teardown")
        """,
    )
    project.write("z_test.c", FOUR_CASES)
    result = project.run("-rA")
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(
        ["*Captured stdout teardown*", "noisy torn down", "*Captured log teardown*", "*noisy warns at teardown*"]
    )


def test_a_conftest_hooked_into_the_phases_is_captured_in_every_case(project, captured_phases):
    project.write("four_test.c", FOUR_CASES)
    project.write(
        "conftest.py",
        """
        def pytest_runtest_setup(item):
            print(f"conftest saw {item.name}")
        """,
    )
    result = project.run("-rA")
    result.assert_outcomes(passed=3, failed=1)
    for case in ("First", "Second", "Third", "Fourth"):
        result.stdout.fnmatch_lines(["*Captured stdout setup*", f"conftest saw {case}[[]host[]]"])
    assert len(captured_phases) == 12  # three phases of four cases
