"""Where the driver listens: loopback only for a master on this host, so a cluster's executors
can reach a driver started for them."""

from __future__ import annotations

import pytest

from spark.session import on_this_host, submitted


@pytest.mark.parametrize(
    ("master", "local"),
    [
        ("local[*]", True),
        ("local[2]", True),
        ("spark://127.0.0.1:7077", True),
        ("spark://localhost:7077", True),
        ("spark://10.1.2.3:7077", False),
        ("yarn", False),
        ("k8s://https://cluster.example:443", False),
    ],
)
def test_the_driver_stays_on_loopback_only_for_a_master_on_this_host(master: str, local: bool) -> None:
    assert on_this_host(master) is local


def test_spark_submit_is_told_by_the_gateway_port_it_hands_the_driver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert not submitted()
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40000")
    assert submitted()
