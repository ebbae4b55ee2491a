"""The `pytest-ondevice` command: tools around the plugin (`boards` for now)."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from .board import BoardRegistry
from .schema import ConfigError
from .toolchain import ToolchainError, resolve
from .transports import status as transport_status


def print_boards(registry: BoardRegistry, out=sys.stdout) -> int:
    """One line per board: what it is, its toolchain and its transport."""
    rows = []
    status = 0
    for name in registry.names():
        try:
            board = registry.get(name)
        except ConfigError as e:
            rows.append((name, "-", "-", f"invalid: {e}", "-"))
            status = 1
            continue
        try:
            tc = resolve(board)
            tc_status = f"found: {tc.description}"
        except ToolchainError as e:
            tc_status = "missing: " + str(e).split("install one: ", 1)[-1]
        where = f"{board.transport_name} ({transport_status(board.transport)})"
        if board.emulator:
            where += f"; --device=qemu: {board.emulator['name']} ({transport_status(board.emulator)})"
        rows.append((name, board.kind, board.arch, tc_status, where))
    header = ("board", "kind", "arch", "toolchain", "transport")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        cells = [row[i].ljust(widths[i]) for i in range(4)]
        print("  ".join([*cells, row[4]]).rstrip(), file=out)
    return status


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
    args = parser.parse_args(argv)
    if args.command == "boards":
        return print_boards(BoardRegistry(args.boards_dir))
    return 2  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    shutil.get_terminal_size()
    sys.exit(main())
