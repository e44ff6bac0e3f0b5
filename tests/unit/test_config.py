"""Node config: TOML file, defaults, exact error messages, command-line overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import NodeConfig, load_node_config, parse_size, parse_watermark
from gateway.memoryalarm import Watermark
from gateway.tls import ServerTls
from gateway.tomlfile import ConfigError, Invalid

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "node.toml"
    path.write_text(text)
    return path


def load_error(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_node_config(path)
    return str(caught.value)


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("socket.gethostname", lambda: "rabbit1.example.com")
    config = NodeConfig()
    assert config == NodeConfig(
        name="rabbit1",
        host=None,
        port=5672,
        data_dir=None,
        memory=False,
        users_file=None,
        log_level="info",
        heartbeat=60,
        frame_max=131072,
        channel_max=2047,
        disk_free_limit=50_000_000,
    )
    assert config.store_dir == Path("var/rabbit1")
    assert NodeConfig(name="n", memory=True).store_dir is None
    assert NodeConfig(name="n", data_dir=Path("/d")).store_dir == Path("/d")


def test_odd_host_name_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("socket.gethostname", lambda: "")
    assert NodeConfig().name == "amq-gateway"


def test_full_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
# a node
[node]
name = "edge-1"
host = "127.0.0.1"
port = 5673
data_dir = "data/edge"
users = "/etc/amq/users.toml"
log_level = "DEBUG"
heartbeat = 0
frame_max = 4096
channel_max = 64
""",
    )
    assert load_node_config(path) == NodeConfig(
        name="edge-1",
        host="127.0.0.1",
        port=5673,
        data_dir=tmp_path / "data/edge",
        memory=False,
        users_file=Path("/etc/amq/users.toml"),
        log_level="debug",
        heartbeat=0,
        frame_max=4096,
        channel_max=64,
    )


def test_relative_paths_resolve_from_the_config_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "conf").mkdir()
    path = tmp_path / "conf" / "node.toml"
    path.write_text('[node]\nname = "a"\ndata_dir = "../var/a"\nusers = "users.toml"\n')
    monkeypatch.chdir(tmp_path / "conf")
    config = load_node_config("node.toml")
    assert config.data_dir == tmp_path / "conf" / "../var/a"
    assert config.users_file == tmp_path / "conf" / "users.toml"


def test_memory_and_all_interfaces(tmp_path: Path) -> None:
    config = load_node_config(write(tmp_path, '[node]\nname = "m"\nmemory = true\nhost = "*"\n'))
    assert config.memory and config.data_dir is None and config.store_dir is None
    assert config.host is None


def test_empty_file_is_all_defaults(tmp_path: Path) -> None:
    assert load_node_config(write(tmp_path, "")) == NodeConfig()


def test_dotted_keys_are_located(tmp_path: Path) -> None:
    path = write(tmp_path, 'node.name = "x"\nnode.port = 70000\n')
    assert load_error(path) == f"{path}:2: node.port: expected an integer 0-65535, got 70000"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[node]\nname = "n"\nport = "abc"\n', "3: node.port: expected an integer 0-65535, got 'abc'"),
        ("[node]\nport = true\n", "2: node.port: expected an integer 0-65535, got true"),
        ("[node]\nport = 5672.0\n", "2: node.port: expected an integer 0-65535, got 5672.0"),
        ("[node]\nframe_max = 4095\n", "2: node.frame_max: expected an integer 4096-4294967295, got 4095"),
        ("[node]\nheartbeat = -1\n", "2: node.heartbeat: expected an integer 0-65535, got -1"),
        ("[node]\nchannel_max = 0\n", "2: node.channel_max: expected an integer 1-65535, got 0"),
        (
            '[node]\nlog_level = "trace"\n',
            "2: node.log_level: expected one of debug, info, warning, error, got 'trace'",
        ),
        ('[node]\nmemory = "yes"\n', "2: node.memory: expected true or false, got 'yes'"),
        (
            '[node]\nname = "a/b"\n',
            "2: node.name: expected a node name of letters, digits, '.', '_', '-' or '@', got 'a/b'",
        ),
        (
            '[node]\nhost = ""\n',
            "2: node.host: expected a host name or address, or '*' for all interfaces, got ''",
        ),
        ('[node]\ndata_dir = ["a"]\n', "2: node.data_dir: expected a path, got an array"),
        ('[node]\nusers = ""\n', "2: node.users: expected a path, got ''"),
        (
            "[node]\nport = 1\nprot = 2\n",
            "3: node.prot: unknown key (known: name, host, port, data_dir, memory, users, acl_file, "
            "log_level, heartbeat, frame_max, channel_max, vhosts, disk_free_limit, memory_high_watermark, "
            "queue_memory_budget, max_message_size, max_connections, tls_port, tls_cert, tls_key, tls_ca,"
            " tls_verify, tls_only, tls_login_field)",
        ),
        (
            "[node]\nport = 1\n\n[federations]\n",
            "4: federations: unknown section (known: node, vhost, federation, federate)",
        ),
        ("node = 5\n", "1: node: expected a table, got 5"),
        (
            '[node]\ndata_dir = "d"\nmemory = true\n',
            "3: node.memory: true conflicts with node.data_dir; keep only one",
        ),
    ],
)
def test_file_errors(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    assert load_error(path) == f"{path}:{message}"


def test_bad_toml_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, '[node]\nname = "a"\nport = \n')
    assert load_error(path) == f"{path}:3:8: invalid TOML: Invalid value"
    path = write(tmp_path, "[node]\nport = 1\nport = 2\n")
    assert load_error(path) == f"{path}:3:9: invalid TOML: Cannot overwrite a value"


def test_unreadable_files(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    assert load_error(missing) == f"{missing}: cannot read: No such file or directory"
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b'[node]\nname = "\xff"\n')
    assert load_error(binary) == f"{binary}: not UTF-8 text (byte 15)"


def test_memory_false_with_data_dir_is_fine(tmp_path: Path) -> None:
    config = load_node_config(write(tmp_path, '[node]\ndata_dir = "d"\nmemory = false\n'))
    assert config.store_dir == tmp_path / "d"


# --- overrides -------------------------------------------------------------------------------


BASE = NodeConfig(name="base", port=5672, data_dir=Path("/srv/base"), users_file=Path("/u"))


def test_flags_override_and_none_means_not_given() -> None:
    config = BASE.with_overrides(
        host="127.0.0.1",
        port="0",
        name="other",
        data_dir=None,
        memory=None,
        users=None,
        log_level="warning",
    )
    assert config == NodeConfig(
        name="other",
        host="127.0.0.1",
        port=0,
        data_dir=Path("/srv/base"),
        users_file=Path("/u"),
        log_level="warning",
    )
    assert BASE.with_overrides() == BASE
    assert BASE.with_overrides(port=5999, heartbeat="5").port == 5999


def test_memory_flag_replaces_the_files_data_dir_and_back() -> None:
    in_memory = BASE.with_overrides(memory=True)
    assert in_memory.memory and in_memory.data_dir is None and in_memory.store_dir is None
    on_disk = in_memory.with_overrides(data_dir="/tmp/x")
    assert not on_disk.memory and on_disk.store_dir == Path("/tmp/x")


def test_memory_false_is_not_given() -> None:
    in_memory = NodeConfig(name="m", memory=True)
    assert in_memory.with_overrides(memory=False) == in_memory


def test_relative_flag_paths_are_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = BASE.with_overrides(data_dir="data", users="users.toml")
    assert config.data_dir == tmp_path / "data"
    assert config.users_file == tmp_path / "users.toml"


def test_renaming_moves_the_default_data_dir() -> None:
    assert NodeConfig(name="a").with_overrides(name="b").store_dir == Path("var/b")


def test_host_star_means_all_interfaces() -> None:
    assert NodeConfig(name="a", host="10.0.0.1").with_overrides(host="*").host is None


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"port": "abc"}, "--port: expected an integer 0-65535, got 'abc'"),
        ({"port": "70000"}, "--port: expected an integer 0-65535, got 70000"),
        ({"frame_max": "100"}, "--frame-max: expected an integer 4096-4294967295, got 100"),
        ({"log_level": "loud"}, "--log-level: expected one of debug, info, warning, error, got 'loud'"),
        ({"name": "a b"}, "--name: expected a node name of letters, digits, '.', '_', '-' or '@', got 'a b'"),
        ({"data_dir": ""}, "--data-dir: expected a path, got ''"),
        ({"data_dir": "d", "memory": True}, "--data-dir and --memory cannot be used together"),
        (
            {"disk_free_limit": "50 mb"},
            "--disk-free-limit: expected a size in bytes, optionally with a unit: kB, MB, GB, TB"
            " (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024; also k, M, G, T), got '50 mb'",
        ),
    ],
)
def test_flag_errors_name_the_flag(flags: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        BASE.with_overrides(**flags)
    assert str(caught.value) == message


def test_unknown_flag_is_a_programming_error() -> None:
    with pytest.raises(TypeError):
        BASE.with_overrides(prot=1)


# --- the shipped example ---------------------------------------------------------------------


def test_example_config_loads_and_documents_every_key() -> None:
    example = ROOT / "configs" / "node.example.toml"
    config = load_node_config(example)
    assert config.port == 5672 and config.host is None
    text = example.read_text()
    for key in (
        "name",
        "host",
        "port",
        "data_dir",
        "memory",
        "users",
        "log_level",
        "heartbeat",
        "frame_max",
        "channel_max",
        "disk_free_limit",
        "memory_high_watermark",
        "queue_memory_budget",
        "max_message_size",
        "max_connections",
        "tls_port",
        "tls_cert",
        "tls_key",
        "tls_ca",
        "tls_verify",
        "tls_only",
        "tls_login_field",
        "max-connections",
        "max-queues",
    ):
        assert f"\n# {key} = " in text or f"\n{key} = " in text, key


def test_vhosts_always_include_the_default(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('[node]\nvhosts = ["prod", "/", "prod", "staging"]\n')
    assert load_node_config(path).vhosts == ("/", "prod", "staging")
    assert NodeConfig().vhosts == ("/",)


def test_vhosts_must_be_names(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('[node]\nvhosts = ["prod", ""]\n')
    with pytest.raises(ConfigError) as raised:
        load_node_config(path)
    assert str(raised.value) == (
        f"{path}:2: node.vhosts: expected an array of vhost names "
        "(non-empty strings of at most 255 bytes), got an array"
    )


# --- sizes (disk_free_limit) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "size"),
    [
        (0, 0),
        (1234, 1234),
        ("1234", 1234),
        ("50MB", 50_000_000),
        ("50 MB", 50_000_000),
        ("1GB", 10**9),
        ("2kB", 2000),
        ("512MiB", 512 * 2**20),
        ("512M", 512 * 2**20),
        ("3k", 3072),
        ("1GiB", 2**30),
        ("1TB", 10**12),
    ],
)
def test_sizes_are_read_as_rabbitmq_reads_them(value: object, size: int) -> None:
    assert parse_size(value) == size


@pytest.mark.parametrize("value", [-1, "-1MB", "50mb", "1.5GB", "MB", "", "50 M B", True, 1.0, None])
def test_bad_sizes_are_refused_with_what_was_expected(value: object) -> None:
    with pytest.raises(Invalid, match=r"^expected a size in bytes, optionally with a unit: kB, MB"):
        parse_size(value)


def test_disk_free_limit_from_file_and_flag(tmp_path: Path) -> None:
    path = write(tmp_path, '[node]\nname = "n"\ndisk_free_limit = "1GB"\n')
    config = load_node_config(path)
    assert config.disk_free_limit == 10**9
    assert config.with_overrides(disk_free_limit="64MiB").disk_free_limit == 64 * 2**20
    assert write(tmp_path, "[node]\ndisk_free_limit = 5.5\n") == path
    assert load_error(path) == (
        f"{path}:2: node.disk_free_limit: expected a size in bytes, optionally with a unit: kB, MB,"
        " GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024; also k, M, G, T), got 5.5"
    )


# --- memory_high_watermark ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "watermark"),
    [
        (0.4, Watermark(fraction=0.4)),
        ("0.4", Watermark(fraction=0.4)),
        (".25", Watermark(fraction=0.25)),
        (1.0, Watermark(fraction=1.0)),
        ("1", Watermark(fraction=1.0)),
        ("300MB", Watermark(size=300_000_000)),
        ("2GiB", Watermark(size=2 * 2**30)),
        (500_000_000, Watermark(size=500_000_000)),
    ],
)
def test_memory_watermarks_are_fractions_or_sizes(value: object, watermark: Watermark) -> None:
    assert parse_watermark(value) == watermark


@pytest.mark.parametrize("value", [0.0, 1.5, "1.5", "0", 0, "-0.4", "40%", "300 mb", True, None])
def test_bad_memory_watermarks_say_what_was_expected(value: object) -> None:
    with pytest.raises(Invalid, match=r"^expected a fraction of the memory available, over 0 and at most 1"):
        parse_watermark(value)


def test_memory_high_watermark_from_file_and_flag(tmp_path: Path) -> None:
    assert NodeConfig().memory_high_watermark == Watermark(fraction=0.4)
    path = write(tmp_path, '[node]\nname = "n"\nmemory_high_watermark = "1GB"\n')
    config = load_node_config(path)
    assert config.memory_high_watermark == Watermark(size=10**9)
    assert config.with_overrides(memory_high_watermark="0.6").memory_high_watermark == Watermark(fraction=0.6)
    assert write(tmp_path, "[node]\nmemory_high_watermark = 2.0\n") == path
    assert load_error(path) == (
        f"{path}:2: node.memory_high_watermark: expected a fraction of the memory available, over 0 and"
        " at most 1 (e.g. 0.4), or a size in bytes with an optional unit (e.g. 300MB, 2GiB), got 2.0"
    )
    assert Watermark(fraction=0.5).bytes(1000) == 500 and Watermark(size=7).bytes(1000) == 7


def test_queue_memory_budget_from_file_and_flag(tmp_path: Path) -> None:
    assert NodeConfig().queue_memory_budget == 16 * 2**20
    path = write(tmp_path, '[node]\nqueue_memory_budget = "4MiB"\n')
    config = load_node_config(path)
    assert config.queue_memory_budget == 4 * 2**20
    assert config.with_overrides(queue_memory_budget="1MB").queue_memory_budget == 10**6
    with pytest.raises(ConfigError, match="--queue-memory-budget: "):
        config.with_overrides(queue_memory_budget="lots")


# --- [vhost."NAME"]: default queue capacities ------------------------------------------------


def test_vhost_tables_give_queue_capacities_and_create_the_vhost(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[node]\nvhosts = ["staging"]\n\n[vhost."prod"]\ncapacity = "10MiB"\nflow_resume_capacity = 8388608\n'
        '\n[vhost."/"]\ncapacity = 1000\n',
    )
    config = load_node_config(path)
    assert config.vhosts == ("/", "staging", "prod")
    assert config.queue_defaults == {
        "prod": {"x-qpid-capacity": 10 * 2**20, "x-qpid-flow-resume-capacity": 8388608},
        "/": {"x-qpid-capacity": 1000},
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[vhost."prod"]\nflow_resume_capacity = 10\n',
            "3: vhost.prod.flow_resume_capacity: needs a capacity in the same table",
        ),
        (
            '[vhost."prod"]\ncapacity = 10\nflow_resume_capacity = 20\n',
            "4: vhost.prod.flow_resume_capacity: must not be greater than capacity",
        ),
        ('[vhost."prod"]\ncapacity = "lots"\n', "3: vhost.prod.capacity: expected a size in bytes"),
        (
            '[vhost."prod"]\nmax = 1\n',
            "3: vhost.prod.max: unknown key (known: capacity, flow_resume_capacity, max-connections, max-queues)",
        ),
    ],
)
def test_bad_vhost_tables_say_where(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, "[node]\n" + text)
    assert load_error(path).startswith(f"{path}:{message}")


# --- TLS ---------------------------------------------------------------------------------------


def test_tls_keys_make_a_listener_on_5671_unless_a_port_is_given(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(
        '[node]\ntls_cert = "c.pem"\ntls_key = "c.key"\ntls_ca = "ca.pem"\ntls_verify = "require"\n'
    )
    tls = load_node_config(path).tls
    assert tls is not None
    assert (tls.cert, tls.key, tls.ca, tls.verify, tls.port, tls.only) == (
        tmp_path / "c.pem",
        tmp_path / "c.key",
        tmp_path / "ca.pem",
        "require",
        5671,
        False,
    )
    assert BASE.with_overrides(
        tls_cert="a.pem", tls_key="a.key", tls_port="5999", tls_only=True
    ).tls == ServerTls(Path.cwd() / "a.pem", Path.cwd() / "a.key", port=5999, only=True)
    assert NodeConfig().tls is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('tls_cert = "c.pem"', "2: node.tls_cert: needs tls_key (the certificate's private key) too"),
        ('tls_key = "c.key"', "2: node.tls_key: needs tls_cert too"),
        ("tls_only = true", "2: node.tls_only: needs tls_cert and tls_key (the node's certificate)"),
        (
            'tls_verify = "sometimes"',
            "2: node.tls_verify: expected one of none, peer, require, got 'sometimes'",
        ),
    ],
)
def test_tls_key_errors_name_the_file_line_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "node.toml"
    path.write_text(f"[node]\n{text}\n")
    with pytest.raises(ConfigError) as raised:
        load_node_config(path)
    assert str(raised.value) == f"{path}:{message}"


def test_tls_flags_are_checked_with_the_file_under_them(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('[node]\ntls_cert = "c.pem"\ntls_key = "c.key"\n')
    assert load_node_config(path).with_overrides(tls_only=True).tls_only is True
    with pytest.raises(ConfigError, match="^--tls-ca: needs tls_cert and tls_key"):
        BASE.with_overrides(tls_ca="ca.pem")
