"""federation.health: a route's own state, and the state a user sees with its link's."""

from __future__ import annotations

from federation.errors import ConnectionLost
from federation.health import Health, combined


def test_a_route_fails_since_its_first_failure_and_waits_while_its_connection_is_gone() -> None:
    health = Health()
    assert health.record()["state"] == "Waiting"
    health.operational()
    health.failed("no queue 'q'")
    first = health.since
    health.failed("no queue 'q' again")
    assert (health.state, health.last_error, health.since) == ("Failed", "no queue 'q' again", first)
    health.ended(ConnectionLost("gone"), "gone")
    assert (health.state, health.last_error) == ("Waiting", "")
    health.ended(ValueError("bad"), "peer: bad")
    assert (health.state, health.last_error) == ("Failed", "peer: bad")


def test_a_link_that_is_not_operational_decides_the_state() -> None:
    health = Health()
    health.operational()
    up = {"state": "Operational", "last_error": "", "since": 1.0}
    assert combined(health, up)["state"] == "Operational"
    down = {"state": "Waiting", "last_error": "Connection refused", "since": 5.0}
    assert combined(health, down) == {
        "state": "Waiting",
        "last_error": "link Waiting: Connection refused",
        "since": 5.0,
    }
    refused = {"state": "Failed", "last_error": "ACCESS_REFUSED", "since": 6.0}
    assert combined(health, refused)["state"] == "Failed"
