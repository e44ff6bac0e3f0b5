"""The exact text of amq-route and amq-config, against the seed's walkthrough (seed 001).

Golden texts are the MRG guide's examples with only its PDF damage undone: a line wrapped at
the page edge is joined again, and the stray spaces on its blank lines are dropped.
"""

from __future__ import annotations

from federation import formatting

# Seed 001 lines 1541-1546 (the last row's "Connection refused" was wrapped over two lines).
# The rows without a last error keep the state's padding: the seed has those trailing spaces.
SEED_LINK_LIST = "\n".join(
    [
        # qpid-route's columns, and the name each node gave (unknown: "-", never reached).
        "Host            Port    Node      Transport Durable  State             Last Error",
        "=" * 81,
        "localhost       10002   broker2   tcp          N     Operational" + " " * 7,
        "localhost       10003   broker3   tcp          N     Operational" + " " * 7,
        "localhost       10009   -         tcp          N     Waiting           Connection refused",
    ]
)

# Seed 001 lines 1593-1603, the part of `route map` after the probes.
SEED_MAP_ROUTES = """\
Dynamic Routes:

Exchange fed.topic:
localhost:10004 <=> localhost:10003

Static Routes:
none found"""


def link(
    host: str, port: int, state: str = "Operational", last_error: str = "", durable: bool = False
) -> dict:
    return {
        "host": host,
        "port": port,
        "transport": "tcp",
        "durable": durable,
        "state": state,
        "last_error": last_error,
        "connected_since": None,
        "reconnects": 0,
    }


def route(
    kind: str, dest: str, src: str, exchange: str, key: str = "", queue: str = "", src_local: bool = False
) -> dict:
    return {
        "kind": kind,
        "dest": dest,
        "src": src,
        "exchange": exchange,
        "key": key if kind == "exchange" else None,
        "queue": queue if kind == "queue" else None,
        "tag": None,
        "excludes": [],
        "durable": False,
        "src_local": src_local,
    }


def federation_record(exchange: str, parent: str, type: str = "fanout", **fields: object) -> dict:
    """A federations.list record (federation.attachment.Attachment.record), idle and healthy."""
    record = {
        "exchange": exchange,
        "vhost": "/",
        "type": type,
        "parent": parent,
        "login": "peering",
        "durable": False,
        "source": "config",
        "state": "Operational",
        "last_error": "",
        "outbox": {"messages": 0, "limit": 100000, "policy": "block", "dropped": 0},
        "forwarded": 0,
        "received": 0,
        "returned": 0,
    }
    record.update(fields)
    return record


def test_link_list_reproduces_the_seed_table() -> None:
    links = [
        {**link("localhost", 10002), "node": "broker2"},
        {**link("localhost", 10003), "node": "broker3"},
        link("localhost", 10009, "Waiting", "Connection refused"),
    ]
    assert "\n".join(formatting.link_table(links)) == SEED_LINK_LIST


def test_link_list_rule_is_77_wide_and_durable_is_y() -> None:
    lines = formatting.link_table([link("node-b.example", 5673, durable=True)])
    assert lines[1] == "=" * 81  # qpid-route's 77, and the Node column
    assert lines[2].startswith("node-b.example  5673    -         tcp          Y     Operational")


def test_link_list_widens_a_column_its_cell_would_overrun() -> None:
    lines = formatting.link_table([{**link("a-long-node-name.example", 5673), "node": "a-long-name"}])
    assert lines[0].startswith("Host                      Port    Node         Transport")
    assert lines[2].startswith(
        "a-long-node-name.example  5673    a-long-name  tcp          N     Operational"
    )


def test_no_links() -> None:
    assert formatting.link_table([]) == ["No Links Found"]


def test_route_list_lines_for_each_kind() -> None:
    routes = [
        route("dynamic", "n1", "localhost:10004", "fed.topic"),
        route("exchange", "n1", "localhost:10002", "amq.topic", key="global.#"),
        route("queue", "n1", "localhost:10002", "amq.fanout", queue="public"),
    ]
    assert formatting.route_list("localhost:10001", routes) == [
        "localhost:10001 localhost:10004 fed.topic <dynamic>",
        "localhost:10001 localhost:10002 amq.topic global.#",
        # A queue route has no key: the field is empty, as qpid-route prints it.
        "localhost:10001 localhost:10002 amq.fanout ",
    ]


def test_a_push_route_names_its_destination_as_the_peer() -> None:
    push = route("exchange", "localhost:10001", "n2", "amq.topic", key="k", src_local=True)
    assert formatting.route_peer(push) == "localhost:10001"
    assert formatting.route_list("localhost:10002", [push]) == ["localhost:10002 localhost:10001 amq.topic k"]


def test_route_map_reproduces_the_seed_sections() -> None:
    routes_by_node = [
        ("localhost:10003", [route("dynamic", "x", "localhost:10004", "fed.topic")]),
        ("localhost:10004", [route("dynamic", "y", "localhost:10003", "fed.topic")]),
    ]
    assert "\n".join(formatting.map_routes(routes_by_node)) == SEED_MAP_ROUTES


def test_route_map_one_way_pairs_exchanges_and_static_forms() -> None:
    routes_by_node = [
        (
            "a:1",
            [
                route("dynamic", "a", "b:2", "fed.topic"),
                route("dynamic", "a", "c:3", "fed.direct"),
                route("exchange", "a", "b:2", "amq.topic", key="global.#"),
                route("queue", "a", "b:2", "amq.fanout", queue="public"),
            ],
        ),
        (
            "b:2",
            [
                route("dynamic", "b", "c:3", "fed.topic"),
                route("dynamic", "b", "a:1", "fed.topic"),
                route("exchange", "a:1", "b", "amq.direct", key="k", src_local=True),
                route("queue", "a:1", "b", "amq.fanout", queue="out", src_local=True),
            ],
        ),
    ]
    assert formatting.map_routes(routes_by_node) == [
        "Dynamic Routes:",
        "",
        "Exchange fed.topic:",
        "b:2 <=> a:1",
        "c:3  => b:2",
        "",
        "Exchange fed.direct:",
        "c:3  => a:1",
        "",
        "Static Routes:",
        "",
        "a:1(ex=amq.topic) <= b:2(ex=amq.topic) key=global.#",
        "a:1(ex=amq.fanout) <= b:2(queue=public)",
        "b:2(ex=amq.direct) => a:1(ex=amq.direct) key=k",
        "b:2(queue=out) => a:1(ex=amq.fanout)",
    ]


def test_route_map_without_routes() -> None:
    assert formatting.map_routes([("a:1", [])]) == [
        "Dynamic Routes:",
        "none found",
        "",
        "Static Routes:",
        "none found",
    ]


def test_map_probe_lines() -> None:
    assert formatting.map_probe("localhost:10003", None) == "localhost:10003... Ok"
    assert formatting.map_probe("h:1", "Failed: ConnectFailed - Connection refused") == (
        "h:1... Failed: ConnectFailed - Connection refused"
    )


# `federate list` of a child with one federation of each source, a long parent, a vhost other
# than "/", an outbox that dropped messages and an IPv6 parent the record names without brackets.
FEDERATION_LIST = "\n".join(
    [
        "Exchange                  Type        Parent                   Source   State        "
        "Outbox                 Forwarded  Received  Returned  Last Error",
        "=" * 149,
        "amq.data                  fanout      localhost:5672           config   Operational  "
        "0/100000               1204       5310      0" + " " * 9,
        "amq.service               service     localhost:5672           durable  Operational  "
        "0/100000               0          0         3" + " " * 9,
        "fed.orders (vhost sales)  publisher   parent.example.com:5673  runtime  Waiting      "
        "873/1000 (12 dropped)  0          0         0         Connection refused",
        "x                         subscriber  [::1]:5672               config   Operational  "
        "0/100000               0          0         0" + " " * 9,
    ]
)


def federations() -> list[dict]:
    return [
        federation_record("amq.data", "localhost:5672", forwarded=1204, received=5310),
        federation_record(
            "amq.service", "localhost:5672", "service", durable=True, source="runtime", returned=3
        ),
        federation_record(
            "fed.orders",
            "parent.example.com:5673",
            "publisher",
            vhost="sales",
            source="runtime",
            state="Waiting",
            last_error="Connection refused",
            outbox={"messages": 873, "limit": 1000, "policy": "drop-oldest", "dropped": 12},
        ),
        federation_record("x", "::1:5672", "subscriber"),
    ]


def test_federation_table() -> None:
    assert "\n".join(formatting.federation_table(federations())) == FEDERATION_LIST


def test_federation_table_columns_shrink_to_their_captions_and_values() -> None:
    assert formatting.federation_table([federation_record("amq.data", "p:5672")]) == [
        "Exchange  Type        Parent  Source   State        Outbox    Forwarded  Received  Returned  Last Error",
        "=" * 103,
        "amq.data  fanout      p:5672  config   Operational  0/100000  0          0         0         ",
    ]


def test_no_federations() -> None:
    assert formatting.federation_table([]) == ["No Federations Found"]


def test_federation_parent_brackets_an_ipv6_host_either_way() -> None:
    for parent in ("::1:5673", "[::1]:5673"):
        address = formatting.federation_parent(federation_record("x", parent))
        assert (address.host, address.port, str(address)) == ("::1", 5673, "[::1]:5673")
    assert str(formatting.federation_parent(federation_record("x", "node-b:5672"))) == "node-b:5672"


def test_map_federations_lines_and_nothing_without_any() -> None:
    assert formatting.map_federations([("a:1", []), ("b:2", [])]) == []
    assert formatting.map_federations([("a:1", federations()[2:]), ("b:2", federations()[:1])]) == [
        "",
        "Federations:",
        "",
        "a:1 => parent.example.com:5673 fed.orders (vhost sales) (publisher)",
        "a:1 => [::1]:5672 x (subscriber)",
        "b:2 => localhost:5672 amq.data (fanout)",
    ]


def exchange(name: str, type: str, durable: bool = False, alternate: str | None = None) -> dict:
    return {"name": name, "type": type, "durable": durable, "alternate_exchange": alternate}


def queue(
    name: str,
    durable: bool = False,
    auto_delete: bool = False,
    bindings: int = 1,
    messages: int = 0,
    bytes: int | None = None,
    bytes_on_disk: int = 0,
    capacity: int | None = None,
    overfull: bool = False,
) -> dict:
    return {
        "name": name,
        "durable": durable,
        "auto_delete": auto_delete,
        "exclusive": False,
        "messages": messages,
        "bytes": 100 * messages if bytes is None else bytes,
        "bytes_on_disk": bytes_on_disk,
        "capacity": capacity,
        "overfull": overfull,
        "consumers": 0,
        "bindings": bindings,
        "arguments": {},
    }


def test_summary_reproduces_the_seed_counts_right_aligned() -> None:
    # Seed 001 lines 393-402 (the labels' alignment flattened by the PDF): 6 exchanges of four
    # types, 7 queues none durable.
    exchanges = [
        exchange("amq.topic", "topic"),
        exchange("qpid.management", "topic"),
        exchange("amq.match", "headers"),
        exchange("amq.fanout", "fanout"),
        exchange("", "direct"),
        exchange("amq.direct", "direct"),
    ]
    queues = [queue(f"q{n}") for n in range(7)]
    assert "\n".join(formatting.summary(exchanges, queues)) == (
        "\n"
        "Total Exchanges: 6\n"
        "          topic: 2\n"
        "        headers: 1\n"
        "         fanout: 1\n"
        "         direct: 2\n"
        "   Total Queues: 7\n"
        "        durable: 0\n"
        "    non-durable: 7"
    )


def test_queue_table_columns() -> None:
    lines = formatting.queue_table(
        [queue("pub_start"), queue("mgmt-3206", durable=True, auto_delete=True, bindings=2, messages=1234)]
    )
    overfull = queue(
        "fed.bridge", messages=12, bytes=1_200_000, bytes_on_disk=200_000, capacity=1_000_000, overfull=True
    )
    lines += formatting.queue_table([overfull, queue("flowing", capacity=10)])[3:]
    assert lines == [
        "",
        "Durable  AutoDel  Excl  Bindings  Messages       Bytes     On disk  Flow      Queue Name",
        "=" * 91,
        "  N        N      N         1            0           0           0  -         pub_start",
        "  Y        Y      N         2         1234      123400           0  -         mgmt-3206",
        "  N        N      N         1           12     1200000      200000  OVERFULL  fed.bridge",
        "  N        N      N         1            0           0           0  ok        flowing",
    ]


def test_exchange_table_shows_recreating_options() -> None:
    lines = formatting.exchange_table(
        [
            exchange("amq.direct", "direct", durable=True),
            exchange("a-rather-long-exchange-name", "fanout", alternate="alt"),
        ]
    )
    assert lines == [
        "Type      Exchange Name                Attributes",
        "=" * 60,
        "direct    amq.direct                   --durable",
        "fanout    a-rather-long-exchange-name  --alternate-exchange=alt",
    ]


def binding(exchange: str, destination: str, key: str, kind: str = "queue") -> dict:
    return {
        "exchange": exchange,
        "destination_kind": kind,
        "destination": destination,
        "routing_key": key,
        "arguments": {},
    }


def test_exchange_bindings_reproduce_the_seed_form() -> None:
    # Seed 001 lines 441-462, shortened.
    exchanges = [exchange("", "direct"), exchange("amq.topic", "topic"), exchange("qpid.management", "topic")]
    bindings = [
        binding("", "pub_start", "pub_start"),
        binding("", "pub_done", "pub_done"),
        binding("qpid.management", "mgmt-3206", "mgmt.#"),
    ]
    assert formatting.exchange_bindings(exchanges, bindings) == [
        "Exchange '' (direct)",
        " bind pub_start => pub_start",
        " bind pub_done => pub_done",
        "Exchange 'amq.topic' (topic)",
        "Exchange 'qpid.management' (topic)",
        " bind mgmt.# => mgmt-3206",
    ]


def test_queue_bindings_name_the_default_exchange() -> None:
    bindings = [
        binding("", "q", "q"),
        binding("amq.topic", "q", "a.#"),
        binding("amq.topic", "other", "x", kind="exchange"),
    ]
    assert formatting.queue_bindings([queue("q")], bindings) == [
        "Queue 'q'",
        " bind q => ''",
        " bind a.# => amq.topic",
    ]


def test_node_status_shows_connections_and_alarms() -> None:
    info = {
        "name": "edge-1",
        "vhosts": ["/"],
        "connections": 4,
        "blocked_connections": 1,
        "memory": {"used": 52 * 2**20 + 2**19, "high_watermark": 160 * 2**20, "alarm": True},
        "disk": {"free": 12 * 2**30, "free_limit": 50_000_000, "alarm": False},
        "spill": {"bodies": 40, "bytes": 40 * 2**20},
    }
    assert formatting.node_status(info) == [
        "Node:        edge-1",
        "Connections: 4 (1 blocked)",
        "Memory:      52.5 MiB used, high watermark 160.0 MiB, alarm ON: publishers held",
        "Disk:        12.0 GiB free, limit 47.7 MiB, alarm off",
        "Spill:       40 bodies, 40.0 MiB (emptied at every start)",
    ]
    # A node without a store has no disk alarm (nor an older node a spill file).
    del info["disk"], info["spill"]
    assert formatting.node_status(info)[-1].startswith("Memory:")


#: 2026-11-26 14:02:11 UTC, as a record's `since`.
SINCE = 1795701731.0


def test_live_routes_show_their_state_and_traffic() -> None:
    working = route("exchange", "n1", "localhost:10002", "amq.topic", key="global.#")
    working.update(state="Operational", last_error="", since=SINCE, messages=3, bytes=120)
    failing = route("queue", "n1", "localhost:10002", "amq.fanout", queue="public")
    failing.update(
        state="Failed",
        last_error="localhost:10002: NOT_FOUND - no queue 'public'",
        since=SINCE,
        messages=0,
        bytes=0,
    )
    assert formatting.route_list("localhost:10001", [working, failing]) == [
        "localhost:10001 localhost:10002 amq.topic global.#  [Operational; 3 messages, 120 bytes]",
        "localhost:10001 localhost:10002 amq.fanout   [Failed since 2026-11-26 14:02:11 UTC: "
        "localhost:10002: NOT_FOUND - no queue 'public'; 0 messages, 0 bytes]",
    ]
    assert formatting.map_routes([("localhost:10001", [failing])])[-1] == (
        "localhost:10001(ex=amq.fanout) <= localhost:10002(queue=public)  [Failed since 2026-11-26 "
        "14:02:11 UTC: localhost:10002: NOT_FOUND - no queue 'public'; 0 messages, 0 bytes]"
    )


def test_a_dynamic_pair_shows_its_least_healthy_side_and_the_traffic_of_both() -> None:
    there = route("dynamic", "x", "localhost:10004", "fed.topic")
    there.update(state="Operational", last_error="", since=SINCE, messages=3, bytes=30)
    back = route("dynamic", "y", "localhost:10003", "fed.topic")
    back.update(
        state="Waiting", last_error="link Waiting: Connection refused", since=SINCE, messages=1, bytes=5
    )
    lines = formatting.map_routes([("localhost:10003", [there]), ("localhost:10004", [back])])
    assert lines[3] == (
        "localhost:10004 <=> localhost:10003  [Waiting since 2026-11-26 14:02:11 UTC: "
        "link Waiting: Connection refused; 4 messages, 35 bytes]"
    )


def test_live_federations_show_state_since_and_bytes() -> None:
    failing = federation_record(
        "amq.data",
        "p:5672",
        state="Failed",
        last_error="exchange 'amq.data' does not exist on p:5672",
        since=SINCE,
        forwarded=2,
        forwarded_bytes=10,
        received_bytes=0,
    )
    assert formatting.federation_table([failing])[2].endswith(
        "  exchange 'amq.data' does not exist on p:5672 (since 2026-11-26 14:02:11 UTC)"
    )
    assert "2 (10 B)" in formatting.federation_table([failing])[2]
    assert formatting.map_federations([("c:1", [failing])])[-1] == (
        "c:1 => p:5672 amq.data (fanout)  [Failed since 2026-11-26 14:02:11 UTC: exchange 'amq.data' "
        "does not exist on p:5672; forwarded 2 messages, 10 bytes; received 0 messages, 0 bytes]"
    )


def test_a_route_in_another_vhost_names_it() -> None:
    record = route("exchange", "n1", "localhost:10002", "amq.topic", key="k")
    record["vhost"] = "prod"
    assert formatting.route_list("localhost:10001", [record]) == [
        "localhost:10001 localhost:10002 amq.topic (vhost prod) k"
    ]


def test_exchange_and_queue_stats_right_align_the_counters() -> None:
    exchanges = [
        {"name": "", "published": 12, "routed": 11, "unroutable": 1, "dropped_looping": 0},
        {"name": "fed.topic", "published": 3, "routed": 2, "unroutable": 0, "dropped_looping": 1},
    ]
    assert formatting.exchange_stats(exchanges) == [
        "Exchange Name  Published  Routed  Unroutable  Looping",
        "=" * 53,
        "''                    12      11           1        0",
        "fed.topic              3       2           0        1",
    ]
    queue = {
        "enqueued": 10,
        "delivered": 8,
        "acknowledged": 6,
        "dead_lettered": 1,
        "dropped": 3,
        "messages": 2,
    }
    assert formatting.queue_stats([{"name": "work", **queue}]) == [
        "Queue Name  Enqueued  Delivered  Acked  Dead-lettered  Dropped  Messages",
        "=" * 72,
        "work              10          8      6              1        3         2",
    ]


def test_link_stats_show_traffic_each_way_and_seconds_down() -> None:
    up = {
        "host": "localhost",
        "port": 10002,
        "state": "Operational",
        "down_seconds": 2.01,
        "state_seconds": 312.4,
    }
    down = {
        "host": "localhost",
        "port": 10009,
        "state": "Waiting",
        "down_seconds": 30.5,
        "state_seconds": 4.0,
    }
    traffic = {"messages_in": 120, "messages_out": 0, "bytes_in": 4800, "bytes_out": 0}
    idle = dict.fromkeys(traffic, 0)
    assert formatting.link_stats([{**up, **traffic}, {**down, **idle}]) == [
        "Host       Port   State        Msgs In  Msgs Out  Bytes In  Bytes Out  Down s  In State s",
        "=" * 89,
        "localhost  10002  Operational      120         0      4800          0     2.0       312.4",
        "localhost  10009  Waiting            0         0         0          0    30.5         4.0",
    ]
    assert formatting.link_stats([]) == ["No Links Found"]
