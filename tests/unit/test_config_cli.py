"""amq-config against a fake node: golden output, requests sent, errors and exit codes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from federation.address import BrokerAddress
from federation.cli import config_cli
from federation.management_client import ManagementFailed
from tests.unit.test_cli_formatting import binding, exchange, queue


class FakeNode:
    """Canned lists, recorded requests, and refusals by method."""

    def __init__(self) -> None:
        self.records: dict[str, Any] = {
            "exchanges.list": [
                exchange("", "direct", durable=True),
                exchange("amq.direct", "direct", durable=True),
                exchange("amq.topic", "topic", durable=True),
                exchange("fed.topic", "topic"),
            ],
            "queues.list": [queue("pub_start"), queue("public", durable=True, bindings=2, messages=3)],
            "bindings.list": [
                binding("", "pub_start", "pub_start"),
                binding("", "public", "public"),
                binding("amq.topic", "public", "global.#"),
            ],
        }
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.refusals: dict[str, ManagementFailed] = {}
        self.reached: list[tuple[BrokerAddress, float]] = []

    async def call(self, method: str, arguments: dict[str, Any] | None = None) -> Any:
        self.requests.append((method, arguments or {}))
        if method in self.refusals:
            raise self.refusals[method]
        return self.records.get(method)

    @asynccontextmanager
    async def connect(self, address: BrokerAddress, timeout: float) -> AsyncIterator[FakeNode]:
        self.reached.append((address, timeout))
        if address.port != 5672:
            raise ManagementFailed(
                "ConnectFailed", f"cannot connect to {address}: Connection refused; is a node running there?"
            )
        yield self

    def run(self, *argv: str) -> int:
        return config_cli.main(list(argv), connect=self.connect)


@pytest.fixture
def node() -> FakeNode:
    return FakeNode()


def test_summary(node: FakeNode, capsys: pytest.CaptureFixture[str]) -> None:
    assert node.run() == 0
    assert capsys.readouterr().out == (
        "\n"
        "Total Exchanges: 4\n"
        "         direct: 2\n"
        "          topic: 2\n"
        "   Total Queues: 2\n"
        "        durable: 1\n"
        "    non-durable: 1\n"
    )
    assert node.reached == [(BrokerAddress("localhost", 5672), 10.0)]


def test_broker_address_and_timeout(node: FakeNode) -> None:
    assert node.run("-a", "admin/pw@node-b", "--timeout", "3", "queues") == 0
    assert node.run("queues", "-a", "node-b:5672", "-t", "4") == 0
    assert node.reached == [
        (BrokerAddress("node-b", 5672, "admin", "pw"), 3.0),
        (BrokerAddress("node-b", 5672), 4.0),
    ]


def test_vhost_from_the_option_or_the_url_names_every_request_but_node_info(node: FakeNode) -> None:
    node.records["node.info"] = {"name": "n", "connections": 0}
    assert node.run("--vhost", "prod", "add", "queue", "orders") == 0
    assert node.run("-a", "amqp://admin:pw@localhost:5672/sales", "exchanges") == 0
    assert node.run("-a", "amqp://localhost/sales", "--vhost", "prod", "node") == 0
    assert node.run("-a", "amqp://localhost/%2F", "queues") == 0
    assert node.requests == [
        ("queues.add", {"name": "orders", "durable": False, "arguments": {}, "vhost": "prod"}),
        ("exchanges.list", {"vhost": "sales"}),
        ("node.info", {}),
        ("queues.list", {"vhost": "/"}),
    ]
    assert node.reached[1][0] == BrokerAddress("localhost", 5672, "admin", "pw", "sales")


def test_queues_with_a_filter(node: FakeNode, capsys: pytest.CaptureFixture[str]) -> None:
    assert node.run("queues", "pub") == 0
    assert capsys.readouterr().out == (
        "\n"
        "Durable  AutoDel  Excl  Bindings  Messages       Bytes     On disk  Flow      Queue Name\n"
        + "="
        * 91
        + "\n  N        N      N         1            0           0           0  -         pub_start\n"
        "  Y        N      N         2            3         300           0  -         public\n"
    )
    assert node.run("queues", "start") == 0
    assert capsys.readouterr().out.splitlines()[3:] == [
        "  N        N      N         1            0           0           0  -         pub_start"
    ]


def test_exchanges(node: FakeNode, capsys: pytest.CaptureFixture[str]) -> None:
    assert node.run("exchanges", "amq") == 0
    assert capsys.readouterr().out == (
        "Type      Exchange Name  Attributes\n"
        "=============================================\n"
        "direct    amq.direct     --durable\n"
        "topic     amq.topic      --durable\n"
    )


def test_exchange_bindings(node: FakeNode, capsys: pytest.CaptureFixture[str]) -> None:
    assert node.run("-b", "exchanges") == 0
    assert capsys.readouterr().out == (
        "Exchange '' (direct)\n"
        " bind pub_start => pub_start\n"
        " bind public => public\n"
        "Exchange 'amq.direct' (direct)\n"
        "Exchange 'amq.topic' (topic)\n"
        " bind global.# => public\n"
        "Exchange 'fed.topic' (topic)\n"
    )


def test_queue_bindings(node: FakeNode, capsys: pytest.CaptureFixture[str]) -> None:
    assert node.run("queues", "public", "-b") == 0
    assert capsys.readouterr().out == "Queue 'public'\n bind public => ''\n bind global.# => amq.topic\n"


def test_add_exchange_as_in_the_seed(node: FakeNode, capsys: pytest.CaptureFixture[str]) -> None:
    assert node.run("-a", "localhost:5672", "add", "exchange", "topic", "fed.topic") == 0
    assert (
        node.run("add", "exchange", "direct", "exchange_name", "--durable", "--alternate-exchange", "alt")
        == 0
    )
    assert node.requests == [
        ("exchanges.add", {"name": "fed.topic", "type": "topic", "durable": False}),
        (
            "exchanges.add",
            {"name": "exchange_name", "type": "direct", "durable": True, "alternate_exchange": "alt"},
        ),
    ]
    assert capsys.readouterr() == ("", "")


def test_add_queue_maps_qpid_limits_to_x_arguments(node: FakeNode) -> None:
    assert node.run("add", "queue", "public") == 0
    argv = ["add", "queue", "q", "--durable", "--max-queue-size", "1048576", "--max-queue-count", "100"]
    assert node.run(*argv, "--policy-type", "ring") == 0
    assert node.run("add", "queue", "r", "--max-queue-count", "5", "--policy-type", "reject") == 0
    assert node.requests == [
        ("queues.add", {"name": "public", "durable": False, "arguments": {}}),
        (
            "queues.add",
            {
                "name": "q",
                "durable": True,
                "arguments": {"qpid.max_size": 1048576, "qpid.max_count": 100, "qpid.policy_type": "ring"},
            },
        ),
        (
            "queues.add",
            {"name": "r", "durable": False, "arguments": {"qpid.max_count": 5, "qpid.policy_type": "reject"}},
        ),
    ]


def test_add_queue_maps_capacities_to_qpid_arguments(node: FakeNode) -> None:
    assert node.run("add", "queue", "c", "--capacity", "10485760", "--flow-resume-capacity", "8388608") == 0
    assert node.requests == [
        (
            "queues.add",
            {
                "name": "c",
                "durable": False,
                "arguments": {"x-qpid-capacity": 10485760, "x-qpid-flow-resume-capacity": 8388608},
            },
        )
    ]


def test_delete_exchange_and_queue(node: FakeNode) -> None:
    assert node.run("del", "exchange", "fed.topic") == 0
    assert node.run("del", "queue", "public") == 0
    assert node.run("del", "queue", "public", "--force") == 0
    assert node.requests == [
        ("exchanges.delete", {"name": "fed.topic"}),
        ("queues.delete", {"name": "public", "if_empty": True, "if_unused": True}),
        ("queues.delete", {"name": "public", "if_empty": False, "if_unused": False}),
    ]


def test_bind_and_unbind(node: FakeNode) -> None:
    assert node.run("bind", "amq.topic", "public", "global.#") == 0
    assert node.run("unbind", "amq.topic", "public", "global.#") == 0
    assert node.run("bind", "amq.fanout", "public") == 0
    assert node.requests == [
        ("bindings.add", {"exchange": "amq.topic", "queue": "public", "routing_key": "global.#"}),
        ("bindings.delete", {"exchange": "amq.topic", "queue": "public", "routing_key": "global.#"}),
        ("bindings.add", {"exchange": "amq.fanout", "queue": "public", "routing_key": ""}),
    ]


def test_refusals_and_unreachable_nodes_exit_1(node: FakeNode, capsys: pytest.CaptureFixture[str]) -> None:
    node.refusals["queues.delete"] = ManagementFailed(
        "PRECONDITION_FAILED", "queue 'public' in vhost '/' not empty"
    )
    assert node.run("del", "queue", "public") == 1
    assert capsys.readouterr() == (
        "",
        "Failed: PRECONDITION_FAILED - queue 'public' in vhost '/' not empty\n",
    )
    assert node.run("-a", "localhost:10009", "exchanges") == 1
    assert capsys.readouterr() == (
        "",
        "Failed: ConnectFailed - cannot connect to localhost:10009: Connection refused; is a node running there? use -a HOST:PORT\n",
    )


@pytest.mark.parametrize(
    ("argv", "usage", "message"),
    [
        (["add"], "usage: amq-config add", "required"),
        (["add", "exchange", "topic"], "usage: amq-config add exchange", "required: name"),
        (
            ["add", "queue", "q", "--policy-type", "spill"],
            "usage: amq-config add queue",
            "invalid choice",
        ),
        (
            ["add", "queue", "q", "--max-queue-count", "lots"],
            "usage: amq-config add queue",
            "'lots' is not a whole",
        ),
        (["del", "exchange"], "usage: amq-config del exchange", "required: name"),
        (["bind", "amq.topic"], "usage: amq-config bind", "required: queue-name"),
        (["unbind", "x", "q", "k", "more"], "usage: amq-config unbind", "unrecognized arguments: more"),
        (["-a", "/pw@host", "queues"], "usage: amq-config", "argument -a/--broker-addr"),
        (["flush"], "usage: amq-config", "invalid choice: 'flush'"),
    ],
)
def test_usage_errors_exit_2(
    node: FakeNode, argv: list[str], usage: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        node.run(*argv)
    assert exited.value.code == 2
    first, *rest = capsys.readouterr().err.splitlines()
    # The line that matters first, then the command's usage.
    assert first.startswith(usage.removeprefix("usage: ") + ": error: ") and message in first
    assert rest[0].startswith(usage)
    assert node.reached == []


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["exchanges"],
        ["queues"],
        ["add"],
        ["add", "exchange"],
        ["add", "queue"],
        ["del"],
        ["del", "exchange"],
        ["del", "queue"],
        ["bind"],
        ["unbind"],
    ],
)
def test_help_on_every_command(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        config_cli.main([*command, "--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("usage: amq-config")


def test_each_commands_help_shows_only_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    shown = {}
    for command in (["node"], ["queues"], ["add", "queue"]):
        with pytest.raises(SystemExit):
            config_cli.main([*command, "--help"])
        shown[command[-1]] = capsys.readouterr().out
    assert "--vhost" not in shown["node"] and "--bindings" not in shown["node"]
    assert "--vhost" in shown["queues"] and "--bindings" in shown["queues"]
    assert "--vhost" in shown["queue"] and "--bindings" not in shown["queue"]
