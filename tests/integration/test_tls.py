"""TLS for clients and links, with real clients and real node processes on loopback: pika with
SSLOptions, aio-pika with an amqps:// URL and a client certificate (SASL EXTERNAL), `openssl
s_client`, refusals that leave the node serving, and a link over TLS between two nodes.

Certificates are made per module in a temporary folder by `amq-gateway certs`' own code
(gateway.certs, which runs openssl). Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import os
import re
import select
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import aio_pika
import pika
import pika.credentials
import pika.exceptions
import pytest
import trio

from federation.client import connect
from gateway.certs import make_cert
from gateway.security import set_password
from tests.integration.test_federation_routes import (
    address,
    at,
    bodies,
    manage,
    operational,
    publish,
    route,
    sink_queue,
    wait_consumed,
    wait_link,
)
from tests.integration.test_topology_up import CONFIGS, RUN_TIMEOUT, up_command
from tests.nodes import NodeProcess, on_free_ports

AMQP_HEADER = b"AMQP\x00\x00\x09\x01"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ca.pem and a certificate per name; `other/` has a CA of its own (a wrong CA)."""
    directory = tmp_path_factory.mktemp("certs")
    for name in ("node", "app", "a", "b", "stranger"):
        make_cert(directory, name)
    make_cert(directory, "expired", days=-1)
    make_cert(directory / "other", "app")
    make_cert(directory / "other", "b")
    return directory


def tls_flags(certs: Path, name: str = "node", tls_port: int = 0, ca: Path | None = None) -> tuple[str, ...]:
    return (
        "--tls-port",
        str(tls_port),
        "--tls-cert",
        str(certs / f"{name}.pem"),
        "--tls-key",
        str(certs / f"{name}.key"),
        "--tls-ca",
        str(ca or certs / "ca.pem"),
    )


def users_file(path: Path, *names: str) -> Path:
    """guest (administrator, for the tests' management calls) and `names`, with passwords
    nobody uses: they log in with their certificates."""
    set_password(path, "guest", "guest", tags=["administrator"])
    for name in names:
        set_password(path, name, os.urandom(8).hex())
    return path


def client_context(certs: Path, cert: str | None = None, ca: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca or certs / "ca.pem")
    if cert is not None:
        context.load_cert_chain(certs / f"{cert}.pem", certs / f"{cert}.key")
    return context


def pika_tls(node: NodeProcess, context: ssl.SSLContext) -> pika.BlockingConnection:
    options = pika.SSLOptions(context, "localhost")
    parameters = pika.ConnectionParameters(
        "127.0.0.1", node.tls_port, ssl_options=options, connection_attempts=1
    )
    return pika.BlockingConnection(parameters)


def round_trip(connection: pika.BlockingConnection, queue: str) -> bytes:
    channel = connection.channel()
    channel.queue_declare(queue, auto_delete=True)
    channel.confirm_delivery()
    channel.basic_publish("", queue, b"over tls")
    _, _, body = channel.basic_get(queue, auto_ack=True)
    return body


def wait_logged(node: NodeProcess, text: str, count: int = 1, timeout: float = 10.0) -> None:
    """Until `text` is in the node's log `count` times (it logs asynchronously)."""
    deadline = time.monotonic() + timeout
    while node.log().count(text) < count:
        assert time.monotonic() < deadline, f"{text!r} not logged {count} time(s); log:\n{node.log()}"
        time.sleep(0.05)


def s_client(node: NodeProcess, *args: str, want: bytes) -> bytes:
    """`openssl s_client` to the TLS port, sending the AMQP header; its output up to `want`."""
    command = ["openssl", "s_client", "-connect", f"127.0.0.1:{node.tls_port}", "-servername", "localhost"]
    process = subprocess.Popen(
        [*command, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert process.stdin is not None and process.stdout is not None
    output = b""
    try:
        process.stdin.write(AMQP_HEADER)
        process.stdin.flush()
        deadline = time.monotonic() + 10
        while want not in output and time.monotonic() < deadline:
            ready, _, _ = select.select([process.stdout], [], [], 0.1)
            if ready:
                chunk = os.read(process.stdout.fileno(), 65536)
                if not chunk:
                    break
                output += chunk
    finally:
        process.kill()
        process.wait()
    return output


# -- clients -----------------------------------------------------------------------------------


def test_pika_with_ssl_options_and_the_plain_port_side_by_side(
    nodes: Callable[..., NodeProcess], certs: Path
) -> None:
    node = nodes("t", *tls_flags(certs))
    assert node.tls_port and node.port
    connection = pika_tls(node, client_context(certs))
    assert round_trip(connection, "tls-q") == b"over tls"
    connection.close()
    plain = pika.BlockingConnection(pika.URLParameters(node.url()))
    assert round_trip(plain, "plain-q") == b"over tls"
    plain.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_openssl_s_client_handshake_then_amqp(nodes: Callable[..., NodeProcess], certs: Path) -> None:
    node = nodes("t", *tls_flags(certs))
    ca = str(certs / "ca.pem")
    # The node's certificate verifies against the CA, and AMQP follows: Connection.Start,
    # without EXTERNAL for a client that sent no certificate...
    anonymous = s_client(node, "-CAfile", ca, "-verify_return_error", want=b"AMQPLAIN")
    assert b"Verify return code: 0 (ok)" in anonymous
    assert b"CN = node" in anonymous
    assert b"EXTERNAL" not in anonymous
    # ...and with it for one that did.
    cert, key = str(certs / "app.pem"), str(certs / "app.key")
    with_cert = s_client(node, "-CAfile", ca, "-cert", cert, "-key", key, want=b"EXTERNAL")
    assert b"PLAIN AMQPLAIN EXTERNAL" in with_cert


def test_aio_pika_amqps_url_with_a_client_certificate_logs_in_with_external(
    nodes: Callable[..., NodeProcess], certs: Path, tmp_path: Path
) -> None:
    node = nodes("t", *tls_flags(certs), "--users", str(users_file(tmp_path / "users.toml", "app")))

    def url(name: str) -> str:
        files = f"cafile={certs / 'ca.pem'}&certfile={certs / name}.pem&keyfile={certs / name}.key"
        return f"amqps://localhost:{node.tls_port}/?auth=external&{files}"

    async def scenario() -> bytes:
        connection = await aio_pika.connect(url("app"))
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            queue = await channel.declare_queue("ext-q", auto_delete=True)
            await channel.default_exchange.publish(aio_pika.Message(b"as app"), routing_key="ext-q")
            message = await queue.get(timeout=5)
            assert message is not None
            await message.ack()
            return message.body

    assert asyncio.run(asyncio.wait_for(scenario(), 30)) == b"as app"
    wait_logged(node, "user 'app' opened vhost '/'")

    # A valid certificate naming no user of the node is refused at login, with the reason logged.
    with pytest.raises(aio_pika.exceptions.ProbableAuthenticationError):
        asyncio.run(asyncio.wait_for(aio_pika.connect(url("stranger")), 30))
    wait_logged(node, "login refused: certificate user 'stranger' - no such user")


# -- refusals ----------------------------------------------------------------------------------


def test_plaintext_wrong_ca_and_expired_certificates_are_refused_and_the_node_serves_on(
    nodes: Callable[..., NodeProcess], certs: Path
) -> None:
    node = nodes("t", *tls_flags(certs))
    before = pika_tls(node, client_context(certs))  # open throughout

    # A plaintext client on the TLS port: the handshake fails, the socket is closed.
    with socket.create_connection(("127.0.0.1", node.tls_port), timeout=10) as plain:
        plain.sendall(AMQP_HEADER)
        assert plain.recv(100) == b""
    wait_logged(node, "TLS handshake refused: 'wrong version number'")

    # A client certificate from another CA, an expired one, and a client that does not trust
    # the node's CA: each handshake fails, once logged with OpenSSL's reason.
    refused = [
        (client_context(certs, "app", ca=None), "other", "unable to get local issuer certificate"),
        (client_context(certs, "expired"), "", "certificate has expired"),
    ]
    for context, folder, reason in refused:
        if folder:
            context = client_context(certs / folder, "app", ca=certs / "ca.pem")
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika_tls(node, context)
        wait_logged(node, f"TLS handshake refused: 'certificate verify failed: {reason}'")
    with pytest.raises(ssl.SSLCertVerificationError):  # pika's own check of the node fails
        pika_tls(node, client_context(certs, ca=certs / "other" / "ca.pem"))
    wait_logged(node, "TLS handshake refused", 4)

    assert node.log().count("TLS handshake refused") == 4
    assert round_trip(before, "before-q") == b"over tls"
    before.close()
    after = pika_tls(node, client_context(certs, "app"))
    assert round_trip(after, "after-q") == b"over tls"
    after.close()


def test_without_a_tls_ca_no_client_certificate_logs_in(
    nodes: Callable[..., NodeProcess], certs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Client certificates are checked against the node's tls_ca only, never the CAs the system
    trusts (here: the other CA, made the node's default through SSL_CERT_FILE): one a public CA
    signed for CN=app must not log in as app. Without a tls_ca no certificate is asked for, and
    EXTERNAL is not offered."""
    monkeypatch.setenv("SSL_CERT_FILE", str(certs / "other" / "ca.pem"))
    cert, key = str(certs / "node.pem"), str(certs / "node.key")
    users = str(users_file(tmp_path / "users.toml", "app"))
    node = nodes("t", "--tls-port", "0", "--tls-cert", cert, "--tls-key", key, "--users", users)
    parameters = pika.ConnectionParameters(
        "127.0.0.1",
        node.tls_port,
        credentials=pika.credentials.ExternalCredentials(),
        ssl_options=pika.SSLOptions(client_context(certs / "other", "app", ca=certs / "ca.pem"), "localhost"),
        connection_attempts=1,
    )
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(parameters)
    assert "opened vhost" not in node.log()


def test_verify_require_refuses_a_client_without_a_certificate(
    nodes: Callable[..., NodeProcess], certs: Path
) -> None:
    node = nodes("t", *tls_flags(certs), "--tls-verify", "require")
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika_tls(node, client_context(certs))
    wait_logged(node, "TLS handshake refused: 'peer did not return a certificate'")
    connection = pika_tls(node, client_context(certs, "app"))
    assert round_trip(connection, "q") == b"over tls"
    connection.close()


def test_tls_only_closes_the_plain_port(nodes: Callable[..., NodeProcess], certs: Path) -> None:
    node = nodes("t", *tls_flags(certs), "--tls-only")
    assert node.port == 0 and node.tls_port
    assert "AMQP 0-9-1 listening on" not in node.log()
    connection = pika_tls(node, client_context(certs))
    assert round_trip(connection, "q") == b"over tls"
    connection.close()


# -- links -------------------------------------------------------------------------------------


async def received_all(node: NodeProcess, queue: str, expected: set[bytes]) -> None:
    """Consume `queue` until every body of `expected` came (the caller bounds the wait)."""
    missing = set(expected)
    async with connect(address(node)) as connection:
        channel = await connection.channel()
        await channel.qos(prefetch_count=500)
        await channel.consume(queue)
        async for delivery in channel.deliveries():
            missing.discard(delivery.content.body)
            channel.ack(delivery.delivery_tag)
            if not missing:
                return


def src_url(node: NodeProcess, certs: Path) -> str:
    """The source node's TLS address as amq-route takes it: the CLI checks it with this CA, and
    the link, given no credentials, logs in with EXTERNAL as its own node's certificate."""
    return f"amqps://127.0.0.1:{node.tls_port}?cacertfile={certs / 'ca.pem'}"


async def test_link_over_tls_survives_a_kill_of_either_end(
    nodes: Callable[..., NodeProcess], certs: Path, tmp_path: Path
) -> None:
    users = str(users_file(tmp_path / "users.toml", "a", "b"))

    def start(name: str, old: NodeProcess | None = None) -> NodeProcess:
        port, tls_port = (old.port, old.tls_port) if old else (0, 0)
        flags = tls_flags(certs, name, tls_port)
        return nodes(name, *flags, "--users", users, data_dir=tmp_path / f"{name}-data", port=port)

    a, b = start("a"), start("b")  # a is the source, b opens the link
    with trio.fail_after(90):
        sink = await sink_queue(b, "amq.topic", "tls.#", durable=True)
        await route("-d", "route", "add", at(b), src_url(a, certs), "amq.topic", "tls.#")
        link = await wait_link(b, a.tls_port, operational)
        assert (link["transport"], link["durable"]) == ("ssl", True)
        assert "ssl" in await route("link", "list", at(b))
        wait_logged(a, "user 'b' opened vhost '/'")  # EXTERNAL, as b's certificate
        await wait_consumed(a, "amq.topic", "tls.#")
        await publish(a, "amq.topic", "tls.one", bodies("one", 50))

        a.kill()
        a = start("a", a)
        await publish(a, "amq.topic", "tls.two", bodies("two", 50))
        await wait_link(b, a.tls_port, operational)

        b.kill()
        await publish(a, "amq.topic", "tls.three", bodies("three", 50))
        b = start("b", b)
        await wait_link(b, a.tls_port, operational)
        # At least once: a kill of b may bring a message it had not acknowledged to a again.
        await received_all(b, sink, set(bodies("one", 50) + bodies("two", 50) + bodies("three", 50)))


async def test_link_whose_certificate_is_refused_fails_with_the_tls_reason_and_stays_failed(
    nodes: Callable[..., NodeProcess], certs: Path, tmp_path: Path
) -> None:
    users = str(users_file(tmp_path / "users.toml", "b"))
    a = nodes("a", *tls_flags(certs, "a"), "--users", users)
    # b's own certificate comes from another CA, which a does not trust.
    b = nodes("b", *tls_flags(certs / "other", "b", ca=certs / "ca.pem"), "--users", users)
    with trio.fail_after(30):
        await route("link", "add", at(b), src_url(a, certs))
        link = await wait_link(b, a.tls_port, lambda link: link["state"] == "Failed")
        assert link["last_error"] == (
            f"TLS handshake with 127.0.0.1:{a.tls_port} failed: tlsv1 alert unknown ca"
        ), link
        # Failed is final, as for refused credentials: one attempt, one refusal on a.
        assert link["reconnects"] == 0
        assert a.log().count("TLS handshake refused") == 1
        assert "unable to get local issuer certificate" in a.log()
        records = await manage(b, "links.list")
        assert [record["state"] for record in records] == ["Failed"]


# -- the TLS demo ------------------------------------------------------------------------------


def test_up_runs_the_tls_demo_with_every_link_over_tls(tmp_path: Path) -> None:
    """configs/topology-three-regions-tls.toml with its documented set-up commands, on free
    ports and with the certificates in a temporary folder: every route's link and both
    federations' peerings over TLS."""
    certs = tmp_path / "tls"
    text = (CONFIGS / "topology-three-regions-tls.toml").read_text().replace("../var/tls", str(certs))
    names = re.findall(r"(?m)^\[nodes\.([A-Za-z0-9._-]+)\]", text)
    (tmp_path / "source.toml").write_text(text)
    topology = tmp_path / "demo.toml"
    ports = on_free_ports(tmp_path / "source.toml", topology)
    assert len(ports) == 2 * len(names) == 14
    cli = [sys.executable, "-m", "gateway.cli"]
    users = str(certs / "users.toml")
    made = subprocess.run(
        [*cli, "certs", str(certs), "--users", users, "--nodes", ",".join(names)],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    admin = [*cli, "passwd", users, "guest", "--password-stdin", "--tag", "administrator"]
    assert subprocess.run(admin, input="guest\n", capture_output=True, text=True).returncode == 0

    result = subprocess.run(
        up_command(topology, tmp_path / "var", "--traffic", "3", "--exit"),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    links = [
        line.split() for line in out.splitlines() if re.match(r"127\.0\.0\.1\s+\d+\s+\S+\s+(tcp|ssl)\s", line)
    ]
    assert len(links) == 14  # one per dynamic route, each its own direction
    assert {(link[3], link[5]) for link in links} == {("ssl", "Operational")}
    peerings = re.findall(
        r"(?m)^127\.0\.0\.1:(\d+) => 127\.0\.0\.1:(\d+) amq\.data \(fanout\)  \[(\w+);", out
    )
    hub_eu_tls = ports[1]  # the file's second port: hub-eu's tls_port
    assert [(parent, state) for _, parent, state in peerings] == [(str(hub_eu_tls), "Operational")] * 2
    assert "Traffic: every message arrived where the topology sends it." in out
    for name in names:  # each link logged in as its node's certificate, with EXTERNAL
        log = (tmp_path / "var" / name / "node.log").read_text()
        assert re.search(r"user '(hub|edge)-[a-z]+(-1|-2)?' opened vhost '/'", log), log
