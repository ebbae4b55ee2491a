"""What a test prints through stdio and what the harness prints arrive in program order."""

from __future__ import annotations

import pytest

CHATTY = """
    #include <stdio.h>
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Chatty) {
      printf("partial line without newline, then ");
      for (int i = 0; i < 3; ++i) printf("%d ", i);
      puts("");
      for (int i = 0; i < 300; ++i) putchar('a' + i % 26);
      putchar('\\n');
      printf("ends without a newline");
      TF_LITE_MICRO_EXPECT_EQ(1, 1);
    }
    TF_LITE_MICRO_TEST(AfterTheChatter) {
      puts("second case prints a line");
      TF_LITE_MICRO_EXPECT_EQ(2, 2);
    }
    TF_LITE_MICRO_TEST(FailsAfterPrinting) {
      printf("value is %d", 41);
      TF_LITE_MICRO_EXPECT_EQ(41, 42);
    }
    TF_LITE_MICRO_TESTS_END
"""


def _check(project, board: str, *args: str) -> None:
    project.write("chatty_test.c", CHATTY)
    result = project.run("-v", *args, board=board)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            f"*chatty_test.c::Chatty[[]{board}[]] PASSED*",
            f"*chatty_test.c::AfterTheChatter[[]{board}[]] PASSED*",
            f"*chatty_test.c::FailsAfterPrinting[[]{board}[]] FAILED*",
        ]
    )
    result.stdout.fnmatch_lines(["*41 == 42 failed at chatty_test.c:*"])
    log = next((project.path / "_build" / board / "logs").rglob("chatty_test.c.log")).read_text()
    assert log.index("partial line without newline, then 0 1 2") < log.index("AfterTheChatter")
    assert log.index("second case prints a line") < log.index("FailsAfterPrinting")


def test_stdio_and_harness_output_stay_in_order_on_host(project):
    _check(project, "host")


@pytest.mark.slow
def test_stdio_and_harness_output_stay_in_order_on_a_linux_board(project):
    _check(project, "rpi", "--device=qemu")


@pytest.mark.slow
def test_stdio_and_harness_output_stay_in_order_on_bare_metal(project):
    _check(project, "bluepill-qemu")


@pytest.mark.slow
@pytest.mark.parametrize("board", ["bluepill-qemu", "mps2-an386"])
def test_printf_shows_float_values_on_cortex_m(project, board):
    project.write(
        "float_test.c",
        """
        #include <stdio.h>
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(PrintsAFloat) {
          printf("Evaluated: %f <= %f\\n", 0.25, 0.125);  /* as TFLM's own failure lines do */
          TF_LITE_MICRO_EXPECT(0);
        }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run(board=board)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Evaluated: 0.250000 <= 0.125000*"])
