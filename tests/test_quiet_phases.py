"""A case whose binary already ran goes without pytest's capture around its phases; any
other code hooked into the phases is still captured."""

from __future__ import annotations

import contextlib

import pytest
from _pytest.capture import CaptureManager

THREE_CASES = """
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(First) { TF_LITE_MICRO_EXPECT_EQ(1, 1); }
    TF_LITE_MICRO_TEST(Second) { TF_LITE_MICRO_EXPECT_EQ(2, 3); }
    TF_LITE_MICRO_TEST(Third) { TF_LITE_MICRO_EXPECT_EQ(3, 3); }
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


def test_only_the_phase_that_runs_the_binary_is_captured(project, captured_phases):
    project.write("three_test.c", THREE_CASES)
    result = project.run("-v")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*three_test.c::Second[[]host[]] FAILED*", "*(2 vs 3)*"])
    # the host binary ran in First's setup: its three phases are captured, and no other
    assert captured_phases == ["First[host]:setup", "First[host]:call", "First[host]:teardown"]


def test_a_conftest_hooked_into_the_phases_is_captured_in_every_case(project, captured_phases):
    project.write("three_test.c", THREE_CASES)
    project.write(
        "conftest.py",
        """
        def pytest_runtest_setup(item):
            print(f"conftest saw {item.name}")
        """,
    )
    result = project.run("-rA")
    result.assert_outcomes(passed=2, failed=1)
    for case in ("First", "Second", "Third"):
        result.stdout.fnmatch_lines(["*Captured stdout setup*", f"conftest saw {case}[[]host[]]"])
    assert len(captured_phases) == 9  # three phases of three cases
