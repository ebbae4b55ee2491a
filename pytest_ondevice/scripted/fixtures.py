"""The pytest side of scripted tests: the `device` and `device_factory` fixtures, the
`board` marker, one test per selected board, and what a report says.

A test that takes `device` runs once per selected board (`--board=a,b`, or every board of
the fleet) that its `board` marker admits, with a device of that board leased from the
fleet: the same leases, quarantine and xdist workers as the test binaries, released on
every exit path. A problem of the device (unreachable, a lost link) is an error of the
test naming the device, never its failure.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from ..config.keys import INFRASTRUCTURE_PROPERTY, SESSION_KEY, SETUP_PROPERTY, selected_boards

if TYPE_CHECKING:
    from ..run.engine import Engine
    from .device import Device

MARKER = (
    "board(*names, kind=None, tags=()): the boards a test that takes `device` applies to (by name, or by kind: "
    "linux, android, baremetal, host), and the tags its device must carry in the fleet file (e.g. 'uart')"
)
INFRA = pytest.StashKey[str]()  # an item's infrastructure error, for its fixture's teardown
LOG = pytest.StashKey[Any]()  # an item's TestLog, for its report
PROPERTY = INFRASTRUCTURE_PROPERTY


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`device`: one test per selected board, skipped (with the reason) where it does not apply."""
    if "device" not in metafunc.fixturenames or not _ours(metafunc):
        return
    config = metafunc.config
    boards = selected_boards(config)
    if not boards:
        reason = "needs a device: run with --board=NAME (or --fleet=FILE)"
        metafunc.parametrize(
            "device", [pytest.param(None, marks=pytest.mark.skip(reason=reason))], indirect=True, ids=["no-board"]
        )
        return
    session = config.stash.get(SESSION_KEY, None)
    params = []
    for name in boards:
        why = _not_for(metafunc.definition, name, session)
        marks = [pytest.mark.skip(reason=why)] if why else []
        params.append(pytest.param(name, marks=marks, id=name))
    metafunc.parametrize("device", params, indirect=True)


def _ours(metafunc: pytest.Metafunc) -> bool:
    """A project's own `device` (a fixture of its conftest, or a parameter) is left alone."""
    for marker in metafunc.definition.iter_markers("parametrize"):
        names = marker.args[0] if marker.args else marker.kwargs.get("argnames", ())
        if "device" in ([n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)):
            return False
    defs = getattr(metafunc, "_arg2fixturedefs", {}).get("device")
    if not defs:
        return False
    return getattr(defs[-1].func, "__module__", "") == __name__


def _not_for(node: pytest.Item, board_name: str, session: Engine | None) -> str | None:
    """Why a test is not for this board (its `board` markers), or None."""
    if session is None:
        return None
    board = session.registry.get(board_name)
    for marker in node.iter_markers("board"):
        names = marker.args
        kind = marker.kwargs.get("kind")
        if names and not set(names) & set(session.registry.lineage(board_name)):
            return f"for boards {', '.join(names)} only (its board marker), not {board_name}"
        kinds = (kind,) if isinstance(kind, str) else tuple(kind or ())
        if kinds and board.kind not in kinds:
            return f"for {' or '.join(kinds)} boards only (its board marker); {board_name} is {board.kind}"
        tags = _tags(marker)
        if tags and not _with_tags(session, board_name, tags):
            return f"needs a device of {board_name} tagged {', '.join(tags)} (board marker), and the fleet has none"
    return None


def _tags(marker: pytest.Mark) -> tuple[str, ...]:
    tags = marker.kwargs.get("tags", ())
    return (tags,) if isinstance(tags, str) else tuple(tags)


def _with_tags(session: Engine, board: str, tags: tuple[str, ...]) -> list:
    return [d for d in session.devices.for_board(board) if set(tags) <= set(d.tags)]


@pytest.fixture
def device(request: pytest.FixtureRequest) -> Iterator[Device]:
    """A device of the board this test runs for, leased for the test (see the module)."""
    board = getattr(request, "param", None)
    if board is None:
        pytest.skip("needs a device: run with --board=NAME (or --fleet=FILE)")
    tags: tuple[str, ...] = ()
    for marker in request.node.iter_markers("board"):
        tags += _tags(marker)
    with _leased(request, board, tags) as dev:
        yield dev


@pytest.fixture
def device_factory(request: pytest.FixtureRequest):
    """More than one device: `device_factory(board=None, tags=())` leases one more (the
    selected board when there is one); all are released when the test ends."""
    stack = contextlib.ExitStack()
    count = [0]

    def lease(board: str | None = None, tags: tuple[str, ...] | list[str] = ()) -> Device:
        boards = selected_boards(request.config)
        name = board or (boards[0] if len(boards) == 1 else None)
        if name is None:
            raise pytest.UsageError(
                "device_factory(): say which board (device_factory('rpi')): "
                + (f"{len(boards)} are selected" if boards else "none is selected (--board=NAME)")
            )
        count[0] += 1
        return stack.enter_context(_leased(request, name, tuple(tags), count[0]))

    with stack:
        yield lease


@contextlib.contextmanager
def _leased(request: pytest.FixtureRequest, board_name: str, tags: tuple[str, ...], nth: int = 0) -> Iterator[Device]:
    from ..session.items import DeviceInfrastructureError
    from ..transports import InfrastructureError
    from .device import Device
    from .testlog import TestLog

    session: Engine | None = request.config.stash.get(SESSION_KEY, None)
    if session is None:
        pytest.skip("needs a device: run with --board=NAME (or --fleet=FILE)")
    devices = session.devices
    try:
        board = session.registry.get(board_name)
    except Exception as e:  # a board outside the selection, or a broken board file
        raise DeviceInfrastructureError(str(e)) from None
    fitting = [d for d in devices.for_board(board_name) if set(tags) <= set(d.tags)]
    if not fitting:
        raise DeviceInfrastructureError(
            f"no device of board {board_name}" + (f" is tagged {', '.join(tags)}" if tags else " is in this run")
        )
    candidates = [d for d in fitting if not devices.quarantine.is_out(d.name)]
    if not candidates:
        raise DeviceInfrastructureError(devices.board_down(board_name))
    try:
        lease = devices.lease(candidates)
    except InfrastructureError as e:
        raise DeviceInfrastructureError(f"{board_name}: {e}") from None
    with lease:
        leased = lease.device
        devices.follow(leased)
        where = board_name if leased.name == board_name else f"{board_name}@{leased.name}"
        try:
            transport = devices.transport(leased)
        except InfrastructureError as e:
            if devices.quarantine.strike(leased.name, str(e)):
                devices.forget(leased)
            raise DeviceInfrastructureError(f"{where}: {e}") from None
        settings = session.settings
        name = re.sub(r"[^\w.\-\[\]]+", "_", request.node.nodeid)[-150:] + (f".{nth}" if nth else "")
        log = TestLog(
            settings.build_root / board_name / "logs" / "scripted" / f"{name}.log",
            where,
            session.live,
            settings.log_max,
        )
        if not nth:
            request.node.stash[LOG] = log
        dev = Device(session, board, leased, transport, log, request.node.path.parent)
        if not nth:  # what JUnit and --history say of the test: where it ran
            props = request.node.user_properties
            props[:] = [(k, v) for k, v in props if k != "board"] + [("board", board_name), ("device", leased.name)]
        _open_devices(request.config).add(dev)
        try:
            yield dev
        finally:
            _open_devices(request.config).discard(dev)
            dev.close()
            log.close()
            error = request.node.stash.get(INFRA, None)
            own_fault = error is not None and devices.health(leased) is False
            if own_fault and devices.quarantine.strike(leased.name, error):
                devices.forget(leased)


OPEN = pytest.StashKey[set]()


def _open_devices(config: pytest.Config) -> set:
    return config.stash.setdefault(OPEN, set())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """The device log with the report (the terminal shows it for a failure, JUnit as
    system-out); an infrastructure error is the device's, reported as an error."""
    report = yield
    if "device" not in getattr(item, "fixturenames", ()) and "device_factory" not in getattr(item, "fixturenames", ()):
        return report
    from ..transports import InfrastructureError

    board = getattr(getattr(item, "callspec", None), "params", {}).get("device")
    if call.when == "setup" and board and not any(name == "board" for name, _ in item.user_properties):
        item.user_properties.append(("board", board))  # a skipped test too: the history files it by board
    from .device import SetupError

    excinfo = call.excinfo
    if excinfo is not None and isinstance(excinfo.value, SetupError) and call.when == "call":
        report.longrepr = str(excinfo.value)  # the project's or the machine's, not the test's failure
        report.user_properties.append((SETUP_PROPERTY, str(excinfo.value)))
        item.user_properties.append((SETUP_PROPERTY, str(excinfo.value)))
    if excinfo is not None and isinstance(excinfo.value, InfrastructureError) and call.when == "call":
        message = str(excinfo.value)
        item.stash[INFRA] = message
        report.longrepr = f"infrastructure error, not the test's failure: {message}"
        report.user_properties.append((PROPERTY, message))  # this report's status (see below)
        item.user_properties.append((PROPERTY, message))  # JUnit's properties come from the item
    log = item.stash.get(LOG, None)
    if log is not None and call.when == "call":
        tail = log.tail()
        if tail:
            text = f"{tail}\n(the whole log: {log.path})\n"
            report.sections.append(("Captured stdout call (device log)", text))  # shown with a failure
            item.add_report_section("call", "stdout (device log)", text)  # JUnit writes the teardown report's
    return report


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, Any] | None:
    errors = (PROPERTY, SETUP_PROPERTY)
    if report.when == "call" and report.failed and any(name in errors for name, _ in report.user_properties):
        return "error", "E", "ERROR"
    return None


def pytest_unconfigure(config: pytest.Config) -> None:
    """Ctrl-C skips fixture teardowns: what a test started still ends."""
    for dev in list(config.stash.get(OPEN, ())):
        with contextlib.suppress(Exception):
            dev.close()
