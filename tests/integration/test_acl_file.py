"""The Qpid ACL file on real node processes (issue 26 §2): a bad or missing file stops the node
with every error; `create link` and `access method` refusals reach the CLIs as the management
protocol's own error; SIGHUP and `amq-config reload-acl` apply a good file at once and keep
the rules in force on a bad one. Every wait is bounded and waits for a fact (a log line, an
answer)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from gateway.security import set_password
from tests.integration.test_federation_routes import at, cli
from tests.nodes import NodeProcess

SERVE = [sys.executable, "-m", "gateway.cli", "serve", "--memory", "--host", "127.0.0.1", "--port", "0"]


@pytest.fixture
def users(tmp_path: Path) -> Path:
    """Two administrators: the ACL file alone tells them apart."""
    path = tmp_path / "users.toml"
    for name in ("ops", "dev"):
        set_password(path, name, f"{name}-pw", tags=["administrator"])
    return path


def login(user: str, node: NodeProcess) -> str:
    return f"{user}/{user}-pw@{at(node)}"


async def until_logged(node: NodeProcess, text: str) -> str:
    """Wait for `text` in the node's log (the caller bounds the wait); the log."""
    while text not in node.log():
        await trio.sleep(0.05)
    return node.log()


def test_a_node_does_not_start_on_a_bad_or_missing_acl_file(tmp_path: Path) -> None:
    bad = tmp_path / "policy.acl"
    bad.write_text(
        "acl allow all CREATE queue\n  acl allow all all\nacl allow all create link durable=true\n"
    )
    result = subprocess.run([*SERVE, "--acl-file", str(bad)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "ready" not in result.stderr
    assert result.stderr.splitlines()[-3:] == [
        f"amq-gateway: error: {bad}:1: unknown action 'CREATE' (consume, publish, create, access, bind,"
        " unbind, delete, purge, update or all); tokens are case-sensitive",
        f"amq-gateway: error: {bad}:2: 'acl' must start the line (no leading whitespace)",
        f"amq-gateway: error: {bad}:3: property 'durable' does not apply to 'create link'",
    ]
    missing = tmp_path / "nosuch.acl"
    config = tmp_path / "node.toml"
    config.write_text('[node]\nacl_file = "nosuch.acl"\n')  # relative to the config file
    result = subprocess.run([*SERVE, "--config", str(config)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"amq-gateway: error: {missing}: cannot read the ACL file: No such file or directory"
    )


async def test_create_link_is_refused_for_a_user_the_acl_denies(
    nodes: Callable[..., NodeProcess], tmp_path: Path, users: Path
) -> None:
    acl = tmp_path / "policy.acl"
    acl.write_text("acl deny-log dev create link\nacl allow all all\n")
    a = nodes("A", "--users", str(users), "--acl-file", str(acl))
    b = nodes("B")
    refusal = f"Failed: access - the ACL file refuses user 'dev' create link '{at(b)}'\n"
    with trio.fail_after(40):
        status, out, err = await cli("amq-route", "link", "add", login("dev", a), at(b))
        assert (status, out, err) == (1, "", refusal)
        # A route whose link does not exist yet creates one: refused the same way, nothing made.
        status, out, err = await cli("amq-route", "route", "add", login("dev", a), at(b), "amq.topic", "k")
        assert (status, out, err) == (1, "", refusal)
        status, out, _ = await cli("amq-route", "link", "list", login("ops", a))
        assert (status, out) == (0, "No Links Found\n")
        log = await until_logged(a, "acl denied: user 'dev' create link")
        assert f"acl denied: user 'dev' create link '{at(b)}' (rule {acl}:1)" in log
        status, _, err = await cli("amq-route", "link", "add", login("ops", a), at(b))
        assert status == 0, err
        # Logging in anew replaces the link by a new one: refused to dev too, the link unchanged.
        status, out, err = await cli("amq-route", "link", "add", login("dev", a), f"peering/peering@{at(b)}")
        assert (status, out, err) == (1, "", refusal)
        status, out, _ = await cli("amq-route", "link", "list", login("ops", a))
        assert out.splitlines()[2].split()[:3] == ["127.0.0.1", str(b.port), "B"]


async def test_a_federation_peering_is_a_link_too(
    nodes: Callable[..., NodeProcess], tmp_path: Path, users: Path
) -> None:
    acl = tmp_path / "policy.acl"
    acl.write_text("acl deny dev create link\nacl allow all all\n")
    child = nodes("C", "--users", str(users), "--acl-file", str(acl))
    parent = nodes("P")
    with trio.fail_after(40):
        status, out, err = await cli(
            "amq-route", "federate", "add", login("dev", child), at(parent), "amq.fanout"
        )
        assert (status, out) == (1, "")
        assert err == f"Failed: access - the ACL file refuses user 'dev' create link '{at(parent)}'\n"


async def test_access_method_covers_every_management_request(
    nodes: Callable[..., NodeProcess], tmp_path: Path, users: Path
) -> None:
    acl = tmp_path / "policy.acl"
    acl.write_text(
        "acl deny-log dev access method name=queues.*\n"
        "acl deny dev access method schemaclass=exchanges name=exchanges.add\n"
        "acl allow all all\n"
    )
    node = nodes("M", "--users", str(users), "--acl-file", str(acl))
    with trio.fail_after(30):
        status, out, err = await cli("amq-config", "-a", login("dev", node), "add", "queue", "mine")
        assert (status, out) == (1, "")
        assert err == "Failed: access - the ACL file refuses user 'dev' access method 'queues.add'\n"
        status, _, err = await cli("amq-config", "-a", login("dev", node), "add", "exchange", "topic", "x")
        assert err == "Failed: access - the ACL file refuses user 'dev' access method 'exchanges.add'\n"
        status, out, err = await cli("amq-config", "-a", login("dev", node), "exchanges")
        assert status == 0 and "amq.topic" in out, err
        status, _, err = await cli("amq-config", "-a", login("ops", node), "add", "queue", "mine")
        assert status == 0, err
        assert (
            f"acl denied: user 'dev' access method 'queues.add'"
            f" schemaclass='queues' schemapackage='amq-gateway' (rule {acl}:1)"
        ) in node.log()


async def test_sighup_reloads_a_good_file_and_keeps_the_rules_on_a_bad_one(
    nodes: Callable[..., NodeProcess], tmp_path: Path, users: Path
) -> None:
    acl = tmp_path / "policy.acl"
    acl.write_text("acl deny dev access method name=queues.add\nacl allow all all\n")
    node = nodes("H", "--users", str(users), "--acl-file", str(acl))
    add_queue = ("amq-config", "-a", login("dev", node), "add", "queue")
    with trio.fail_after(40):
        status, _, err = await cli(*add_queue, "q1")
        assert status == 1 and "refuses user 'dev' access method 'queues.add'" in err

        acl.write_text("acl allow all all\n")
        node.process.send_signal(signal.SIGHUP)
        await until_logged(node, f"ACL file {acl} reloaded: 1 rule(s)")
        status, _, err = await cli(*add_queue, "q2")
        assert status == 0, err

        acl.write_text("acl deny dev all\nacl alow all all\n")
        node.process.send_signal(signal.SIGHUP)
        log = await until_logged(node, f"ACL file {acl} not reloaded: the rules in force stay")
        assert f"{acl}:2: bad permission 'alow' (allow, allow-log, deny, deny-log)" in log
        status, _, err = await cli(*add_queue, "q3")  # the good file's rules still decide
        assert status == 0, err
        assert node.process.poll() is None


async def test_amq_config_reload_acl(nodes: Callable[..., NodeProcess], tmp_path: Path, users: Path) -> None:
    acl = tmp_path / "policy.acl"
    acl.write_text("acl allow all all\n")
    node = nodes("R", "--users", str(users), "--acl-file", str(acl))
    with trio.fail_after(40):
        acl.write_text(
            "acl deny dev access method name=queues.add\nacl allow all all\nacl deny all all\nacl allow dev all\n"
        )
        status, out, err = await cli("amq-config", "-a", login("ops", node), "reload-acl")
        assert (status, err) == (0, "")
        assert out == (
            f"ACL file {acl} reloaded: 3 rule(s)\n"
            f"{acl}:3: 'acl deny all all' ends the rules; the 1 line(s) after it (from line 4) are ignored\n"
        )
        status, _, err = await cli("amq-config", "-a", login("dev", node), "add", "queue", "q")
        assert err == "Failed: access - the ACL file refuses user 'dev' access method 'queues.add'\n"

        acl.write_text("acl allow all all\nacl allow dev consume widget\n")
        status, out, err = await cli("amq-config", "-a", login("ops", node), "reload-acl")
        assert (status, out) == (1, "")
        assert err == (
            f"Failed: invalid - {acl}:2: unknown object 'widget' (queue, exchange, broker, link, method or all)\n"
            "the rules in force stay\n"
        )
        status, _, err = await cli("amq-config", "-a", login("dev", node), "add", "queue", "q")
        assert err == "Failed: access - the ACL file refuses user 'dev' access method 'queues.add'\n"


async def test_reload_acl_without_an_acl_file(nodes: Callable[..., NodeProcess]) -> None:
    node = nodes("N")
    with trio.fail_after(30):
        status, out, err = await cli("amq-config", "-a", at(node), "reload-acl")
        assert (status, out) == (1, "")
        assert err == "Failed: usage - node 'N' has no ACL file (see --acl-file)\n"


SEED_RULES = """\
# The seed's examples (seed 001, the ACL file), on a node's own exchanges and queues.
acl allow carlt@QPID create exchange name=carl.*
acl allow guest@QPID bind exchange name=amq.topic routingkey=stocks.rht.#
acl allow all create queue
acl allow all access all
acl deny-log all all
"""


def test_the_acl_file_governs_clients_operations_beside_the_permissions(tmp_path: Path) -> None:
    """Both may: permissions allow everything here, so each refusal is the ACL file's, a 403 on
    the channel with the connection going on, and deny-log writes one line per decision."""
    import pika
    from pika.exceptions import ChannelClosedByBroker

    from tests.nodes import start_node

    users = tmp_path / "users.toml"
    set_password(users, "carlt", "carlt-pw")
    set_password(users, "guest", "guest-pw")
    acl = tmp_path / "seed.acl"
    acl.write_text(SEED_RULES)
    node = start_node(tmp_path, "--users", str(users), "--acl-file", str(acl))
    try:
        carlt = pika.BlockingConnection(pika.URLParameters(node.url("carlt", "carlt-pw")))
        channel = carlt.channel()
        channel.exchange_declare("carl.orders", "topic")
        with pytest.raises(ChannelClosedByBroker) as refused:
            carlt.channel().exchange_declare("dave.orders", "topic")
        assert refused.value.reply_code == 403
        assert refused.value.reply_text == (
            "ACCESS_REFUSED - create access to exchange 'dave.orders' in vhost '/' refused for user"
            " 'carlt' by the ACL file"
        )
        channel.exchange_declare("carl.orders", "topic", passive=True)  # access: allowed
        queue = channel.queue_declare("", exclusive=True).method.queue
        with pytest.raises(ChannelClosedByBroker):
            carlt.channel().queue_bind(queue, "amq.topic", "stocks.rht.nyse")  # guest's rule only
        guest = pika.BlockingConnection(pika.URLParameters(node.url("guest", "guest-pw")))
        bound = guest.channel()
        mine = bound.queue_declare("", exclusive=True).method.queue
        bound.queue_bind(mine, "amq.topic", "stocks.rht.nyse")
        with pytest.raises(ChannelClosedByBroker) as refused:
            guest.channel().queue_bind(mine, "amq.topic", "stocks.ibm")
        assert refused.value.reply_code == 403
        publishing = guest.channel()
        publishing.confirm_delivery()
        with pytest.raises(ChannelClosedByBroker) as refused:
            publishing.basic_publish("amq.topic", "stocks.rht.nyse", b"no publish rule")
        assert refused.value.reply_text == (
            "ACCESS_REFUSED - publish access to exchange 'amq.topic' in vhost '/' refused for user"
            " 'guest' by the ACL file"
        )
        assert guest.channel().queue_declare(mine, passive=True).method.queue == mine  # still served
        for connection in (carlt, guest):
            connection.close()
        trio.run(until_logged, node, "stocks.ibm")
        denied = [line for line in node.log().splitlines() if "stocks.ibm" in line]
        assert len(denied) == 1 and "acl denied: user 'guest' bind exchange" in denied[0]
        assert denied[0].endswith("seed.acl:6)")
    finally:
        node.stop()
