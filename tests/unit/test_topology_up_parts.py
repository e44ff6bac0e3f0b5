"""The pieces of `amq-gateway up` that need no node: the traffic verdict, which hosts are this
machine's, the serve command line of a node, its ready line, and removing what `up` keeps."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from gateway.ready import READY, TLS_READY, ready_address
from gateway.store.opening import lock_data_dir
from topology.fresh import InUse, remove_state
from topology.model import Node, Topology
from topology.processes import is_local, serve_command
from topology.traffic import TrafficReport


def test_traffic_report_matching() -> None:
    report = TrafficReport(2, 1, Counter({("a", "q"): 2}), Counter({("a", "q"): 2}))
    assert report.ok
    assert report.lines() == [
        "",
        "Traffic: 2 message(s) from each of 1 publisher(s):",
        "",
        "Node        Queue       Expected  Arrived",
        "=========================================",
        "a           q           2         2",
        "",
        "Traffic: every message arrived where the topology sends it.",
    ]


def test_traffic_report_names_missing_and_unexpected_arrivals() -> None:
    expected = Counter({("a", "q"): 2, ("b", "q"): 2})
    arrived = Counter({("a", "q"): 2, ("b", "q"): 1, ("c", "stray"): 1})
    report = TrafficReport(2, 1, expected, arrived)
    assert not report.ok
    lines = report.lines()
    assert "b           q           2         1" in lines
    assert "c           stray       0         1" in lines
    assert lines[-1] == "Traffic: MISMATCH in 2 queue(s): not what the topology sends there."


def test_a_queue_that_lost_messages_is_no_match() -> None:
    """Depth differences can be negative (a consumer took some): never counted as arrivals."""
    report = TrafficReport(1, 1, Counter({("a", "q"): 1}), Counter({("a", "q"): 1, ("b", "r"): -3}))
    assert report.ok


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0", "127.0.0.2"])
def test_this_machine(host: str) -> None:
    assert is_local(host)


@pytest.mark.parametrize("host", ["192.0.2.1", "203.0.113.9", "no-such-host.invalid"])
def test_elsewhere(host: str) -> None:
    assert not is_local(host)


def test_serve_command_names_the_node_its_data_and_users() -> None:
    node = Node("hub-eu", "127.0.0.1", 5701, users="/etc/amq/users.toml")
    command = serve_command(node, Path("var/hub-eu"))
    assert command[1:] == [
        *("-m", "gateway.cli", "serve", "--name", "hub-eu", "--host", "127.0.0.1", "--port", "5701"),
        *("--data-dir", "var/hub-eu", "--users", "/etc/amq/users.toml"),
    ]


def test_serve_command_passes_the_tls_keys() -> None:
    node = Node(
        "hub-eu",
        "127.0.0.1",
        5701,
        tls_port=5801,
        tls_cert="/c/hub.pem",
        tls_key="/c/hub.key",
        tls_ca="/c/ca.pem",
    )
    assert serve_command(node, Path("var/hub-eu"))[-8:] == [
        *("--tls-port", "5801", "--tls-cert", "/c/hub.pem"),
        *("--tls-key", "/c/hub.key", "--tls-ca", "/c/ca.pem"),
    ]


def test_the_ready_line_is_found_for_its_own_node_only() -> None:
    log = "2026-01-01 INFO gateway: starting\n2026-01-01 INFO gateway.node: " + READY % (
        "alpha",
        "[::1]:5711",
    )
    assert ready_address(log, "alpha") == "[::1]:5711"
    assert ready_address(log, "alph") is None
    assert ready_address(log.replace("ready", "read"), "alpha") is None


def test_the_tls_ready_line_comes_first_and_is_not_the_plain_one() -> None:
    tls = TLS_READY % ("alpha", "127.0.0.1:5811")
    assert ready_address(tls, "alpha") is None
    assert ready_address(tls + "\n" + READY % ("alpha", "127.0.0.1:5711"), "alpha") == "127.0.0.1:5711"


def test_clean_removes_the_local_nodes_state_but_never_a_running_nodes(tmp_path: Path) -> None:
    nodes = {
        "a": Node("a", "127.0.0.1", 1),
        "b": Node("b", "127.0.0.1", 2),
        "far": Node("far", "192.0.2.1", 3),
        "new": Node("new", "127.0.0.1", 4),
    }
    topology = Topology("t", "", nodes=nodes)
    for name in ("a", "b", "far"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "node.log").write_text("old run\n")
    held = lock_data_dir(tmp_path / "b")  # as the node running on it holds it
    try:
        with pytest.raises(InUse, match=f"not removing {tmp_path / 'b'}: data dir .* in use by another node"):
            remove_state(topology, tmp_path)
        assert (tmp_path / "a" / "node.log").exists()  # nothing is removed when one is in use
    finally:
        os.close(held)
    assert remove_state(topology, tmp_path) == [tmp_path / "a", tmp_path / "b"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["far"]
