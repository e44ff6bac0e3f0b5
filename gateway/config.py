"""The node's configuration: a TOML file, then command-line flags on top.

Every mistake in a config file is reported as one `ConfigError` line that names the file,
the line (when it can be found), the key path and what was expected, so an operator can fix
it without reading code. `read_toml` and `describe` are shared with the users file loader.
"""

from __future__ import annotations

import dataclasses
import json
import re
import socket
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOG_LEVELS = ("debug", "info", "warning", "error")

#: Sections a node config file may hold. Federation adds its own section here when it lands;
#: anything else is a typo and is reported rather than silently ignored.
SECTIONS = ("node",)


class ConfigError(Exception):
    """A config or users file, or a command-line flag, holds something we cannot use."""


# --------------------------------------------------------------------------------------------
# TOML files with key-path error messages

_KEY_PART = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_DOTTED_KEY = rf"{_KEY_PART}(?:\s*\.\s*{_KEY_PART})*"
_TABLE_LINE = re.compile(rf"^\s*\[\[?\s*({_DOTTED_KEY})\s*\]\]?\s*(?:#.*)?$")
_KEY_LINE = re.compile(rf"^\s*({_DOTTED_KEY})\s*=")
_SYNTAX_POSITION = re.compile(r"^(.*) \(at line (\d+), column (\d+)\)$")
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


def key_path(path: tuple[str, ...]) -> str:
    """Render a key path the way TOML would spell it: users."bob smith".password."""
    return ".".join(part if _BARE_KEY.match(part) else json.dumps(part) for part in path)


def _key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Map each key path to the line defining it, best effort.

    TOML parsers do not report where a valid key sits, but an error about its value is far
    more useful with a line number. This scan understands table headers, dotted keys and
    multi-line strings, which covers hand-written config files.
    """
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    open_quote: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if open_quote is not None:
            if open_quote in line:
                open_quote = None
            continue
        header = _TABLE_LINE.match(line)
        if header:
            table = _split_key(header.group(1))
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
    lines: Mapping[tuple[str, ...], int]

    def error(self, path: tuple[str, ...], message: str) -> ConfigError:
        """An error about the value at `path`, located at its line or its nearest parent's."""
        for end in range(len(path), 0, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return ConfigError(f"{self.path}:{line}: {key_path(path)}: {message}")
        return ConfigError(f"{self.path}: {key_path(path)}: {message}")


def read_toml(path: Path) -> TomlFile:
    """Read and parse a TOML file; unreadable files and syntax errors become ConfigError."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        position = _SYNTAX_POSITION.match(str(err))
        if position:
            problem, line, column = position.groups()
            raise ConfigError(f"{path}:{line}:{column}: invalid TOML: {problem}") from None
        raise ConfigError(f"{path}: invalid TOML: {err}") from None
    return TomlFile(path, data, _key_lines(text))


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
# Value checks, shared by the file and the flags


def _integer(low: int, high: int) -> Callable[[object], int]:
    def check(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise Invalid(f"an integer {low}-{high}", value)
        return value

    return check


def _boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise Invalid("true or false", value)
    return value


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,254}$")


def _name(value: object) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise Invalid("a node name of letters, digits, '.', '_', '-' or '@'", value)
    return value


def _host(value: object) -> str | None:
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise Invalid("a host name or address, or '*' for all interfaces", value)
    return None if value == "*" else value


def _log_level(value: object) -> str:
    if not isinstance(value, str) or value.lower() not in LOG_LEVELS:
        raise Invalid("one of " + ", ".join(LOG_LEVELS), value)
    return value.lower()


def _vhosts(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(
        isinstance(name, str) and name and len(name.encode()) <= 255 for name in value
    ):
        raise Invalid("an array of vhost names (non-empty strings of at most 255 bytes)", value)
    return tuple(dict.fromkeys(["/", *value]))


def _path(base: Path) -> Callable[[object], Path]:
    def check(value: object) -> Path:
        if not isinstance(value, str) or not value:
            raise Invalid("a path", value)
        return base / Path(value).expanduser()

    return check


def _checks(base: Path) -> dict[str, Callable[[object], Any]]:
    """Key -> check; relative paths resolve against `base` (the config file's folder or cwd)."""
    return {
        "name": _name,
        "host": _host,
        "port": _integer(0, 65535),
        "data_dir": _path(base),
        "memory": _boolean,
        "users": _path(base),
        "log_level": _log_level,
        "heartbeat": _integer(0, 65535),  # Connection.Tune carries a short
        "frame_max": _integer(4096, 2**32 - 1),  # the spec's minimum frame size
        "channel_max": _integer(1, 65535),
        "vhosts": _vhosts,
    }


#: Config key (and command-line flag) -> NodeConfig field, where they differ.
_FIELDS = {"users": "users_file"}

#: Keys whose flag values arrive as text and are read as integers.
_INTEGER_KEYS = frozenset({"port", "heartbeat", "frame_max", "channel_max"})


# --------------------------------------------------------------------------------------------
# The node


def _default_name() -> str:
    short = socket.gethostname().split(".")[0]
    return short if _NAME.match(short) else "amq-gateway"


@dataclass(frozen=True)
class NodeConfig:
    """Everything a node needs to start. Build it with `load_node_config` and `with_overrides`.

    `host` None means every interface, IPv4 and IPv6, as RabbitMQ listens by default: it is
    what `trio.open_tcp_listeners(port, host=None)` binds. In files and flags it is spelled
    "*". `data_dir` None means ./var/<name> (see `store_dir`), so renaming a node with
    --name moves its default data dir with it.
    """

    name: str = field(default_factory=_default_name)
    host: str | None = None
    port: int = 5672
    data_dir: Path | None = None
    memory: bool = False
    users_file: Path | None = None
    log_level: str = "info"
    heartbeat: int = 60
    frame_max: int = 131072
    channel_max: int = 2047
    #: Vhosts that exist from the start; "/" always does.
    vhosts: tuple[str, ...] = ("/",)

    @property
    def store_dir(self) -> Path | None:
        """Where the store lives: None with memory, else data_dir or ./var/<name>."""
        if self.memory:
            return None
        return self.data_dir if self.data_dir is not None else Path("var") / self.name

    def with_overrides(self, **flags: object) -> NodeConfig:
        """Apply command-line flags (None = not given), checked like the file's keys.

        Flags are named like the config keys (port, data_dir, users, ...). Values may be the
        raw strings argparse hands over; errors name the flag, e.g. "--port: expected ...".
        --data-dir and --memory each replace the other's setting from the file; memory=False
        counts as not given.
        """
        # memory=False is argparse's store_true default, not a request to leave memory mode.
        given = {
            key: value
            for key, value in flags.items()
            if value is not None and not (key == "memory" and value is False)
        }
        checks = _checks(Path.cwd())
        unknown = sorted(set(given) - set(checks))
        if unknown:
            raise TypeError(f"unknown node config flags: {', '.join(unknown)}")
        if given.get("memory") is True and "data_dir" in given:
            raise ConfigError("--data-dir and --memory cannot be used together")
        changes: dict[str, object] = {}
        for key, value in given.items():
            if isinstance(value, str) and key in _INTEGER_KEYS:
                value = _flag_integer(value)
            try:
                changes[_FIELDS.get(key, key)] = checks[key](value)
            except Invalid as err:
                raise ConfigError(f"--{key.replace('_', '-')}: {err}") from None
        if "data_dir" in changes:
            changes["memory"] = False
        if changes.get("memory") is True:
            changes["data_dir"] = None
        return dataclasses.replace(self, **changes)


def _flag_integer(value: str) -> object:
    """Flags arrive as text; a number becomes an int, anything else stays for the message."""
    try:
        return int(value.strip())
    except ValueError:
        return value


def load_node_config(path: Path | str) -> NodeConfig:
    """Read a node config file ([node] table); relative paths are taken from its folder."""
    doc = read_toml(Path(path))
    for section in doc.data:
        if section not in SECTIONS:
            raise doc.error((section,), f"unknown section (known: {', '.join(SECTIONS)})")
    node = doc.data.get("node", {})
    if not isinstance(node, dict):
        raise doc.error(("node",), f"expected a table, got {describe(node)}")
    checks = _checks(doc.path.parent.absolute())
    values: dict[str, object] = {}
    for key, value in node.items():
        check = checks.get(key)
        if check is None:
            raise doc.error(("node", key), f"unknown key (known: {', '.join(checks)})")
        try:
            values[_FIELDS.get(key, key)] = check(value)
        except Invalid as err:
            raise doc.error(("node", key), str(err)) from None
    if values.get("memory") is True and "data_dir" in values:
        raise doc.error(("node", "memory"), "true conflicts with node.data_dir; keep only one")
    return NodeConfig(**values)  # type: ignore[arg-type]
