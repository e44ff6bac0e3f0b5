"""A transient exchange route's binding withdrawn from the dynamic adverts upstream while its
link is down (simulations.world.withdrawals, Outages.withdrawn), worked out by hand.

a <-> b are dynamic routes on "t" (durable, each held by its destination); b -> c is a
transient exchange route on "t" with key "#", held by c: its queue on b, and so its binding,
lives only while c's connection is up, and b advertises that binding to a. c's only queue
takes everything; a publishes 2 messages a second with key "k", in steps of 1 s, for 20 s. So
a forwards to b only while a's view of b's adverts holds the route's binding.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from simulations import reference
from simulations.scenario import load_scenario_text

TOPOLOGY = """
[defaults.node]
host = "127.0.0.1"
[nodes.a]
port = 5921
[nodes.b]
port = 5922
[nodes.c]
port = 5923
[[exchanges]]
name = "t"
type = "topic"
[[queues]]
name = "q"
nodes = ["c"]
[[bindings]]
exchange = "t"
queue = "q"
key = "#"
nodes = ["c"]
[[routes]]
kind = "dynamic"
from = "a"
to = "b"
exchange = "t"
[[routes]]
kind = "dynamic"
from = "b"
to = "a"
exchange = "t"
[[routes]]
kind = "exchange"
from = "b"
to = "c"
exchange = "t"
key = "#"
durable = false
"""


def run(tmp_path: Path, failure: str) -> dict[str, pd.DataFrame]:
    (tmp_path / "topology.toml").write_text(TOPOLOGY)
    scenario = load_scenario_text(
        f"""[scenario]
seed = 1
duration = 20
step = 1
[topology]
file = "topology.toml"
[keys]
words = [1]
[[publishers]]
nodes = "a"
exchange = "t"
rate = 2
size = 10
key = "k"
[[failures]]
{failure}
""",
        str(tmp_path / "scenario.toml"),
    )
    return reference.tables(scenario)


def carried(tables: dict[str, pd.DataFrame], link: str) -> list[int]:
    """Per step, the messages that crossed `link` (offered, less what it lost)."""
    rows = tables["links"].set_index("link").loc[[link]].sort_values("step")
    return (rows["messages"] - rows["lost"]).tolist()


def test_the_route_s_far_end_killed_withdraws_the_binding_from_the_dynamic_hop(tmp_path: Path) -> None:
    """c is killed at 4 s and ready at 7 s, when its own connection to b is back: from 4 to 7
    b has no queue for the route, so a forwards nothing (steps 4-6); what a publishes then
    is lost to c/q, and b -> c is offered nothing."""
    tables = run(tmp_path, 'node = "c"\nfrom = 4\nto = 6\nrestart = 1')
    assert carried(tables, "a>b") == [2] * 4 + [0] * 3 + [2] * 13
    assert carried(tables, "b>c") == [2] * 4 + [0] * 3 + [2] * 13
    assert tables["links"]["lost"].sum() == 0
    queue = tables["queues"].set_index(["node", "queue"]).loc[("c", "q")]
    assert (queue["delivered"], queue["lost"]) == (34, 6)


def test_the_route_s_source_killed_keeps_the_binding_until_it_is_back_without_it(tmp_path: Path) -> None:
    """b is killed at 4 s and ready at 7 s. While b is dead a keeps b's last adverts (its
    durable bridge queue holds what they ask for: steps 4-6, sent on at 7 and lost at b,
    whose route is not back). b's link to a is back at 7 (b holds it), c's link to b at its
    retry at 4 + 2 + 4 = 10 s (the one at 6 s is refused): from 7 to 10 b advertises no
    binding for the route, so a forwards nothing (steps 7-9)."""
    tables = run(tmp_path, 'node = "b"\nfrom = 4\nto = 6\nrestart = 1')
    links = tables["links"].set_index(["link", "step"])
    assert carried(tables, "a>b") == [2] * 4 + [2] * 3 + [0] * 3 + [2] * 10
    assert [bool(links.loc[("a>b", step), "down"]) for step in range(3, 8)] == [
        False,
        True,
        True,
        True,
        False,
    ]
    # b -> c gets the 6 held copies at step 7 (lost: down), then nothing until 10.
    assert carried(tables, "b>c") == [2] * 4 + [0] * 6 + [2] * 10
    assert links.loc[("b>c", 7), "lost"] == 6
    queue = tables["queues"].set_index(["node", "queue"]).loc[("c", "q")]
    assert (queue["delivered"], queue["lost"]) == (28, 12)
