"""BrokerAddress.parse: the qpid-route address grammar, and errors that name the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from federation.address import EXTERNAL, PLAIN, BrokerAddress
from gateway.tls import ClientTls


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("localhost", BrokerAddress("localhost", 5672, "guest", "guest")),
        ("10.0.0.1:5673", BrokerAddress("10.0.0.1", 5673)),
        ("admin/s3cret@broker-b:5674", BrokerAddress("broker-b", 5674, "admin", "s3cret")),
        ("admin/s3cret@broker-b", BrokerAddress("broker-b", 5672, "admin", "s3cret")),
        ("u/p@ss/w@rd@host", BrokerAddress("host", 5672, "u", "p@ss/w@rd")),
        ("u/@host", BrokerAddress("host", 5672, "u", "")),
        ("alice@host:5673", BrokerAddress("host", 5673, "alice", "")),  # the CLI asks for it
        ("amqp://alice@host/v", BrokerAddress("host", 5672, "alice", "", "v")),
        ("[::1]:5673", BrokerAddress("::1", 5673)),
        ("[fe80::1]", BrokerAddress("fe80::1", 5672)),
        ("u/p@[::1]:1", BrokerAddress("::1", 1, "u", "p")),
        ("amqp://host", BrokerAddress("host", 5672)),
        ("amqp://admin:s%40cret@host:5673/prod", BrokerAddress("host", 5673, "admin", "s@cret", "prod")),
        ("amqp://u:p@[::1]:1/%2F", BrokerAddress("::1", 1, "u", "p", "/")),
        ("amqp://h/?heartbeat=5", BrokerAddress("h")),
        ("amqps://h", BrokerAddress("h", 5671, tls=ClientTls())),
        (
            "amqps://u:p@h:1/v?cacertfile=/c.pem&verify=verify_none",
            BrokerAddress("h", 1, "u", "p", "v", ClientTls(Path("/c.pem"), verify=False)),
        ),
        # A client certificate and no credentials: EXTERNAL, no user name sent.
        (
            "amqps://h?certfile=/a.pem&keyfile=/a.key",
            BrokerAddress("h", 5671, "", "", tls=ClientTls(cert=Path("/a.pem"), key=Path("/a.key"))),
        ),
    ],
)
def test_parse(text: str, expected: BrokerAddress) -> None:
    assert BrokerAddress.parse(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "broker address '' is empty or contains whitespace"),
        ("host :5672", "broker address 'host :5672' is empty or contains whitespace"),
        ("amqpx://host", "broker address 'amqpx://host': only amqp:// and amqps:// URLs are supported"),
        (
            "amqps://host?verify=maybe",
            "broker address 'amqps://host?verify=maybe': verify is verify_peer or verify_none, not 'maybe'",
        ),
        ("amqps://host?keyfile=k.pem", "broker address 'amqps://host?keyfile=k.pem': keyfile needs certfile"),
        ("amqp://@host", "broker address 'amqp://@host': a URL's credentials are user[:password]"),
        ("amqp://:5672", "broker address 'amqp://:5672' has no host"),
        ("/pw@host", "broker address '/pw@host' has an empty user name"),
        ("u/p@", "broker address 'u/p@' has no host"),
        (":5672", "broker address ':5672' has no host"),
        ("host:http", "broker address 'host:http' has port 'http', which is not a number"),
        ("host:", "broker address 'host:' has an empty port"),
        ("host:0", "broker address 'host:0' has port 0, outside 1..65535"),
        ("host:65536", "broker address 'host:65536' has port 65536, outside 1..65535"),
        ("::1", "broker address '::1': write IPv6 addresses in brackets, as in [::1]:5672"),
        ("[::1", "broker address '[::1' has an IPv6 address without its closing ']'"),
        ("[::1]5672", "broker address '[::1]5672' has '5672' after the IPv6 address"),
        ("[]:5672", "broker address '[]:5672' has no host"),
    ],
)
def test_bad_addresses_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        BrokerAddress.parse(text)
    assert str(caught.value) == message


def test_str_is_host_port_without_credentials() -> None:
    address = BrokerAddress.parse("admin/s3cret@broker-b:5674")
    assert str(address) == "broker-b:5674"
    assert str(BrokerAddress.parse("[::1]:5673")) == "[::1]:5673"
    assert "s3cret" not in repr(address)


def test_an_address_without_a_password_needs_one() -> None:
    assert BrokerAddress.parse("alice@host").needs_password
    assert not BrokerAddress.parse("alice/pw@host").needs_password
    assert not BrokerAddress.parse("host").needs_password  # guest/guest


def test_frozen() -> None:
    address = BrokerAddress("h")
    with pytest.raises(AttributeError):
        address.port = 1  # type: ignore[misc]


def test_external_only_with_a_client_certificate_and_no_credentials() -> None:
    with_cert = ClientTls(cert=Path("/a.pem"))
    assert BrokerAddress.parse("amqps://h?certfile=/a.pem").mechanism == EXTERNAL
    assert BrokerAddress.parse("amqps://u:p@h?certfile=/a.pem").mechanism == PLAIN
    assert BrokerAddress.parse("amqps://h").mechanism == PLAIN
    # -t ssl on a qpid-route address: its credentials decide, as in a URL.
    assert BrokerAddress.parse("h:5671").with_tls(with_cert).mechanism == EXTERNAL
    assert BrokerAddress.parse("u/p@h:5671").with_tls(with_cert).mechanism == PLAIN
    assert BrokerAddress.parse("h:5671").with_tls(ClientTls()).username == "guest"
