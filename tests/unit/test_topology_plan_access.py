"""topology.plan_access on live states built in code: a file's [[vhosts]], [[users]],
[[permissions]] and [[topic_permissions]] against what a node lists, with the requests
amq-config would send, passwords from the environment or a file (never the TOML), prune and
what it never deletes, and a file without such entries leaving a node's users alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from federation.cli import config_cli
from gateway.security.passwords import PasswordHash
from topology.changes import ordered_requests
from topology.live import LiveAccess, LiveNode, LiveState
from topology.loader import TopologyError, load_topology_text
from topology.model import Topology
from topology.plan import diff

FILE = """
[nodes.a]
host = "127.0.0.1"
port = 5701

[[vhosts]]
name = "prod"

[[users]]
name = "app"
tags = ["monitoring"]
password_env = "TEST_APP_PASSWORD"

[[permissions]]
user = "app"
vhost = "prod"
configure = "^app\\\\."
write = ".*"
read = ".*"

[[topic_permissions]]
user = "app"
vhost = "prod"
exchange = "amq.topic"
write = "^app\\\\."
read = ".*"
"""


def node(access: LiveAccess | None) -> LiveState:
    return LiveState({"a": LiveNode(name="a", access=access)})


def plan_lines(topology: Topology, access: LiveAccess | None, prune: bool = False) -> list[str]:
    return diff(topology, node(access), prune).lines()


@pytest.fixture
def topology(monkeypatch: pytest.MonkeyPatch) -> Topology:
    monkeypatch.setenv("TEST_APP_PASSWORD", "s3cret")
    return load_topology_text(FILE, "access.toml")


def test_a_fresh_node_gets_the_vhost_user_and_permissions_in_order(topology: Topology) -> None:
    plan = diff(topology, node(LiveAccess(vhosts=[{"name": "/"}])), prune=False)
    assert plan.lines() == [
        "Node a (127.0.0.1:5701):",
        "  + vhost prod",
        "  + user app (tags: monitoring)",
        """  + permission app in vhost "prod" (configure "^app\\\\.", write ".*", read ".*")""",
        """  + topic permission app in vhost "prod" on amq.topic (write "^app\\\\.", read ".*")""",
        "",
        "Plan: 4 to create, 0 to change, 0 to delete.",
    ]
    requests = [request for _, request in ordered_requests(plan.changes)]
    assert [method for method, _ in requests] == [
        "vhosts.add",
        "users.add",
        "permissions.set",
        "topic_permissions.set",
    ]
    user = requests[1][1]
    assert user["name"] == "app" and user["tags"] == ["monitoring"]
    assert "password" not in user and PasswordHash.parse(user["password_hash"]).verify("s3cret")
    assert requests[2] == (
        "permissions.set",
        {"user": "app", "vhost": "prod", "configure": "^app\\.", "write": ".*", "read": ".*"},
    )


def test_the_requests_are_amq_configs(topology: Topology) -> None:
    plan = diff(topology, node(LiveAccess(vhosts=[{"name": "/"}])), prune=False)
    sent: list[tuple[str, dict[str, object]]] = []

    class Recorder:
        async def call(self, method: str, arguments: dict[str, object] | None = None) -> list[object]:
            sent.append((method, arguments or {}))
            return []

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def connect(address: object, timeout: float):  # type: ignore[no-untyped-def]
        yield Recorder()

    for argv in (
        ["vhost", "add", "prod"],
        ["permissions", "set", "-p", "prod", "app", "^app\\.", ".*", ".*"],
        ["topic-permissions", "set", "-p", "prod", "app", "amq.topic", "^app\\.", ".*"],
    ):
        assert config_cli.main(argv, connect=connect) == 0
    planned = [request for _, request in ordered_requests(plan.changes) if request[0] != "users.add"]
    assert sent == planned


def test_a_matching_node_has_no_changes_and_differences_change_in_place(topology: Topology) -> None:
    live = LiveAccess(
        vhosts=[{"name": "/"}, {"name": "prod"}],
        users=[{"name": "app", "tags": ["monitoring"], "source": "node"}],
        permissions=[{"user": "app", "vhost": "prod", "configure": "^app\\.", "write": ".*", "read": ".*"}],
        topic_permissions=[
            {"user": "app", "vhost": "prod", "exchange": "amq.topic", "write": "^app\\.", "read": ".*"}
        ],
    )
    assert plan_lines(topology, live)[-1] == "No changes. The live nodes match access.toml."
    changed = LiveAccess(
        vhosts=live.vhosts,
        users=[{"name": "app", "tags": [], "source": "node"}],
        permissions=[{"user": "app", "vhost": "prod", "configure": "", "write": ".*", "read": ".*"}],
        topic_permissions=live.topic_permissions,
    )
    assert plan_lines(topology, changed) == [
        "Node a (127.0.0.1:5701):",
        "  ~ user app (changed in place)",
        '      tags: [] -> ["monitoring"]',
        '  ~ permission app in vhost "prod" (changed in place)',
        '      configure: "" -> "^app\\\\."',
        "",
        "Plan: 0 to create, 2 to change, 0 to delete.",
    ]


def test_prune_deletes_only_what_is_the_topologys(topology: Topology) -> None:
    live = LiveAccess(
        vhosts=[{"name": "/"}, {"name": "prod"}, {"name": "old"}],
        users=[
            {"name": "app", "tags": ["monitoring"], "source": "node"},
            {"name": "made-at-runtime", "tags": [], "source": "node"},
            {"name": "from-the-users-file", "tags": [], "source": "file"},
            {"name": "guest", "tags": ["administrator"], "source": "node"},  # the planner's login
        ],
        permissions=[
            {"user": "app", "vhost": "prod", "configure": "^app\\.", "write": ".*", "read": ".*"},
            {"user": "app", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"},
            {"user": "from-the-users-file", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"},
        ],
        topic_permissions=[
            {"user": "app", "vhost": "prod", "exchange": "amq.topic", "write": "^app\\.", "read": ".*"}
        ],
    )
    kept = plan_lines(topology, live)
    assert "  ? vhost old: not in the file (kept: apply --prune deletes it)" in kept
    plan = diff(topology, node(live), prune=True)
    assert [(change.action, change.kind, change.name) for change in plan.changes] == [
        ("delete", "vhost", "old"),
        ("delete", "user", "made-at-runtime"),
        ("delete", "permission", 'app in vhost "/"'),
    ]


def test_a_password_that_cannot_be_read_is_an_error_not_a_user_without_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TEST_APP_PASSWORD", raising=False)
    topology = load_topology_text(FILE, "access.toml")
    lines = plan_lines(topology, LiveAccess(vhosts=[{"name": "/"}]))
    assert (
        "  ! user app: cannot be created: environment variable TEST_APP_PASSWORD is not set (password_env)"
        in lines
    )
    secret = tmp_path / "app.password"
    secret.write_text("from-a-file\n")
    from_file = FILE.replace('password_env = "TEST_APP_PASSWORD"', 'password_file = "app.password"')
    plan = diff(load_topology_text(from_file, str(tmp_path / "access.toml")), node(LiveAccess()), prune=False)
    [(_, user)] = [
        request for change in plan.changes for request in change.requests if request[0] == "users.add"
    ]
    assert PasswordHash.parse(user["password_hash"]).verify("from-a-file")


def test_a_password_in_the_file_is_refused() -> None:
    with pytest.raises(TopologyError) as refused:
        load_topology_text(FILE.replace('password_env = "TEST_APP_PASSWORD"', 'password = "plain"'), "t.toml")
    assert refused.value.problems == [
        "t.toml:9: users[0]: exactly one of password_env and password_file (where the user's password is)",
        "t.toml:12: users[0].password: passwords are never written in a topology file: name an environment"
        " variable (password_env) or a file (password_file) holding it",
    ]


def test_without_access_entries_a_nodes_users_are_not_read_or_touched() -> None:
    plain = load_topology_text('[nodes.a]\nhost = "127.0.0.1"\nport = 5701\n', "plain.toml")
    assert not plain.access.manages("a")
    assert plan_lines(plain, None)[-1] == "No changes. The live nodes match plain.toml."
