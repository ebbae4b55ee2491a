"""A failure's message with what a reader wants first: the exception, not the traceback's opening.

pytest's long traceback of a Python test (a scripted `device` test) opens with the failing
function's arguments, a fixture's repr (`device = <Device rpi@pi-2>`), and ends with the
exception on its `E` lines: as a headline the first line says nothing, and a history that
keeps the first few hundred characters may lose the exception altogether.

`failure_text` is what a history keeps of a report: the exception (pytest's
`reprcrash.message`) first, then the end of the traceback (where it failed), cut to a
limit. `headline` reads a kept text back, of this or of an older form (the traceback's
first characters): the exception and the line it failed on, and the rest. A C case's
failure already opens with its failure (`out[0] == 127 failed at add_test.cc:14`): both
leave it as it is. Neither imports pytest: the report reads histories without it."""

from __future__ import annotations

import re

MESSAGE_MAX = 1000  # characters of a failure's text a history keeps: an ExpectTimeout alone is ~700
HEAD_MAX = 400  # characters of the exception shown as the headline; the whole line is folded below it
HEAD_LINES = 3  # lines of the exception shown as the headline (an assertion's explanation may run long)
CUT = "…"  # where the kept traceback was cut: its opening is gone

_WORKER_HEADER = re.compile(r"^\[gw\d+\] \S+ -- Python \S+ \S+\n")
# pytest's exception lines: "E" and the failing source line's indentation (4 at least), then the text
_E_LINE = re.compile(r"^E(?P<text> {3,}.*)?$")
_FLOW = re.compile(r"^>\s+(?P<code>\S.*)$")  # pytest's marker of the failing source line (long style)
_LOCATION = re.compile(r"^(?P<file>\S+?):(?P<line>\d+): (?P<what>\S.*)$")  # "test_x.py:18: ExpectTimeout"
_SHORT_LOCATION = re.compile(r"^(?P<file>\S+?):(?P<line>\d+): in \S+$")  # --tb=short: "test_x.py:18: in test_calc"
_QUALIFIED = re.compile(r"^(?:[A-Za-z_]\w*\.)+(?P<name>[A-Za-z_]\w*)(?=: |$)")  # "pkg.mod.ExpectTimeout: ..."
_NATIVE = "Traceback (most recent call last):"
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


def without_worker_header(text: str) -> str:
    """pytest-xdist puts `[gw1] linux -- Python 3.11.7 /path/python` before a worker's failure."""
    return _WORKER_HEADER.sub("", text, count=1)


def failure_text(report, limit: int = MESSAGE_MAX) -> str:
    """What a history keeps of a report that did not pass: a skip's reason; a failure whose
    text opens with it (a C case's, an infrastructure error) as it is; a Python traceback
    as its exception, then as much of the traceback's end as fits (marked … where cut)."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, "Skipped: why")
        return str(longrepr[2])[:limit]
    text = without_worker_header(report.longreprtext)
    crash = getattr(getattr(longrepr, "reprcrash", None), "message", None) or ""
    crash = crash.strip("\n")
    if not crash.strip() or text.lstrip().startswith(crash.splitlines()[0]):
        return text[:limit]
    head = crash[:limit]
    room = limit - len(head) - 1
    tail = text.rstrip("\n")
    if len(tail) > room:
        tail = tail[len(tail) - room + len(CUT) + 1 :]
        tail = CUT + "\n" + tail.split("\n", 1)[1] if "\n" in tail else ""
    return f"{head}\n{tail}" if tail.strip() else head


def is_traceback(text: str) -> bool:
    """Whether a kept text is a Python traceback (pytest's `E` lines, or a native one): an
    error of the test's own code (a fixture's, a teardown's), not a device's or a link's."""
    lines = without_worker_header(text.strip("\n") + "\n").splitlines()
    return any(_E_LINE.match(line) and line.strip() != "E" for line in lines) or text.lstrip().startswith(_NATIVE)


def headline(text: str) -> tuple[list[str], list[str]]:
    """A kept failure text as (the lines to show first, the rest, in order): for a Python
    traceback its exception (the last `E` block: the one raised last), shortened to
    HEAD_LINES lines of HEAD_MAX characters, and the source line it failed on as
    `> file:line  code`; for anything else its first line and the `>` source line after it."""
    lines = [line.rstrip() for line in without_worker_header(text.strip() + "\n").splitlines()]
    block = _last_exception_block(lines)
    if block is None:
        return _first_line(lines)
    start, end = block
    exception = _dedent([_e_text(line) for line in lines[start:end]])
    shown = [line for line in exception if line.strip()][:HEAD_LINES]
    head = [_short(shown[0]), *shown[1:]]
    cut = any(len(line) > HEAD_MAX for line in head) or len(shown) < len([x for x in exception if x.strip()])
    head = [line if len(line) <= HEAD_MAX else line[: HEAD_MAX - 1] + CUT for line in head]
    source = _source_line(lines, start, end)
    if source:
        head.append(source)
    used = set(range(start, end)) if not cut else set()
    # a text kept by failure_text opens with the exception the E block repeats
    first = [x.strip() for x in exception if x.strip()]
    for i, line in enumerate(lines[: len(first)]):
        if line.strip() == first[i] or _short(line.strip()) == _short(first[i]):
            used.add(i)
        else:
            break
    rest = [line for i, line in enumerate(lines) if i not in used and line.strip()]
    return head, rest


def _first_line(lines: list[str]) -> tuple[list[str], list[str]]:
    """Not a Python traceback: its first line (the assertion, or the exception of a native
    traceback) and the `>` source line right after it; the rest."""
    lines = [line for line in lines if line.strip()]
    if not lines:
        return [], []
    if lines[0] == _NATIVE:  # --tb=native: the exception is the last line at the margin
        last = next((i for i in range(len(lines) - 1, 0, -1) if not lines[i][0].isspace()), None)
        if last is not None and not lines[last].startswith(_CHAINED):
            return [_short(lines[last])[:HEAD_MAX]], [line for i, line in enumerate(lines) if i != last]
    # a C case's source lines: CONTEXT (2) above the failing one, marked ">"
    head = [lines[0][:300], *[line for line in lines[1:4] if line.lstrip().startswith(">")][:1]]
    return head, [line for line in lines[1:] if line not in head]


def _e_text(line: str) -> str:
    """The text of a line known to be an `E` line ("" for a bare `E`)."""
    marked = _E_LINE.match(line)
    assert marked is not None, line
    return marked.group("text") or ""


def _last_exception_block(lines: list[str]) -> tuple[int, int] | None:
    """(start, end) of the last run of `E` lines whose first holds text; None when there is none."""
    end = None
    for i in range(len(lines) - 1, -1, -1):
        marked = _E_LINE.match(lines[i])
        if marked and end is None:
            end = i + 1
        elif not marked and end is not None:
            start = i + 1
            if _e_text(lines[start]).strip():
                return start, end
            end = None
    if end is not None and _e_text(lines[0]).strip():
        return 0, end
    return None


def _dedent(texts: list[str]) -> list[str]:
    """The exception's lines without the indentation pytest gave them all (its own kept)."""
    indents = [len(t) - len(t.lstrip(" ")) for t in texts if t.strip()]
    cut = min(indents) if indents else 0
    return [t[cut:] for t in texts]


def _short(line: str) -> str:
    """`pytest_ondevice.scripted.console.ExpectTimeout: ...` as `ExpectTimeout: ...`."""
    return _QUALIFIED.sub(lambda m: m.group("name"), line, count=1)


def _source_line(lines: list[str], start: int, end: int) -> str:
    """The source line the exception was raised on, as `> file:line  code` (the file and line
    when the traceback names them): pytest's `>` line above the E block, and the location
    below it (long style) or above the code (short style)."""
    where = ""
    after = next((line for line in lines[end:] if line.strip()), "")
    located = _LOCATION.match(after)
    if located and not _SHORT_LOCATION.match(after):
        where = f"{located['file']}:{located['line']}"
    code = ""
    for i in range(start - 1, max(-1, start - 40), -1):
        line = lines[i]
        flow = _FLOW.match(line)
        if flow:
            code = flow["code"].strip()
            break
        short = _SHORT_LOCATION.match(line)
        if short:  # --tb=short: the location, then the code indented, then the E lines
            code = next((x.strip() for x in lines[i + 1 : start] if x.strip() and not set(x.strip()) <= {"^"}), "")
            where = where or f"{short['file']}:{short['line']}"
            break
        if _LOCATION.match(line) or line.startswith("_ _ "):
            break  # the entry before this one: no source line marked in this one
    if not code:
        return f"at {where}" if where else ""
    return f"> {where}  {code}" if where else f"> {code}"
