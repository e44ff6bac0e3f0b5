"""The topology planner: TOML topology files checked, mapped, planned and applied to live nodes.

Offline (no trio, no sqlite3, no broker; tests/test_layers.py checks it): `model`, `loader`,
`schema` read a file into frozen dataclasses; `graph` builds networkx graphs of it; `flow`
follows one publish through it with gateway.routing, the nodes' own rules; `checks`,
`checks_graph` and `checks_references` report what is wrong. Live: `live`, `plan`, `apply` and
`up` talk to nodes through federation.requests and the management client. Imported by the
console scripts' composer (gateway.cli) and by tests; federation never imports it.
"""
