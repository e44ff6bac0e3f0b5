"""The shared routing cases (tests/vectors/routing.json) through the broker model, the
plain-data walk and the pairwise predicate: three ways in, one set of answers."""

from __future__ import annotations

import pytest
from pamqp import commands

from gateway.broker import Broker
from gateway.routing import ExchangeGraph, binding_matches
from gateway.wire.errors import AMQPError

from ..routing_vectors import GraphCase, MatchCase, all_cases, case_id, match_cases
from .broker_fakes import Client


def broker_copies(case: GraphCase) -> dict[str, int]:
    """Declare the case on a broker, publish once, and count what each queue holds."""
    broker = Broker()
    client = Client(broker)
    for name, kind, alternate in case.exchanges:
        client.exchange(name, kind, arguments={"alternate-exchange": alternate} if alternate else {})
    for queue in case.queues:
        client.declare(queue)
    for binding in case.bindings:
        method: commands.Queue.Bind | commands.Exchange.Bind
        if binding.to == "queue":
            method = commands.Queue.Bind(
                queue=binding.destination,
                exchange=binding.source,
                routing_key=binding.key,
                arguments=binding.arguments,
            )
        else:
            method = commands.Exchange.Bind(
                destination=binding.destination,
                source=binding.source,
                routing_key=binding.key,
                arguments=binding.arguments,
            )
        binder = Client(broker)  # a refused binding closes its channel
        if binding.refused:
            with pytest.raises(AMQPError) as info:
                binder.call(method)
            assert info.value.reply_code == 406
        else:
            binder.call(method)
    properties = {} if case.headers is None else {"headers": case.headers}
    client.publish(case.exchange, case.routing_key, **properties)
    counts = {queue: client.declare(queue, passive=True).message_count for queue in case.queues}
    return {queue: count for queue, count in counts.items() if count}


def plain_graph(case: GraphCase) -> ExchangeGraph:
    graph = ExchangeGraph(case.queues)
    for name, kind, alternate in case.exchanges:
        graph.declare(name, kind, alternate)
    for binding in case.bindings:
        if binding.to == "exchange":
            graph.bind_exchange(binding.source, binding.key, binding.arguments, binding.destination)
        elif binding.refused:
            with pytest.raises(ValueError):
                graph.bind(binding.source, binding.key, binding.arguments, binding.destination)
        else:
            graph.bind(binding.source, binding.key, binding.arguments, binding.destination)
    return graph


@pytest.mark.parametrize("case", all_cases(), ids=case_id)
def test_the_broker_routes_each_case_to_the_expected_queues_once(case: GraphCase) -> None:
    assert broker_copies(case) == dict.fromkeys(case.expected, 1)


@pytest.mark.parametrize("case", all_cases(), ids=case_id)
def test_the_plain_data_walk_routes_each_case_to_the_expected_queues(case: GraphCase) -> None:
    assert plain_graph(case).route(case.exchange, case.routing_key, case.headers) == case.expected


@pytest.mark.parametrize("case", match_cases(), ids=case_id)
def test_the_pairwise_predicate_takes_exactly_the_expected_queues(case: MatchCase) -> None:
    taken = {
        binding.destination
        for binding in case.bindings
        if binding_matches(case.kind, binding.key, binding.arguments, case.routing_key, case.headers)
    }
    assert taken == case.expected
