"""A pytest plugin (`-p docker_stub`, with tests/clients on PYTHONPATH) that points aio-pika's and aiormq's suites at
a running node instead of the Docker container their conftest starts.

Their conftest asks Docker for a `mosquito/aiormq-rabbitmq` container and reads its host and
ports; this plugin, loaded before that conftest, swaps the Docker client for one that "runs" the
node named by AMQP_URL, and supplies the two fixtures that aiormq's sdist leaves out. Nothing
else in their tests changes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

#: The node, as the suites' own URL variable names it.
URL = urlsplit(os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"))


class _Container:
    """What the suites read from a started container: id, host and published ports."""

    def __init__(self) -> None:
        self.id = "amq-gateway"
        self.host = URL.hostname or "127.0.0.1"
        # No TLS listener: the amqps port is the plain one, so amqps tests fail at the handshake.
        self.ports = {"5672/tcp": URL.port or 5672, "5671/tcp": URL.port or 5672}


class _Docker:
    """Stands in for tests.docker_client.DockerClient."""

    def __init__(self, *_: Any) -> None:
        pass

    def run(self, *_: Any, **__: Any) -> _Container:
        return _Container()

    def kill(self, _: str) -> None:
        pass

    def remove(self, _: str) -> None:
        pass


def _patch_docker_client() -> None:
    """Replace the suite's Docker helpers before its conftest imports them."""
    try:
        from tests import docker_client  # the suite's own module, on its rootdir
    except ImportError:
        return
    docker_client.check_docker_available = lambda: None
    docker_client.DockerClient = _Docker


_patch_docker_client()


@pytest.fixture(scope="session")
def rabbitmq_container() -> Iterator[_Container]:
    yield _Container()


@pytest.fixture(scope="session")
def amqp_direct_url() -> Any:
    from yarl import URL as YarlURL

    return YarlURL.build(
        scheme="amqp",
        user=URL.username or "guest",
        password=URL.password or "guest",
        path="//",
        host=URL.hostname or "127.0.0.1",
        port=URL.port or 5672,
    )
