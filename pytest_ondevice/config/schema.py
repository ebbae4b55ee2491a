"""Validation of our TOML files, with errors that name the file and the key.

Board files and directory configs are written by hand; a typo must say where it
is and what was probably meant, not surface later as a KeyError.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from pathlib import Path
from typing import Any


class ConfigError(Exception):
    """A user's file is wrong; the message names the file and the key."""


# A spec maps key -> type, tuple of allowed strings, or a nested spec dict.
# Types: str, int, float (int accepted), bool, list (of str), "table" (free-form dict),
# SECONDS (a finite number > 0: a timeout of 0, -5 or nan would never or always strike),
# COMMAND (a string or a list of strings).
Spec = dict[str, Any]
SECONDS = "seconds"
COMMAND = "command"  # a command: one string (a path may hold spaces), or a list of its words


def seconds(value: Any) -> float:
    """A timeout as a float, or ValueError saying why not (also for "abc", 0, -5, nan, inf)."""
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        raise ValueError(f"must be a number of seconds, not {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"must be a number of seconds > 0, not {value!r}")
    return number


def load_toml(path: Path) -> dict[str, Any]:
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:  # TOML is UTF-8: a Latin-1 comment is the usual cause
        raise ConfigError(not_utf8(path, raw, e)) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None


def not_utf8(path: Path, raw: bytes, error: UnicodeDecodeError) -> str:
    """Where the first byte that is not UTF-8 is, as an editor counts (line and column from 1)."""
    line = raw.count(b"\n", 0, error.start) + 1
    before = raw[raw.rfind(b"\n", 0, error.start) + 1 : error.start]  # valid UTF-8: the error is the first
    column = len(before.decode("utf-8")) + 1  # in characters, as an editor counts them
    byte = raw[error.start]
    return (
        f"{path}:{line}: not UTF-8: byte 0x{byte:02x} at column {column} "
        "(TOML files must be UTF-8: save it as UTF-8, or write that character as ASCII)"
    )


def check(data: dict[str, Any], spec: Spec, path: Path, prefix: str = "") -> None:
    """Raise ConfigError for unknown keys and wrong types (missing keys are the caller's)."""
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in spec:
            hint = difflib.get_close_matches(key, list(spec), n=1)
            also = f" (did you mean '{prefix}{hint[0]}'?)" if hint else ""
            known = ", ".join(sorted(spec))
            raise ConfigError(f"{path}: unknown key '{dotted}'{also}; known keys: {known}")
        _check_value(value, spec[key], path, dotted)


def _check_value(value: Any, kind: Any, path: Path, dotted: str) -> None:
    if isinstance(kind, dict):
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: '{dotted}' must be a table, not {_tname(value)}")
        if "*" in kind:  # a table of named sub-tables, e.g. [files."x_test.c"]
            for name, sub in value.items():
                _check_value(sub, kind["*"], path, f"{dotted}.{name}")
        else:
            check(value, kind, path, prefix=f"{dotted}.")
    elif isinstance(kind, tuple):
        if value not in kind:
            raise ConfigError(f"{path}: '{dotted}' must be one of {', '.join(kind)}, not {value!r}")
    elif kind == SECONDS:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{path}: '{dotted}' must be a number, not {_tname(value)}")
        try:
            seconds(value)
        except ValueError as e:
            raise ConfigError(f"{path}: '{dotted}' {e}") from None
    elif kind == COMMAND:
        if not (isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))):
            raise ConfigError(f"{path}: '{dotted}' must be a command: a string or a list of strings")
    elif kind == "table":
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: '{dotted}' must be a table, not {_tname(value)}")
    elif kind is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{path}: '{dotted}' must be a list of strings")
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{path}: '{dotted}' must be a number, not {_tname(value)}")
    elif kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: '{dotted}' must be an integer, not {_tname(value)}")
    elif not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ConfigError(f"{path}: '{dotted}' must be {_NAMES.get(kind, kind.__name__)}, not {_tname(value)}")


def _tname(value: Any) -> str:
    return _NAMES.get(type(value), type(value).__name__)


_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    list: "a list",
    dict: "a table",
}
