"""The Spark engine of amq-sim: PySpark jobs as pure functions from DataFrames to DataFrames.

- `session`: the SparkSession (local[*] or any master), with a clear message when Java is
  missing;
- `failures`: the scenario's failure windows as Column expressions (built-in functions);
- `jobs`: events, routing by class, traffic and backlog per link and step, outcomes;
- `engine`: the pipeline from a scenario to the Parquet tables (simulations.tables).

Semantics come from gateway.routing through simulations.world (the routing step calls it once
per class, in an Arrow pandas UDF); nothing here imports trio, sqlite3 or the broker.
"""
