"""Federation settings of a node file ([federation], [[federate]]) and the --attach flags:
values, exact error messages, and the rules they resolve to."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import NodeConfig, load_node_config
from gateway.federation_config import FederateEntry, FederationRule, FederationSettings
from gateway.tomlfile import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "node.toml"
    path.write_text(text)
    return path


def load_error(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_node_config(path)
    return str(caught.value)


def rules_error(settings: FederationSettings) -> str:
    with pytest.raises(ConfigError) as caught:
        settings.rules()
    return str(caught.value)


FULL = """\
[node]
name = "edge-1"

[federation]
attach = "hub.example:5673"
attach_vhost = "/esb"
attach_login = "edge"
attach_all = "fed.*"
outbox_limit = 500
outbox_policy = "drop-oldest"

[[federate]]
exchange = "prices.?"
type = "subscriber"

[[federate]]
exchange = "orders"
attach = "[::1]"
vhost = "/shop"
login = "shop"
type = "data"
"""


def test_a_full_federation_section(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    settings = load_node_config(path).federation
    assert settings == FederationSettings(
        attach="hub.example:5673",
        attach_vhost="/esb",
        attach_login="edge",
        attach_all="fed.*",
        outbox_limit=500,
        outbox_policy="drop-oldest",
        federate=(
            FederateEntry(
                "prices.?", type="subscriber", where=f"{path}:12: federate[0] (exchange 'prices.?')"
            ),
            FederateEntry(
                "orders",
                attach="[::1]",
                vhost="/shop",
                login="shop",
                type="data",
                where=f"{path}:16: federate[1] (exchange 'orders')",
            ),
        ),
    )
    rules = settings.with_credentials({"edge": "e-pw", "shop": "s-pw"}).rules()
    assert rules == (
        FederationRule(
            "prices.?", "hub.example", 5673, "/esb", "edge", "e-pw", "subscriber", rules[0].origin
        ),
        FederationRule("orders", "::1", 5672, "/shop", "shop", "s-pw", "fanout", rules[1].origin),
        FederationRule("fed.*", "hub.example", 5673, "/esb", "edge", "e-pw", None, "attach_all 'fed.*'"),
        FederationRule(
            "amq.service", "hub.example", 5673, "/esb", "edge", "e-pw", "service", "attach (amq.service)"
        ),
        FederationRule(
            "amq.data", "hub.example", 5673, "/esb", "edge", "e-pw", "fanout", "attach (amq.data)"
        ),
        FederationRule(
            "amq.dataex", "hub.example", 5673, "/esb", "edge", "e-pw", "fanout", "attach (amq.dataex)"
        ),
    )


def test_no_federation_means_no_rules(tmp_path: Path) -> None:
    settings = load_node_config(write(tmp_path, "[node]\nport = 1\n")).federation
    assert settings == FederationSettings()
    assert settings.rules() == ()


def test_patterns_match_whole_names() -> None:
    rule = FederationRule("fed.?x*", "h", 1, "/", "l", "p", None, "o")
    assert rule.matches("fed.ax") and rule.matches("fed.bxyz")
    assert not rule.matches("fed.x") and not rule.matches("a.fed.ax") and not rule.matches("FED.ax")
    assert FederationRule("a.b", "h", 1, "/", "l", "p", None, "o").matches("a.b")
    assert not FederationRule("a.b", "h", 1, "/", "l", "p", None, "o").matches("axb")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[federation]\natach = 'h'\n",
            "2: federation.atach: unknown key (known: attach, attach_vhost, "
            "attach_login, attach_all, outbox_limit, outbox_policy)",
        ),
        ("[federation]\nattach = 'h:99999'\n", "2: federation.attach: expected host[:port], got 'h:99999'"),
        ("[federation]\nattach = 'a b'\n", "2: federation.attach: expected host[:port], got 'a b'"),
        ("[federation]\nattach = 5672\n", "2: federation.attach: expected host[:port], got 5672"),
        (
            "[federation]\nattach_vhost = ''\n",
            "2: federation.attach_vhost: expected a vhost name (a non-empty "
            "string of at most 255 bytes), got ''",
        ),
        (
            "[federation]\nattach_all = ''\n",
            "2: federation.attach_all: expected an exchange name, or a pattern "
            "with * (any characters) and ? (one character), got ''",
        ),
        (
            "[federation]\noutbox_limit = 0\n",
            "2: federation.outbox_limit: expected an integer 1-2147483647, got 0",
        ),
        (
            "[federation]\noutbox_policy = 'drop'\n",
            "2: federation.outbox_policy: expected one of block, drop-oldest, got 'drop'",
        ),
        ("federation = 1\n", "1: federation: expected a table, got 1"),
        (
            "[federate]\nexchange = 'x'\n",
            "1: federate: expected [[federate]] entries (an array of tables), got a table",
        ),
        (
            "[[federate]]\nexchange = 'a'\n\n[[federate]]\ntype = 'fanout'\n",
            "4: federate[1]: missing key 'exchange' (the exchange name or pattern to federate)",
        ),
        (
            "[[federate]]\nexchange = 'a'\n\n[[federate]]\nexchange = 'b'\ntype = 'fan'\n",
            "6: federate[1].type: expected one of subscriber, publisher, locator, fanout, service, data, got 'fan'",
        ),
        (
            "[[federate]]\nexchange = 'a'\nlogn = 'x'\n",
            "3: federate[0].logn: unknown key (known: exchange, attach, vhost, login, type)",
        ),
        (
            "[[federate]]\nexchange = ''\n",
            "2: federate[0].exchange: the default exchange cannot be federated",
        ),
        (
            "[[federate]]\nexchange = 'amq.gateway.management'\n",
            "2: federate[0].exchange: system exchange 'amq.gateway.management' cannot be federated",
        ),
        (
            "[[federate]]\nexchange = 'x'\nattach = 'p'\n\n[[federate]]\nexchange = 'y'\n\n[[federate]]\n"
            "exchange = 'x'\n",
            "9: federate[2].exchange: 'x' is already federated by federate[0]: an exchange "
            "is federated at most once",
        ),
        (
            "federate = [{ exchange = 1 }]\n",
            "1: federate[0].exchange: expected an exchange name, or a pattern "
            "with * (any characters) and ? (one character), got 1",
        ),
    ],
)
def test_file_errors(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    assert load_error(path) == f"{path}:{message}"


def test_an_entry_without_a_parent_is_an_error_naming_it(tmp_path: Path) -> None:
    path = write(tmp_path, "[[federate]]\nexchange = 'a'\nattach = 'p'\n\n[[federate]]\nexchange = 'b.*'\n")
    settings = load_node_config(path).federation
    assert rules_error(settings) == (
        f"{path}:5: federate[1] (exchange 'b.*'): no parent to attach to: give the entry an attach, "
        "or set federation.attach (--attach)"
    )
    # --attach gives it one.
    attached = NodeConfig(federation=settings).with_overrides(attach="hub:1")
    assert [(rule.pattern, rule.host, rule.port) for rule in attached.federation.rules()][:2] == [
        ("a", "p", 5672),
        ("b.*", "hub", 1),
    ]


def test_attach_all_needs_attach() -> None:
    assert rules_error(FederationSettings(attach_all="amq.*")) == (
        "federation.attach_all 'amq.*' needs a parent: set federation.attach (--attach)"
    )


def test_a_login_needs_a_password_except_peering() -> None:
    assert FederationSettings(attach="p").rules()[0].password == "peering"
    assert rules_error(FederationSettings(attach="p", attach_login="edge")) == (
        "attach (amq.service): no password for login 'edge': add it to the users file as "
        '[credentials.edge] password = "..."'
    )
    entry = FederateEntry("x", attach="p", login="shop", where="node.toml:3: federate[0] (exchange 'x')")
    assert rules_error(FederationSettings(federate=(entry,))) == (
        "node.toml:3: federate[0] (exchange 'x'): no password for login 'shop': add it to the users file "
        'as [credentials.shop] password = "..."'
    )
    with_credentials = FederationSettings(attach="p", attach_login="edge").with_credentials({"edge": "pw"})
    assert {rule.password for rule in with_credentials.rules()} == {"pw"}
    assert FederationSettings().with_credentials({"peering": "own"}).password_for("peering") == "own"


def test_attach_flags_override_the_file(tmp_path: Path) -> None:
    config = load_node_config(write(tmp_path, FULL)).with_overrides(
        attach="other:7000", attach_vhost="/x", attach_login=None, attach_all="*", port="1"
    )
    settings = config.federation
    assert (settings.attach, settings.attach_vhost, settings.attach_login, settings.attach_all) == (
        "other:7000",
        "/x",
        "edge",
        "*",
    )
    assert config.port == 1 and len(settings.federate) == 2


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"attach": "host:0"}, "--attach: expected host[:port], got 'host:0'"),
        (
            {"attach_all": ""},
            "--attach-all: expected an exchange name, or a pattern with * (any characters) "
            "and ? (one character), got ''",
        ),
        (
            {"attach_login": ""},
            "--attach-login: expected a user name (a non-empty string of at most 255 bytes), got ''",
        ),
    ],
)
def test_flag_errors_name_the_flag(flags: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        NodeConfig().with_overrides(**flags)
    assert str(caught.value) == message
