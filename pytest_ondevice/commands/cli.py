"""The `pytest-ondevice` command: tools around the plugin (`boards`, `cache`, `report`, `doctor`, `bisect`,
`docs`, `nightly`)."""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from ..compiling import store
from ..compiling.toolchain import ToolchainError, resolve
from ..config.board import BoardRegistry
from ..config.schema import ConfigError
from ..transports import load as load_transport
from ..transports import status as transport_status


def print_boards(registry: BoardRegistry, out=None) -> int:
    """One line per board: what it is, its toolchain and its transport."""
    out = out or sys.stdout  # looked up now: pytest's capture may have replaced it
    rows = []
    invalid = []
    for name in registry.names():
        try:
            board = registry.get(name)
        except ConfigError as e:  # the message below the table: it would widen every row
            rows.append((name, "-", "-", "invalid board file (see below)", "-"))
            invalid.append(str(e))
            continue
        tc_status = toolchain_status(board)[1]
        where = f"{board.transport_name} ({transport_status(board.transport)})"
        if board.emulator:
            forms = "|".join(load_transport(board.emulator["name"]).device_forms)
            where += f"; --device={forms}: {board.emulator['name']} ({transport_status(board.emulator)})"
        rows.append((name, board.kind, board.arch, tc_status, where))
    print_table(("board", "kind", "arch", "toolchain", "transport"), rows, out)
    if invalid:  # said last, where a listing ends, and in the exit status
        print(f"\n{len(invalid)} board file(s) cannot be used:", file=out)
        for message in invalid:
            print(f"error: {message}", file=out)
        return 1
    return 0


def toolchain_status(board) -> tuple[bool, str]:
    """(found, "found: gcc ..." or "missing: <the install command>")."""
    try:
        return True, f"found: {resolve(board).description}"
    except ToolchainError as e:
        return False, "missing: " + str(e).split("install one: ", 1)[-1]


def print_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], out) -> None:
    """Columns padded to their widest cell; the last one, often long, is not padded."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    for row in [header, *rows]:
        cells = [row[i].ljust(widths[i]) for i in range(len(header) - 1)]
        print("  ".join([*cells, row[-1]]).rstrip(), file=out)


def project_cache(start: Path) -> tuple[Path | None, bool | None]:
    """The cache a pytest run started here would use: ondevice_cache_dir and
    ondevice_cache_shared from the project's ini file (pytest.ini, pyproject.toml, tox.ini,
    setup.cfg, found as pytest finds it), a relative dir being relative to that file."""
    try:
        from _pytest.config.findpaths import locate_config

        _rootdir, inipath, ini, *_ = locate_config(start, [])
    except Exception:  # not a project pytest can read: the defaults
        return None, None

    def value(name: str) -> str:
        raw = ini.get(name, "")
        return str(getattr(raw, "value", raw)).strip()

    directory = value("ondevice_cache_dir")
    shared = value("ondevice_cache_shared").lower()
    where = (inipath.parent / os.path.expanduser(directory)).resolve() if directory and inipath else None
    return where, (shared in ("1", "true", "yes", "on")) if shared else None


def cache_command(action: str, where: Path | None, out=None, shared: bool | None = None) -> int:
    """ccache -s / -C for our cache: what it holds, how often it served, or empty it. The
    cache is --cache-dir's, else $ONDEVICE_CACHE_DIR, else the project's (its ini file, from
    the current directory), else the per-user default: the one a run here would use."""
    out = out or sys.stdout
    ini_dir, ini_shared = project_cache(Path.cwd())
    path = where or Path(os.environ.get("ONDEVICE_CACHE_DIR") or ini_dir or store.default_dir())
    if shared is None:
        shared = ini_shared if ini_shared is not None else store.shared_from_env()
    try:
        cache = store.Store(path, shared)
    except store.CacheError as e:
        print(e, file=sys.stderr)
        return 1
    if action == "clean":
        removed, size, kept = cache.clear()
        held = f"; kept {kept} held by running sessions" if kept else ""
        print(f"removed {removed} entries ({_mib(size)}) from {path}{held}", file=out)
        return 0
    count, size = cache.usage()
    totals = cache.totals()
    hits, misses = totals.get("hits", 0), totals.get("misses", 0)
    rate = f" ({100 * hits / (hits + misses):.1f} % hits)" if hits + misses else ""
    print(f"cache directory   {path}", file=out)
    print(f"entries           {count} (objects, archives, linker scripts, binaries)", file=out)
    print(f"size              {_mib(size)}", file=out)
    print(f"hits / misses     {hits} / {misses}{rate}", file=out)
    print(f"damaged, rebuilt  {totals.get('damaged', 0)}", file=out)
    print(f"untrusted, rebuilt {totals.get('untrusted', 0)} (another account could have written them)", file=out)
    print(f"not stored        {totals.get('uncached', 0)} (an input changed while it was built)", file=out)
    return 0


def report_command(db: Path, out: Path, threshold: str, last: int, rows: int) -> int:
    """A --history file as one HTML page; a missing or foreign file is one line and exit 1."""
    from ..records import bench
    from ..records.history import HistoryError, load
    from ..records.report import MatplotlibMissing, write

    try:
        pct = bench.parse_threshold(threshold)
    except ValueError:
        print(f"pytest-ondevice report: --threshold={threshold!r}: expected a percentage such as 5%", file=sys.stderr)
        return 2
    try:
        history = load(db, last, records=False)  # the page shows no record as a whole
        gc.freeze()  # the history lives to the end: the collector need not walk it while the page is drawn
        written = write(history, out, pct, last, rows=rows)
    except (HistoryError, MatplotlibMissing) as e:
        print(f"pytest-ondevice report: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"pytest-ondevice report: cannot write {out}: {e.strerror or e}", file=sys.stderr)
        return 1
    finally:
        gc.unfreeze()
    print(f"report written to {written}")
    return 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of runs, 1 or more")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of rows, 0 (every one) or more")
    return value


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


def boards_command(extra: list[Path]) -> int:
    """The boards a run started here would know: pytest reads the project's ini file (pytest.ini,
    pyproject.toml, tox.ini, setup.cfg, found from the current directory as for a run), so its
    `ondevice_boards` count, as for --list-boards and doctor; --boards-dir adds directories."""
    import pytest

    class _ListBoards:
        @pytest.hookimpl(tryfirst=True)
        def pytest_cmdline_main(self, config: pytest.Config) -> int:
            dirs = [Path(p) for p in config.getini("ondevice_boards")]
            return print_boards(BoardRegistry([*dirs, *extra]))

    return int(pytest.main(["-p", "no:cacheprovider"], plugins=[_ListBoards()]))


def doctor_command(fleet: str | None, boards: list[str], rest: list[str]) -> int:
    """Inside pytest's own configuration: ini options, board dirs and transports as a run sees them."""
    import pytest

    argv = ["--ondevice-doctor", "-p", "no:cacheprovider", *rest]
    if fleet:
        argv.append(f"--fleet={fleet}")
    argv += [f"--board={b}" for b in boards]
    return int(pytest.main(argv))


def main(argv: list[str] | None = None) -> int:
    from ..records.report import DEFAULT_LAST, MAX_ROWS  # matplotlib is imported only when a page is drawn

    args_given = sys.argv[1:] if argv is None else argv
    if args_given[:1] == ["bisect"]:  # its own options, and pytest's after them
        from .bisect import command

        return command(args_given[1:])

    parser = argparse.ArgumentParser(prog="pytest-ondevice", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    boards = sub.add_parser("boards", help="list the known boards and their status")
    boards.add_argument(
        "--boards-dir",
        action="append",
        default=[],
        type=Path,
        help="also look for board files here (the project's ondevice_boards ini option is read as well)",
    )
    cache = sub.add_parser("cache", help="the shared build cache: stats, or clean it")
    cache.add_argument("action", choices=("stats", "clean"))
    cache.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="the cache to look at (default: $ONDEVICE_CACHE_DIR, else the project's ondevice_cache_dir, "
        "else ~/.cache/pytest-ondevice)",
    )
    cache.add_argument(
        "--shared",
        action="store_true",
        default=None,
        help="the cache is shared by the members of its group (like ondevice_cache_shared = true)",
    )
    report = sub.add_parser("report", help="a --history file as a static HTML page (trends, new failures)")
    report.add_argument("history", type=Path, help="the SQLite file pytest --history=FILE appended to")
    report.add_argument("--html", type=Path, required=True, metavar="OUT", help="the HTML file to write")
    report.add_argument(
        "--threshold",
        default="5%",
        metavar="PCT",
        help="a kernel slower than the median of its earlier runs by more than this is flagged (default 5%%)",
    )
    report.add_argument(
        "--last",
        type=_positive,
        default=DEFAULT_LAST,
        metavar="N",
        help=f"look at the last N runs (default {DEFAULT_LAST})",
    )
    report.add_argument(
        "--rows",
        type=_count,
        default=MAX_ROWS,
        metavar="N",
        help=f"list at most N rows in each table, the rest counted (default {MAX_ROWS}; 0: every one)",
    )
    doctor = sub.add_parser(
        "doctor",
        help="what can run: each board's toolchain, each fleet device reachable or why not",
        description="Checks as a run would (the project's ini file and board directories are read): "
        "pytest-ondevice doctor --fleet farm.toml, or --board NAME. Other pytest options pass through. "
        "Exit status: 0 everything a run needs is there; 10 every board can run but a device cannot be used; "
        "1 a board cannot run (or the build cache, build dir or lease directory cannot be used); "
        "2 nothing named to check; 4 the fleet file is wrong.",
    )
    sub.add_parser(
        "bisect",
        help="the first commit where selected cases fail or a bench record got slower (git bisect, in a worktree)",
        add_help=False,
    )
    docs = sub.add_parser("docs", help="the manual, installed with the plugin: the pages, or one page's text")
    docs.add_argument("page", nargs="?", help="a page, e.g. farm or transports/ssh")
    nightly = sub.add_parser(
        "nightly", help="write the farm's nightly job (run.sh, a fleet file, systemd units, a CI schedule) into DIR"
    )
    nightly.add_argument("dir", type=Path, metavar="DIR", help="where to write it (existing files are not overwritten)")
    doctor.add_argument("--fleet", metavar="FILE", help="the fleet file to check")
    doctor.add_argument("--board", action="append", default=[], metavar="NAME[,NAME]", help="boards to check")
    args, rest = parser.parse_known_args(argv)
    if args.command == "doctor":
        return doctor_command(args.fleet, args.board, rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "boards":
        return boards_command(args.boards_dir)
    if args.command == "cache":
        return cache_command(args.action, args.cache_dir, shared=args.shared)
    if args.command in ("docs", "nightly"):
        from . import manual

        return manual.docs_command(args.page) if args.command == "docs" else manual.nightly_command(args.dir)
    if args.command == "report":
        return report_command(args.history, args.html, args.threshold, args.last, args.rows)
    return 2  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    shutil.get_terminal_size()
    sys.exit(main())
