"""The node's configuration: a TOML file ([node], [federation], [[federate]]), then
command-line flags on top. Errors name the file, line and key (gateway.tomlfile) or the flag.
"""

from __future__ import annotations

import dataclasses
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.broker.paging import QUEUE_MEMORY_BUDGET
from gateway.diskalarm import DEFAULT_LIMIT
from gateway.federation_config import FEDERATION_CHECKS, FederationSettings, load_federation_settings
from gateway.memoryalarm import DEFAULT_WATERMARK, Watermark
from gateway.names import DEFAULT_PORT, DEFAULT_TLS_PORT, DEFAULT_VHOST
from gateway.security.users import LIMIT
from gateway.tls import LOGIN_FIELDS, VERIFY_MODES, ServerTls, tls_problem
from gateway.tomlfile import (
    ConfigError,
    Invalid,
    TomlFile,
    boolean,
    describe,
    integer,
    one_of,
    read_toml,
    table_values,
)
from gateway.wire.connection import DEFAULT_MAX_MESSAGE_SIZE

LOG_LEVELS = ("debug", "info", "warning", "error")

#: Sections a node config file may hold; anything else is a typo and is reported rather than
#: silently ignored.
SECTIONS = ("node", "vhost", "federation", "federate")


# --------------------------------------------------------------------------------------------
# Value checks, shared by the file and the flags


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
    return tuple(dict.fromkeys([DEFAULT_VHOST, *value]))


#: Size units as RabbitMQ spells them in disk_free_limit: powers of 1000 and of 1024.
SIZE_UNITS = {
    "kB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "k": 2**10,
    "K": 2**10,
    "KiB": 2**10,
    "kiB": 2**10,
    "M": 2**20,
    "MiB": 2**20,
    "G": 2**30,
    "GiB": 2**30,
    "T": 2**40,
    "TiB": 2**40,
}
_SIZE = re.compile(r"^\s*([0-9]+)\s*([A-Za-z]*)\s*$")


def parse_size(value: object) -> int:
    """A byte count: an integer, or a string of digits with an optional unit ("50MB", "1GiB")."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    match = _SIZE.match(value) if isinstance(value, str) else None
    if match is None or (match.group(2) and match.group(2) not in SIZE_UNITS):
        raise Invalid(
            "a size in bytes, optionally with a unit: kB, MB, GB, TB (powers of 1000) or"
            " KiB, MiB, GiB, TiB (powers of 1024; also k, M, G, T)",
            value,
        )
    number, unit = match.groups()
    return int(number) * SIZE_UNITS.get(unit, 1)


_FRACTION = re.compile(r"^\s*(0?\.[0-9]+|1(\.0*)?)\s*$")


def parse_watermark(value: object) -> Watermark:
    """memory_high_watermark: a fraction of the memory available (0.4, "0.4") or a size
    ("300MB", as disk_free_limit)."""
    if isinstance(value, float) or (isinstance(value, str) and _FRACTION.match(value)):
        fraction = float(value)
        if 0.0 < fraction <= 1.0:
            return Watermark(fraction=fraction)
    else:
        try:
            size = parse_size(value)
        except Invalid:
            pass
        else:
            if size > 0:
                return Watermark(size=size)
    raise Invalid(
        "a fraction of the memory available, over 0 and at most 1 (e.g. 0.4), or a size in bytes"
        " with an optional unit (e.g. 300MB, 2GiB)",
        value,
    )


#: The most max_message_size may be (RabbitMQ's limit, 512 MiB).
MAX_MESSAGE_SIZE_LIMIT = 512 * 2**20


def parse_max_message_size(value: object) -> int:
    """max_message_size: a size (as disk_free_limit) over 0 and at most RabbitMQ's 512 MiB."""
    size = parse_size(value)
    if not 0 < size <= MAX_MESSAGE_SIZE_LIMIT:
        raise Invalid(f"a size over 0 and at most 512MiB ({MAX_MESSAGE_SIZE_LIMIT} bytes)", value)
    return size


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
        "port": integer(0, 65535),
        "data_dir": _path(base),
        "memory": boolean,
        "users": _path(base),
        "acl_file": _path(base),
        "log_level": _log_level,
        "heartbeat": integer(0, 65535),  # Connection.Tune carries a short
        "frame_max": integer(4096, 2**32 - 1),  # the spec's minimum frame size
        "channel_max": integer(1, 65535),
        "vhosts": _vhosts,
        "disk_free_limit": parse_size,
        "memory_high_watermark": parse_watermark,
        "queue_memory_budget": parse_size,
        "max_message_size": parse_max_message_size,
        "max_connections": LIMIT,
        "tls_port": integer(0, 65535),
        "tls_cert": _path(base),
        "tls_key": _path(base),
        "tls_ca": _path(base),
        "tls_verify": one_of(*VERIFY_MODES),
        "tls_only": boolean,
        "tls_login_field": one_of(*LOGIN_FIELDS),
    }


#: Config key (and command-line flag) -> NodeConfig field, where they differ.
_FIELDS = {"users": "users_file"}

#: Keys whose flag values arrive as text and are read as integers.
_INTEGER_KEYS = frozenset({"port", "heartbeat", "frame_max", "channel_max", "max_connections", "tls_port"})

#: The TLS keys' defaults: the same as not given when the TLS keys are checked together.
_TLS_DEFAULTS: dict[str, object] = {
    "tls_port": None,
    "tls_cert": None,
    "tls_key": None,
    "tls_ca": None,
    "tls_verify": "peer",
    "tls_only": False,
    "tls_login_field": "cn",
}

#: Flags that argparse hands over as False when not given (store_true).
_SWITCHES = frozenset({"memory", "tls_only"})


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
    port: int = DEFAULT_PORT
    data_dir: Path | None = None
    memory: bool = False
    users_file: Path | None = None
    #: The Qpid ACL file (gateway.security.acl); None: no ACL, permissions alone decide.
    acl_file: Path | None = None
    log_level: str = "info"
    heartbeat: int = 60
    frame_max: int = 131072
    channel_max: int = 2047
    #: A content header announcing a larger body closes its channel with 406 (RabbitMQ's).
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    #: Connections the node lets open at once (None: no limit); more are refused with 530.
    max_connections: int | None = None
    #: RabbitMQ's vhost limits from the [vhost."NAME"] tables: name -> {"max-connections": N, ...}.
    vhost_limits: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Vhosts that exist from the start; "/" always does.
    vhosts: tuple[str, ...] = (DEFAULT_VHOST,)
    #: Bytes that must stay free on the data dir's filesystem; below, publishers are held.
    disk_free_limit: int = DEFAULT_LIMIT
    #: Above it, publishers are held until the node is back under 0.9 of it.
    memory_high_watermark: Watermark = DEFAULT_WATERMARK
    #: Bytes of ready bodies a queue keeps in memory; beyond, bodies go to disk.
    queue_memory_budget: int = QUEUE_MEMORY_BUDGET
    #: Queue arguments each vhost's queues get unless their declare gives them (the
    #: [vhost."NAME"] tables: Qpid's per-virtualhost capacity and flowResumeCapacity).
    queue_defaults: dict[str, dict[str, int]] = field(default_factory=dict)
    federation: FederationSettings = FederationSettings()
    #: TLS (docs/security.md): a certificate and key make a TLS listener on tls_port (5671
    #: unless given); tls_only closes the plain port.
    tls_port: int | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    tls_verify: str = "peer"
    tls_only: bool = False
    tls_login_field: str = "cn"

    @property
    def tls(self) -> ServerTls | None:
        """The TLS listener's settings, None without a certificate."""
        if self.tls_cert is None or self.tls_key is None:
            return None
        port = DEFAULT_TLS_PORT if self.tls_port is None else self.tls_port
        return ServerTls(
            self.tls_cert,
            self.tls_key,
            self.tls_ca,
            self.tls_verify,
            port,
            self.tls_only,
            self.tls_login_field,
        )

    @property
    def store_dir(self) -> Path | None:
        """Where the store lives: None with memory, else data_dir or ./var/<name>."""
        if self.memory:
            return None
        return self.data_dir if self.data_dir is not None else Path("var") / self.name

    def with_overrides(self, **flags: object) -> NodeConfig:
        """Apply command-line flags (None = not given), checked like the file's keys.

        Flags are named like the config keys (port, data_dir, users, attach, ...). Values may
        be the raw strings argparse hands over; errors name the flag, e.g. "--port: expected
        ...". --data-dir and --memory each replace the other's setting from the file;
        memory=False counts as not given.
        """
        federation = self.federation.with_flags(
            **{key: flags.pop(key) for key in list(flags) if key in FEDERATION_CHECKS}
        )
        # memory=False is argparse's store_true default, not a request to leave memory mode.
        given = {
            key: value
            for key, value in flags.items()
            if value is not None and not (key in _SWITCHES and value is False)
        }
        checks = _checks(Path.cwd())
        unknown = sorted(set(given) - set(checks))
        if unknown:
            raise TypeError(f"unknown node config flags: {', '.join(unknown)}")
        if given.get("memory") is True and "data_dir" in given:
            raise ConfigError("--data-dir and --memory cannot be used together")
        # Each value is what its key's check returned: typed by key, which a dict cannot say.
        changes: dict[str, Any] = {}
        for key, value in given.items():
            if isinstance(value, str) and key in _INTEGER_KEYS:
                value = _flaginteger(value)
            try:
                changes[_FIELDS.get(key, key)] = checks[key](value)
            except Invalid as err:
                raise ConfigError(f"--{key.replace('_', '-')}: {err}") from None
        # The TLS keys are checked together, as they end up: the file's with the flags over them.
        tls = {key: value for key, value in vars(self).items() if key.startswith("tls_")}
        tls.update((key, value) for key, value in changes.items() if key.startswith("tls_"))
        problem = tls_problem({key: value for key, value in tls.items() if value != _TLS_DEFAULTS.get(key)})
        if problem is not None:
            raise ConfigError(f"--{problem[0].replace('_', '-')}: {problem[1]}")
        if "data_dir" in changes:
            changes["memory"] = False
        if changes.get("memory") is True:
            changes["data_dir"] = None
        return dataclasses.replace(self, **changes, federation=federation)


def _flaginteger(value: str) -> object:
    """Flags arrive as text; a number becomes an int, anything else stays for the message."""
    try:
        return int(value.strip())
    except ValueError:
        return value


def load_node_config(path: Path | str) -> NodeConfig:
    """Read a node config file; relative paths are taken from its folder."""
    doc = read_toml(Path(path))
    for section in doc.data:
        if section not in SECTIONS:
            raise doc.error((section,), f"unknown section (known: {', '.join(SECTIONS)})")
    node = table_values(doc, ("node",), doc.data.get("node", {}), _checks(doc.path.parent.absolute()))
    if node.get("memory") is True and "data_dir" in node:
        raise doc.error(("node", "memory"), "true conflicts with node.data_dir; keep only one")
    problem = tls_problem(node)
    if problem is not None:
        raise doc.error(("node", problem[0]), problem[1])
    values = {_FIELDS.get(key, key): value for key, value in node.items()}
    queue_defaults, vhost_limits = _vhost_tables(doc)
    named = [*queue_defaults, *vhost_limits]
    if named:
        values["vhosts"] = tuple(dict.fromkeys([*values.get("vhosts", (DEFAULT_VHOST,)), *named]))
    return NodeConfig(
        **values,
        queue_defaults=queue_defaults,
        vhost_limits=vhost_limits,
        federation=load_federation_settings(doc),
    )


#: [vhost."NAME"] keys -> the queue argument each one sets.
_VHOST_QUEUE_ARGUMENTS = {
    "capacity": "x-qpid-capacity",
    "flow_resume_capacity": "x-qpid-flow-resume-capacity",
}


#: [vhost."NAME"] keys that are RabbitMQ's vhost limits (`rabbitmqctl set_vhost_limits`).
VHOST_LIMITS = ("max-connections", "max-queues")


def _vhost_tables(doc: TomlFile) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """The [vhost."NAME"] tables (each vhost named is created): each vhost's default queue
    capacities, and its limits."""
    tables = doc.data.get("vhost", {})
    if not isinstance(tables, dict):
        raise doc.error(("vhost",), f'expected [vhost."NAME"] tables, got {describe(tables)}')
    defaults: dict[str, dict[str, int]] = {}
    limits: dict[str, dict[str, int]] = {}
    for name, table in tables.items():
        where = ("vhost", name)
        try:
            _vhosts([name])
        except Invalid:
            raise doc.error(
                where, "expected a vhost name (a non-empty string of at most 255 bytes)"
            ) from None
        values = table_values(
            doc,
            where,
            table,
            {**dict.fromkeys(_VHOST_QUEUE_ARGUMENTS, parse_size), **dict.fromkeys(VHOST_LIMITS, LIMIT)},
        )
        limits[name] = {key: values.pop(key) for key in VHOST_LIMITS if key in values}
        if "flow_resume_capacity" in values and "capacity" not in values:
            raise doc.error((*where, "flow_resume_capacity"), "needs a capacity in the same table")
        if values.get("flow_resume_capacity", 0) > values.get("capacity", 0):
            raise doc.error((*where, "flow_resume_capacity"), "must not be greater than capacity")
        defaults[name] = {_VHOST_QUEUE_ARGUMENTS[key]: value for key, value in values.items()}
    return defaults, {name: values for name, values in limits.items() if values}
