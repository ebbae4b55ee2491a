"""`python -m pytest_ondevice.commands.bisect step CONFIG`: the command `git bisect run` calls
at each candidate revision (search.py starts it)."""

from __future__ import annotations

import sys

from .step import step_main


def main(argv: list[str] | None = None) -> int:
    """`python -m pytest_ondevice.commands.bisect step CONFIG` (git bisect run's callback)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "step":
        return step_main(args[1])
    print("usage: pytest-ondevice bisect --good REV --bad REV [pytest options]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
