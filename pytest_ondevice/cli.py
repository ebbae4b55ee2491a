"""The `pytest-ondevice` command: tools around the plugin (`boards` for now)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from . import store
from .board import BoardRegistry
from .schema import ConfigError
from .toolchain import ToolchainError, resolve
from .transports import load as load_transport
from .transports import status as transport_status


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
        try:
            tc = resolve(board)
            tc_status = f"found: {tc.description}"
        except ToolchainError as e:
            tc_status = "missing: " + str(e).split("install one: ", 1)[-1]
        where = f"{board.transport_name} ({transport_status(board.transport)})"
        if board.emulator:
            forms = "|".join(load_transport(board.emulator["name"]).device_forms)
            where += f"; --device={forms}: {board.emulator['name']} ({transport_status(board.emulator)})"
        rows.append((name, board.kind, board.arch, tc_status, where))
    header = ("board", "kind", "arch", "toolchain", "transport")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        cells = [row[i].ljust(widths[i]) for i in range(4)]
        print("  ".join([*cells, row[4]]).rstrip(), file=out)
    if invalid:  # said last, where a listing ends, and in the exit status
        print(f"\n{len(invalid)} board file(s) cannot be used:", file=out)
        for message in invalid:
            print(f"error: {message}", file=out)
        return 1
    return 0


def cache_command(action: str, where: Path | None, out=None) -> int:
    """ccache -s / -C for our cache: what it holds, how often it served, or empty it."""
    out = out or sys.stdout
    path = where or Path(os.environ.get("ONDEVICE_CACHE_DIR") or store.default_dir())
    try:
        cache = store.Store(path)
    except store.CacheError as e:
        print(e, file=sys.stderr)
        return 1
    if action == "clean":
        count, size = cache.usage()
        cache.clear()
        print(f"removed {count} entries ({_mib(size)}) from {path}", file=out)
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
    print(f"not stored        {totals.get('uncached', 0)} (an input changed while it was built)", file=out)
    return 0


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pytest-ondevice", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    boards = sub.add_parser("boards", help="list the known boards and their status")
    boards.add_argument(
        "--boards-dir",
        action="append",
        default=[],
        type=Path,
        help="also look for board files here (like the ondevice_boards ini option)",
    )
    cache = sub.add_parser("cache", help="the shared build cache: stats, or clean it")
    cache.add_argument("action", choices=("stats", "clean"))
    cache.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="the cache to look at (default: $ONDEVICE_CACHE_DIR, else ~/.cache/pytest-ondevice)",
    )
    args = parser.parse_args(argv)
    if args.command == "boards":
        return print_boards(BoardRegistry(args.boards_dir))
    if args.command == "cache":
        return cache_command(args.action, args.cache_dir)
    return 2  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    shutil.get_terminal_size()
    sys.exit(main())
