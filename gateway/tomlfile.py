"""TOML files whose errors name the file, the line and the key path.

Every mistake in a config file is reported as one `ConfigError` line that names the file, the
line (when it can be found), the key path and what was expected, so an operator can fix it
without reading code. Shared by the node config, its federation settings and the users file.

Key paths are tuples of table keys and, inside arrays of tables, 0-based indexes:
`("federate", 1, "type")` is the `type` key of the second `[[federate]]` entry, rendered
`federate[1].type`.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: A key path: table keys, and indexes into arrays of tables.
KeyPath = tuple[str | int, ...]


class ConfigError(Exception):
    """A config or users file, or a command-line flag, holds something we cannot use."""


_KEY_PART = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_DOTTED_KEY = rf"{_KEY_PART}(?:\s*\.\s*{_KEY_PART})*"
_TABLE_LINE = re.compile(rf"^\s*(\[\[?)\s*({_DOTTED_KEY})\s*\]\]?\s*(?:#.*)?$")
_KEY_LINE = re.compile(rf"^\s*({_DOTTED_KEY})\s*=")
_SYNTAX_POSITION = re.compile(r"^(.*) \(at line (\d+), column (\d+)\)$")
_AT_END = " (at end of document)"
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _split_key(dotted: str) -> tuple[str, ...]:
    parts = re.findall(_KEY_PART, dotted)
    return tuple(_unquote(part) for part in parts)


def _unquote(part: str) -> str:
    if part.startswith('"'):
        try:
            return str(json.loads(part))
        except ValueError:
            return part[1:-1]
    if part.startswith("'"):
        return part[1:-1]
    return part


def key_path(path: KeyPath) -> str:
    """Render a key path the way TOML would spell it: users."bob smith".password, federate[1].type."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + (part if _BARE_KEY.match(part) else json.dumps(part))
    return text


class _ArrayIndexes:
    """Which element of each array of tables the headers seen so far are in."""

    def __init__(self) -> None:
        self._current: dict[KeyPath, int] = {}

    def resolve(self, keys: tuple[str, ...], new_element: bool) -> KeyPath:
        """The key path of a table header; `[[a.b]]` (new_element) starts a new element of a.b."""
        path: KeyPath = ()
        for number, key in enumerate(keys):
            path += (key,)
            if new_element and number == len(keys) - 1:
                index = self._current.get(path, -1) + 1
                for nested in [p for p in self._current if len(p) > len(path) and p[: len(path)] == path]:
                    del self._current[nested]  # a new element starts its own sub-arrays
                self._current[path] = index
                path += (index,)
            elif path in self._current:
                path += (self._current[path],)
        return path


def _key_lines(text: str) -> dict[KeyPath, int]:
    """Map each key path to the line defining it, best effort.

    TOML parsers do not report where a valid key sits, but an error about its value is far
    more useful with a line number. This scan understands table headers, arrays of tables,
    dotted keys and multi-line strings, which covers hand-written config files.
    """
    lines: dict[KeyPath, int] = {}
    table: KeyPath = ()
    arrays = _ArrayIndexes()
    open_quote: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if open_quote is not None:
            if open_quote in line:
                open_quote = None
            continue
        header = _TABLE_LINE.match(line)
        if header:
            table = arrays.resolve(_split_key(header.group(2)), new_element=header.group(1) == "[[")
            for end in range(1, len(table) + 1):  # [a.b] also defines a
                lines.setdefault(table[:end], number)
            continue
        assignment = _KEY_LINE.match(line)
        if assignment:
            lines.setdefault(table + _split_key(assignment.group(1)), number)
        for quote in ('"""', "'''"):
            if line.count(quote) % 2 == 1:
                open_quote = quote
                break
    return lines


@dataclass(frozen=True)
class TomlFile:
    """A parsed TOML file that can point at the line of a key when something is wrong."""

    path: Path
    data: dict[str, Any]
    lines: Mapping[KeyPath, int]

    def where(self, path: KeyPath) -> str:
        """`file:line: key.path`, at the key's line or its nearest parent's."""
        for end in range(len(path), 0, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return f"{self.path}:{line}: {key_path(path)}"
        return f"{self.path}: {key_path(path)}"

    def error(self, path: KeyPath, message: str) -> ConfigError:
        """An error about the value at `path`, located at its line or its nearest parent's."""
        return ConfigError(f"{self.where(path)}: {message}")


def read_toml(path: Path) -> TomlFile:
    """Read and parse a TOML file; unreadable files and syntax errors become ConfigError."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start})") from None
    return parse_toml(text, path)


def parse_toml(text: str, path: Path) -> TomlFile:
    """Parse TOML text read from `path` (which errors name); a syntax error becomes
    ConfigError `file:line:col: invalid TOML: ...`, the end of the document included."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(_syntax_error(text, path, str(err))) from None
    return TomlFile(path, data, _key_lines(text))


def _syntax_error(text: str, path: Path, error: str) -> str:
    position = _SYNTAX_POSITION.match(error)
    if position is not None:
        problem, line, column = position.groups()
        return f"{path}:{line}:{column}: invalid TOML: {problem}"
    if error.endswith(_AT_END):
        line, column = text.count("\n") + 1, len(text) - text.rfind("\n")
        return f"{path}:{line}:{column}: invalid TOML: {error.removesuffix(_AT_END)}"
    return f"{path}: invalid TOML: {error}"


def describe(value: object) -> str:
    """Show a value in error messages as the user wrote it (TOML spelling, not Python's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, int | float):
        return str(value)
    return f"a {type(value).__name__}"


class Invalid(ValueError):
    """A value failed a check; whoever catches it knows where the value came from."""

    def __init__(self, expected: str, value: object) -> None:
        super().__init__(f"expected {expected}, got {describe(value)}")


# --------------------------------------------------------------------------------------------
# Value checks: each takes a value from a file or a flag and returns it or raises Invalid

Check = Callable[[object], Any]


def integer(low: int, high: int) -> Check:
    def check(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise Invalid(f"an integer {low}-{high}", value)
        return value

    return check


def boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise Invalid("true or false", value)
    return value


def one_of(*choices: str) -> Check:
    def check(value: object) -> str:
        if not isinstance(value, str) or value not in choices:
            raise Invalid("one of " + ", ".join(choices), value)
        return value

    return check


def text(what: str, max_bytes: int = 255) -> Check:
    """A non-empty string of at most `max_bytes` UTF-8 bytes, described as `what`."""

    def check(value: object) -> str:
        if not isinstance(value, str) or not value or len(value.encode()) > max_bytes:
            raise Invalid(what, value)
        return value

    return check


def table_values(doc: TomlFile, where: KeyPath, table: object, checks: Mapping[str, Check]) -> dict[str, Any]:
    """Check every key of `table` (found at `where`); unknown keys and bad values are errors."""
    if not isinstance(table, dict):
        raise doc.error(where, f"expected a table, got {describe(table)}")
    values: dict[str, Any] = {}
    for key, value in table.items():
        check = checks.get(key)
        if check is None:
            raise doc.error((*where, key), f"unknown key (known: {', '.join(checks)})")
        try:
            values[key] = check(value)
        except Invalid as err:
            raise doc.error((*where, key), str(err)) from None
    return values
