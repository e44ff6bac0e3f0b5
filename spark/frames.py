"""Small tables built on the driver (a scenario's publishers, links, trees, nodes) as Spark local
relations: sent as Arrow from pandas, a table under spark.sql.execution.arrow.localRelationThreshold
(48 MB) travels inside the query plan, where a list given to createDataFrame becomes an RDD of
pickled rows that every query reading it runs a Python job to decode."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType


def local_frame(spark: SparkSession, rows: Sequence[tuple[Any, ...]], schema: str) -> DataFrame:
    """`rows` as a DataFrame of `schema` (a DDL string such as "link string, step bigint")."""
    struct = StructType.fromDDL(schema)
    assert isinstance(struct, StructType)
    return spark.createDataFrame(pd.DataFrame.from_records(list(rows), columns=struct.names), struct)
