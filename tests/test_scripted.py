"""Scripted device tests on the host board: the `device` fixture's API as a test sees it
(run, start and expect, build, push and pull), its messages, the board marker, and the
device log in reports. The same API on QEMU, SSH and the fleet: test_scripted_devices.py."""

from __future__ import annotations

import itertools
import time
import xml.etree.ElementTree as ET

import pytest
from test_fleet import HOST_FLEET, junit_cases

ONE_DEVICE = HOST_FLEET.replace('\n    [device.h2]\n    board = "host"\n    tags = ["rack-b"]\n', "")


def run_tests(project, text: str, *args: str, board: str = "host") -> pytest.RunResult:
    project.write("test_script.py", text)
    return project.run("-v", *args, board=board)


def outcomes(result) -> dict[str, str]:
    import re

    found = {}
    for line in result.outlines:
        m = re.search(r"::(\w+)\[[\w@-]+\] (PASSED|FAILED|SKIPPED|ERROR)", line)
        if m:  # one outcome per test function: its parametrized items must agree
            name, outcome = m.groups()
            found[name] = outcome if found.get(name, outcome) == outcome else "MIXED"
    return found


RUN = """
import signal, subprocess, pytest

def test_output_and_status(device):
    r = device.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (r.returncode, r.stdout, r.stderr) == (3, "out\\n", "err\\n")
    assert r.args == ["sh", "-c", "echo out; echo err >&2; exit 3"]

def test_input(device):
    assert device.run(["tr", "a-z", "A-Z"], input="shout\\n").stdout == "SHOUT\\n"

def test_signal_is_minus_its_number(device):
    assert device.run(["sh", "-c", "kill -SEGV $$"]).returncode == -signal.SIGSEGV

def test_check(device):
    with pytest.raises(subprocess.CalledProcessError):
        device.run(["false"], check=True)

def test_timeout(device):
    with pytest.raises(subprocess.TimeoutExpired) as e:
        device.run(["sh", "-c", "echo partial; sleep 30"], timeout=0.5)
    assert e.value.output == "partial\\n"

def test_bytes(device):
    assert device.run(["printf", "\\\\377"], text=False).stdout == b"\\xff"
"""


def test_run_gives_what_subprocess_run_gives(project):
    result = run_tests(project, RUN)
    assert outcomes(result) == dict.fromkeys(
        [
            "test_output_and_status",
            "test_input",
            "test_signal_is_minus_its_number",
            "test_check",
            "test_timeout",
            "test_bytes",
        ],
        "PASSED",
    ), result.stdout.str()


BIG_INPUT = """
def test_a_filter_given_more_than_a_pipe_holds(device):
    data = "".join(f"line {i}\\n" for i in range(200_000))
    assert device.run(["cat"], input=data, timeout=30).stdout == data

def test_a_program_that_reads_none_of_its_input(device):
    r = device.run(["sh", "-c", "echo done"], input="x" * 5_000_000, timeout=30)
    assert (r.returncode, r.stdout) == (0, "done\\n")

def test_a_program_that_reads_its_input_late(device):
    r = device.run(["sh", "-c", "sleep 1; wc -c"], input=b"x" * 8_000_000, timeout=30)
    assert (r.returncode, r.stdout.split()) == (0, ["8000000"])
"""

BIG_INPUT_TESTS = [
    "test_a_filter_given_more_than_a_pipe_holds",
    "test_a_program_that_reads_none_of_its_input",
    "test_a_program_that_reads_its_input_late",
]


def test_run_writes_the_input_while_it_reads_the_output(project):
    """Written before the output was read, an input beyond a pipe's buffer waited for good
    on a program that answers as it reads (the timeout never came): in a process of its
    own, so that a hang fails this test instead of holding the suite."""
    project.write("test_script.py", BIG_INPUT)
    result = project.pytester.runpytest_subprocess("--board=host", "-p", "no:cacheprovider", "-v", timeout=60)
    assert outcomes(result) == dict.fromkeys(BIG_INPUT_TESTS, "PASSED"), result.stdout.str()


LONG_OUTPUT = """
import pytest
from pytest_ondevice.scripted.device import OutputDropped

X = "head -c 100000000 /dev/zero | tr '\\\\0' x; echo; echo done"

def test_the_issues_command(device):
    with pytest.warns(OutputDropped, match=r"83,222,790 of 100,000,006 bytes of stdout left out"):
        r = device.run(["sh", "-c", X])
    assert r.returncode == 0 and r.stdout.endswith("x\\ndone\\n")  # the tail is kept
    assert r.dropped == 100_000_006 - (16 << 20) and f"dropped={r.dropped}" in repr(r)
    head, note, tail = r.stdout.partition("\\n[pytest-ondevice: device.run: ")
    assert (len(head), len(tail.split("]\\n", 1)[1])) == (8 << 20, 8 << 20)
    assert set(head) == {"x"} and "max_output=16777216" in note + tail

def test_a_bound_of_the_tests_own(device):
    with pytest.warns(OutputDropped):
        r = device.run(["seq", "1", "1000"], max_output=20, text=False)
    assert r.stdout.startswith(b"1\\n2\\n3\\n4\\n5\\n\\n[pytest-ondevice: ")  # the first 10 bytes, the note
    assert r.stdout.endswith(b"]\\n\\n999\\n1000\\n") and r.dropped == 3893 - 20  # the last 10

def test_no_bound(device):
    r = device.run(["sh", "-c", "head -c 20000000 /dev/zero | tr '\\\\0' y"], max_output=None)
    assert (len(r.stdout), r.dropped) == (20_000_000, 0)

def test_within_the_bound_nothing_changes(device, recwarn):
    r = device.run(["seq", "1", "10"], max_output=21)
    assert (r.stdout, r.dropped, "dropped" in repr(r)) == ("".join(f"{i}\\n" for i in range(1, 11)), 0, False)
    assert not [w for w in recwarn if w.category is OutputDropped]

def test_a_bad_bound(device):
    with pytest.raises(ValueError, match="max_output must be a number of bytes"):
        device.run(["true"], max_output=-1)
"""

LONG_OUTPUT_TESTS = [
    "test_the_issues_command",
    "test_a_bound_of_the_tests_own",
    "test_no_bound",
    "test_within_the_bound_nothing_changes",
    "test_a_bad_bound",
]


def test_run_keeps_the_head_and_tail_of_a_long_output_and_says_what_it_left_out(project):
    """16 MiB of stdout were kept and the rest dropped in silence: no `done`, no word of it."""
    result = run_tests(project, LONG_OUTPUT)
    assert outcomes(result) == dict.fromkeys(LONG_OUTPUT_TESTS, "PASSED"), result.stdout.str()


EXPECT = """
import pexpect

def test_dialogue(device):
    p = device.start(["sh", "-c", "echo ready; read x; echo got-$x; read y; exit 4"])
    p.expect("ready")
    p.sendline("one")
    assert p.expect(["nope", r"got-(\\w+)"]) == 1
    assert p.match.group(1) == "one"
    p.sendeof()
    assert p.wait(5) == 4

def test_reply_split_across_reads(device):
    p = device.start(["sh", "-c", "printf po; sleep 0.3; printf 'ng\\\\n'; sleep 0.3; printf 'done\\\\n'"])
    p.expect_exact("pong")
    p.expect("done")
    assert p.before == "\\n"

def test_the_console_is_a_shell(device):
    device.console.sendline("echo $((6 * 7))")
    device.console.expect(r"(\\d+)\\r?\\n")
    assert device.console.match.group(1) == "42"

def test_eof_and_timeout_as_patterns(device):
    p = device.start(["sh", "-c", "echo bye"])
    assert p.expect([pexpect.TIMEOUT, pexpect.EOF], timeout=5) == 1
    q = device.start(["sleep", "30"])
    assert q.expect(["never", pexpect.TIMEOUT], timeout=0.2) == 1
"""


def test_start_follows_pexpect(project):
    result = run_tests(project, EXPECT)
    assert outcomes(result) == dict.fromkeys(
        [
            "test_dialogue",
            "test_reply_split_across_reads",
            "test_the_console_is_a_shell",
            "test_eof_and_timeout_as_patterns",
        ],
        "PASSED",
    ), result.stdout.str()


FAILING = """
import os

def test_times_out(device):
    p = device.start(["sh", "-c", "echo booting; echo $$ > {pidfile}; sleep 60"])
    p.expect("booting")
    p.expect("READY>", timeout=0.5)

def test_program_ends_first(device):
    p = device.start(["sh", "-c", "echo crashing; exit 139"])
    p.expect("READY>")
"""


def test_a_failed_expect_says_what_it_waited_for_how_long_and_what_came_and_leaves_nothing_running(project):
    pidfile = project.path / "pid"
    result = run_tests(project, FAILING.format(pidfile=pidfile))
    assert outcomes(result) == {"test_times_out": "FAILED", "test_program_ends_first": "FAILED"}
    text = result.stdout.str()
    assert "expected 'READY>' within 0.5s; nothing arrived since the last match" in text, text
    assert "sh -c 'echo crashing; exit 139': the program exited with code 139 before 'READY>' arrived" in text
    assert "what arrived since the last match:\nE       crashing" in text, text
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "the hung program outlived its test"
    assert "Traceback" not in text and "pexpect/" not in text, text


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


BUILD = """
def test_built_program(device):
    artifact = device.build("prog.c")
    r = device.run([artifact, "there"])
    assert (r.returncode, r.stdout) == (3, "hi there\\n")
    again = device.build("prog.c")
    assert again.sha256 == artifact.sha256

def test_broken_source(device):
    device.build("broken.c")
"""


def test_build_goes_through_the_store_and_a_broken_source_is_the_tests_failure(project):
    project.write("prog.c", '#include <stdio.h>\nint main(int c, char **v) { printf("hi %s\\n", v[1]); return 3; }\n')
    project.write("broken.c", "int main(void) { return missing_symbol; }\n")
    result = run_tests(project, BUILD)
    assert outcomes(result) == {"test_built_program": "PASSED", "test_broken_source": "FAILED"}
    text = result.stdout.str()
    assert "broken.c did not build" in text and "missing_symbol" in text, text



def test_an_ondevice_toml_mistake_is_the_tests_error_naming_file_and_key(project):
    """Not a failure with a traceback through the plugin: the project's, as a C case's is."""
    project.write("prog.c", "int main(void) { return 0; }\n")
    project.write("ondevice.toml", 'include_dir = ["inc"]\n')
    result = run_tests(project, "def test_build(device):\n    device.build('prog.c')\n")
    assert outcomes(result) == {"test_build": "ERROR"}
    text = result.stdout.str()
    assert "ondevice.toml: unknown key 'include_dir' (did you mean 'include_dirs'?)" in text, text
    assert "dirconfig.py" not in text and "Traceback" not in text


FILES = """
def test_push_run_pull(device, tmp_path):
    model = tmp_path / "model.bin"
    model.write_bytes(bytes(range(256)))
    where = device.push(model)
    r = device.run(["sh", "-c", "od -An -tx1 model.bin | wc -w; cp model.bin copy.bin"])
    assert r.stdout.strip() == "256"
    out = device.pull("copy.bin", tmp_path / "back.bin")
    assert out.read_bytes() == model.read_bytes()
    assert where.endswith("/model.bin")

def test_missing_remote_file(device, tmp_path):
    import pytest
    with pytest.raises(FileNotFoundError, match="nope.bin"):
        device.pull("nope.bin", tmp_path / "x")
"""


def test_push_and_pull_in_the_tests_working_directory(project):
    result = run_tests(project, FILES)
    assert outcomes(result) == {"test_push_run_pull": "PASSED", "test_missing_remote_file": "PASSED"}, (
        result.stdout.str()
    )


MARKERS = """
import pytest

def test_any(device):
    pass

@pytest.mark.board("rpi")
def test_rpi_only(device):
    pass

@pytest.mark.board(kind="baremetal")
def test_bare_metal_only(device):
    pass

@pytest.mark.board(kind=["host", "linux"])
def test_host_or_linux(device):
    pass

@pytest.mark.board(tags=["uart"])
def test_needs_a_uart(device):
    pass
"""


def test_the_board_marker_skips_with_the_reason(project):
    result = run_tests(project, MARKERS, "-rs")
    assert outcomes(result) == {
        "test_any": "PASSED",
        "test_rpi_only": "SKIPPED",
        "test_bare_metal_only": "SKIPPED",
        "test_host_or_linux": "PASSED",
        "test_needs_a_uart": "SKIPPED",
    }, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*for boards rpi only (its board marker), not host*",
            "*for baremetal boards only (its board marker); host is host*",
            "*needs a device of host tagged uart (board marker), and the fleet has none*",
        ]
    )


def test_without_a_board_a_scripted_test_is_skipped_saying_how_to_select_one(project):
    project.write("test_script.py", "def test_x(device):\n    pass\n")
    result = project.pytester.runpytest("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*needs a device: run with --board=NAME (or --fleet=FILE)*"])


LOGGED = """
def test_fails_after_talking(device):
    device.run(["echo", "first command"])
    p = device.start(["sh", "-c", "echo from-the-program; read x"])
    p.expect("from-the-program")
    assert False, "the test's own assertion"
"""


def test_the_device_log_is_in_the_failure_report_and_in_junit(project):
    junit = project.path / "junit.xml"
    result = run_tests(project, LOGGED, f"--junitxml={junit}", "-o", "junit_logging=all")
    text = result.stdout.str()
    assert "Captured stdout call (device log)" in text, text
    assert "# $ echo 'first command'" in text and "echo#1| first command" in text, text
    assert "sh#2| from-the-program" in text, text
    case = next(ET.parse(junit).getroot().iter("testcase"))
    assert "from-the-program" in case.find("system-out").text
    log = next((project.path / "_build" / "host" / "logs" / "scripted").glob("*fails_after_talking*.log"))
    assert "sh#2| from-the-program" in log.read_text()


INFRA = """
from pytest_ondevice.transports import InfrastructureError

def test_link_lost(device):
    device.run(["true"])
    raise InfrastructureError("the link went (standing for a lost SSH connection)")
"""


def test_an_infrastructure_error_mid_test_is_an_error_naming_it_never_a_failure(project):
    junit = project.path / "junit.xml"
    result = run_tests(project, INFRA, f"--junitxml={junit}")
    result.assert_outcomes(errors=1)
    text = result.stdout.str()
    assert "infrastructure error, not the test's failure: the link went" in text, text
    props = junit_cases(junit)["test_script.test_link_lost[host]"]
    assert props["ondevice_infrastructure"].startswith("the link went")


LEASED = """
import os, time

def test_first(device):
    print("ran on", device.name)
    assert False

def test_second(device):
    assert device.name
"""


def test_a_failing_test_releases_its_lease_for_the_next(project):
    project.write("fleet.toml", ONE_DEVICE)
    project.write("test_script.py", LEASED)
    result = project.pytester.runpytest("--fleet=fleet.toml", "-p", "no:cacheprovider", "-v", "--lease-timeout=5")
    assert outcomes(result) == {"test_first": "FAILED", "test_second": "PASSED"}, result.stdout.str()


SPREAD = """
import time, pytest

@pytest.mark.parametrize("n", range(4))
def test_holds_a_device(device, n, tmp_path_factory):
    start = time.monotonic()
    time.sleep(1.0)
    with open({log!r}, "a") as f:
        f.write(f"{{device.name}} {{start:.3f}} {{time.monotonic():.3f}}\\n")
"""


def test_n2_spreads_scripted_tests_over_two_devices_one_test_per_device_at_a_time(project):
    log = project.path / "held.txt"
    project.write("fleet.toml", HOST_FLEET)
    project.write("test_script.py", SPREAD.format(log=str(log)))
    result = project.pytester.runpytest("--fleet=fleet.toml", "-p", "no:cacheprovider", "-n", "2")
    result.assert_outcomes(passed=4)
    spans = [(name, float(a), float(b)) for name, a, b in (line.split() for line in log.read_text().splitlines())]
    assert {name for name, _, _ in spans} == {"h1", "h2"}
    for name in ("h1", "h2"):  # a device holds one test at a time
        mine = sorted((a, b) for n, a, b in spans if n == name)
        assert all(b1 <= a2 for (_, b1), (a2, _) in itertools.pairwise(mine)), spans


def test_a_projects_own_device_fixture_or_parameter_is_left_alone(project):
    project.write("conftest.py", "import pytest\n@pytest.fixture\ndef device():\n    return 'mine'\n")
    project.write(
        "test_own.py",
        "import pytest\n"
        "def test_fixture(device):\n    assert device == 'mine'\n"
        "@pytest.mark.parametrize('device', ['a', 'b'])\ndef test_param(device):\n    assert device in 'ab'\n",
    )
    project.run().assert_outcomes(passed=3)


def test_a_board_marker_naming_a_board_applies_to_boards_that_extend_it(project):
    project.write("boards/my-host.toml", 'extends = "host"\ndescription = "our CI runner"\n')
    project.write("test_script.py", "import pytest\n@pytest.mark.board('host')\ndef test_x(device):\n    pass\n")
    project.run(board="my-host").assert_outcomes(passed=1)


HISTORY = """
import pytest
from pytest_ondevice.transports import InfrastructureError

def test_passes(device):
    assert device.run(["true"]).returncode == 0

def test_fails(device):
    assert device.run(["false"]).returncode == 0

def test_device_lost(device):
    raise InfrastructureError("the link went")

@pytest.mark.board(kind="baremetal")
def test_not_here(device):
    pass
"""


def test_history_records_scripted_tests_with_board_device_and_outcome(project):
    import sqlite3

    project.write("test_script.py", HISTORY)
    project.run("--history=history.db")
    rows = sqlite3.connect(project.path / "history.db").execute(
        "SELECT case_name, board, device, outcome FROM results ORDER BY case_name"
    )
    assert [tuple(r) for r in rows] == [
        ("test_device_lost", "host", "host", "error"),
        ("test_fails", "host", "host", "failed"),
        ("test_not_here", "host", None, "skipped"),
        ("test_passes", "host", "host", "passed"),
    ]


CTRL_C = """
def test_waits(device):
    p = device.start(["sh", "-c", "echo waiting; sleep 120; : {tag}"])
    p.expect("waiting")
    p.expect("never", timeout=120)
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_ctrl_c_mid_expect_ends_the_program_and_releases_the_lease(project, sig):
    from test_interrupts import Run, _ours, _poll

    project.write(
        "fleet.toml", HOST_FLEET.replace('\n    [device.h2]\n    board = "host"\n    tags = ["rack-b"]\n', "")
    )
    project.write("test_script.py", CTRL_C.format(tag=project.path))
    run = Run(project, "host", "--fleet=fleet.toml", "test_script.py", files=0)
    started = _poll(lambda: any("sleep 120" in c for c in _ours(project.path).values()), 60)
    assert started, run.output()
    took = run.stop(sig)
    run.assert_clean_stop(took)
    again = project.pytester.runpytest(
        "--fleet=fleet.toml", "-p", "no:cacheprovider", "--lease-timeout=2", "-k", "nothing", "test_script.py"
    )
    lease = project.path / "leases" / "h1.0.lock"
    import fcntl
    import os

    fd = os.open(lease, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: nobody holds it any more
    finally:
        os.close(fd)
    assert again.ret in (0, 5)


FACTORY = """
def test_two_devices(device_factory):
    first = device_factory(tags=["rack-a"])
    second = device_factory("host")  # the other one: the first is held
    assert (first.name, second.name) == ("h1", "h2")
    assert first.run(["echo", "one"]).stdout == "one\\n"
"""


def test_device_factory_leases_one_more_device_each_time_and_by_tag(project):
    project.write("fleet.toml", HOST_FLEET)
    project.write("test_script.py", FACTORY)
    result = project.pytester.runpytest("--fleet=fleet.toml", "-p", "no:cacheprovider", "--lease-timeout=5")
    result.assert_outcomes(passed=1)


def test_a_program_whose_start_an_interrupt_cut_short_ends_with_the_transport(monkeypatch):
    """Ctrl-C inside Popen(), after the fork: we never learn the pid, and the program is
    still ended when the session closes its transport (it carries the session's tag)."""
    import subprocess
    import types

    from pytest_ondevice.transports.local import LocalTransport

    transport = LocalTransport(types.SimpleNamespace(name="host"), None, {})
    started: list[int] = []
    real = subprocess.Popen._execute_child

    def cut_short(self, *args, **kwargs):
        real(self, *args, **kwargs)
        started.append(self.pid)
        raise KeyboardInterrupt

    monkeypatch.setattr(subprocess.Popen, "_execute_child", cut_short)
    with pytest.raises(KeyboardInterrupt):
        transport.spawn(None, ["sleep", "60"])
    monkeypatch.undo()
    assert _alive(started[0])
    transport.close()
    deadline = time.monotonic() + 5
    while _alive(started[0]) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(started[0]), "the program outlived its session"
