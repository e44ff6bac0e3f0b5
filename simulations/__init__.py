"""amq-sim: traffic simulation of federated topologies, shipped scenarios and their reports.

A scenario (simulations/*.toml, docs/simulation.md) names a topology (a file of configs/ or a
generator), link properties, a workload and failures. Two engines run it and must agree
exactly: `reference` (one process, plain Python over the shared routing core) and the Spark
pipeline in spark/. What both share lives here, so they cannot drift apart:

- `schema`, `scenario`: the scenario file, loaded with the topology loader's conventions;
- `generators`: seeded topologies (hierarchy, ring-of-regions, random-geometric, mesh-of-hubs);
- `workload`: the key space, subscribers' bindings and the publish events, seeded;
- `world`: the scenario made concrete: topology with subscribers, link properties, failure
  windows, and the routing of one class of publish (topology.flow, gateway.routing);
- `reference`: the plain engine; `tables`: the output tables, Parquet and the summary;
- `report`: the HTML report with its plots; `cli`: the `amq-sim` command.
"""
