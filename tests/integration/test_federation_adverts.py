"""Federation's own exchange takes adverts from federation logins only, each in its own name:
the attacks of issue 26 (an ordinary user diverting a dynamic route's traffic into its own
queue, or stopping it with an empty advert; one federation peer speaking for another) are
refused with 403 on the publishing channel, and every message still arrives where it should.
Two real node processes, a dynamic route between them, pika for everyone else."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from federation.dynamic import bridge_queue, encode_adverts
from gateway.names import CONTROL_EXCHANGE
from gateway.routing.interest import Advert
from gateway.security import set_password
from tests.integration.test_disk_full import wait_until
from tests.nodes import NodeProcess, start_node

BIN = Path(sys.executable).parent
EXCHANGE = "fed.topic"
KEY = "orders.eu"
#: The downstream node's name: its federation login on the upstream node has the same name.
DOWN = "down"
PERSISTENT = pika.BasicProperties(delivery_mode=2)
PROBE = b"probe"


def _cli(tool: str, *args: str) -> None:
    result = subprocess.run(
        [str(BIN / tool), *args, "--timeout", "10"], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, f"{tool} {' '.join(args)}: {result.stderr}"


def _connect(node: NodeProcess, user: str = "guest", password: str = "guest") -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(node.url(user, password)))


class Federation:
    """`up` (with a users file: an administrator, an ordinary user, two federation logins) and
    `down`, which pulls `fed.topic` from `up` over a dynamic route logged in as `down`."""

    def __init__(self, tmp_path: Path, acl: str | None = None) -> None:
        """`acl`: an ACL file for `up`, which then makes `down` a federation login (without
        it, its `federation` tag does)."""
        users = tmp_path / "users.toml"
        set_password(users, "admin", "secret", tags=["administrator"])
        set_password(users, "mallory", "pw")
        set_password(users, DOWN, "fed-down", tags=[] if acl else ["federation"])
        set_password(users, "other", "fed-other", tags=["federation"])
        flags = ["--users", str(users)]
        if acl is not None:
            (tmp_path / "up.acl").write_text(acl)
            flags += ["--acl-file", str(tmp_path / "up.acl")]
        self.up = start_node(tmp_path / "up", *flags, name="up")
        self.down = start_node(tmp_path / "down", name=DOWN)
        try:
            _cli(
                "amq-config",
                "-a",
                f"admin/secret@127.0.0.1:{self.up.port}",
                "add",
                "exchange",
                "topic",
                EXCHANGE,
            )
            _cli("amq-config", "-a", f"127.0.0.1:{self.down.port}", "add", "exchange", "topic", EXCHANGE)
            _cli("amq-config", "-a", f"127.0.0.1:{self.down.port}", "add", "queue", "orders")
            _cli("amq-config", "-a", f"127.0.0.1:{self.down.port}", "bind", EXCHANGE, "orders", KEY)
            _cli(
                "amq-route",
                "dynamic",
                "add",
                f"127.0.0.1:{self.down.port}",
                f"{DOWN}/fed-down@127.0.0.1:{self.up.port}",
                EXCHANGE,
            )
            self.publisher = _connect(self.up, "admin", "secret")
            self.publishing = self.publisher.channel()
            self.publishing.confirm_delivery()
            self.consumer = _connect(self.down)
            self.consuming = self.consumer.channel()
            self.received = 0
            wait_until(
                self._probe_arrived, "the downstream node's interest reached the upstream node", self.up
            )
        except BaseException:  # a setup that fails stops its nodes rather than leaving them running
            self.up.stop()
            self.down.stop()
            raise

    def _probe_arrived(self) -> bool:
        self.publishing.basic_publish(EXCHANGE, KEY, PROBE)
        return self.consuming.basic_get("orders", auto_ack=True)[0] is not None

    def _drain(self) -> int:
        """Take what `orders` holds; how many were messages (probes still in flight are not)."""
        count = 0
        while True:
            _, _, body = self.consuming.basic_get("orders", auto_ack=True)
            if body is None:
                return count
            count += body != PROBE

    def delivers(self, count: int) -> None:
        """`count` confirmed persistent messages published on `up` all reach `orders` on `down`."""
        for number in range(count):
            self.publishing.basic_publish(EXCHANGE, KEY, b"m%d" % number, PERSISTENT)
        self.received = 0

        def arrived() -> bool:
            self.received += self._drain()
            return self.received >= count

        wait_until(arrived, f"{count} messages reached the downstream queue", self.down)
        assert self.received == count

    def close(self) -> None:
        for connection in (self.publisher, self.consumer):
            connection.close()
        self.up.stop()
        self.down.stop()


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """One federation for the module: every test leaves it as it found it (a refused advert
    changes nothing, which each test proves by delivering through it)."""
    pair = Federation(tmp_path_factory.mktemp("adverts"))
    yield pair
    pair.close()


def _advert_refused(node: NodeProcess, user: str, password: str, body: bytes, own_queue: str = "") -> str:
    """Publish `body` to the control exchange as `user` with confirms; the 403's text. An
    `own_queue` is declared first (the attacker's), and must still be empty afterwards."""
    connection = _connect(node, user, password)
    try:
        channel = connection.channel()
        if own_queue:
            channel.queue_declare(own_queue)
        channel.confirm_delivery()
        with pytest.raises(ChannelClosedByBroker) as refused:
            channel.basic_publish(CONTROL_EXCHANGE, "", body)
        assert refused.value.reply_code == 403
        if own_queue:
            assert connection.channel().queue_declare(own_queue, passive=True).method.message_count == 0
        return str(refused.value.reply_text)
    finally:
        connection.close()


def _interest(sender: str, queue: str) -> bytes:
    return encode_adverts(EXCHANGE, sender, queue, {Advert.of(sender, KEY, {}, (sender,))})


def test_an_ordinary_user_cannot_divert_a_routes_traffic_into_its_own_queue(federation: Federation) -> None:
    text = _advert_refused(federation.up, "mallory", "pw", _interest(DOWN, "stolen"), own_queue="stolen")
    assert text == (
        "ACCESS_REFUSED - access to exchange 'amq.gateway.federation' in vhost '/' refused for user"
        " 'mallory': only federation logins may send adverts"
    )
    federation.delivers(10)
    wait_until(lambda: "mallory" in federation.up.log(), "the refusal logged", federation.up)


def test_an_ordinary_user_cannot_stop_a_routes_traffic_with_an_empty_advert(federation: Federation) -> None:
    empty = encode_adverts(EXCHANGE, DOWN, bridge_queue(DOWN, EXCHANGE), set())
    _advert_refused(federation.up, "mallory", "pw", empty)
    federation.delivers(10)


def test_one_federation_peer_cannot_speak_for_another(federation: Federation) -> None:
    empty = encode_adverts(EXCHANGE, DOWN, bridge_queue(DOWN, EXCHANGE), set())
    text = _advert_refused(federation.up, "other", "fed-other", empty)
    assert text == (
        "ACCESS_REFUSED - adverts in the name of node 'down' from the login of node 'other'"
        " refused for user 'other'"
    )
    federation.delivers(10)


def test_a_federation_login_cannot_point_its_own_interest_at_another_queue(federation: Federation) -> None:
    text = _advert_refused(federation.up, DOWN, "fed-down", _interest(DOWN, "stolen"), own_queue="stolen")
    assert text == (
        "ACCESS_REFUSED - adverts from node 'down' naming queue 'stolen', not its bridge queue"
        " 'federation.bridge.down.fed.topic' refused for user 'down'"
    )
    federation.delivers(10)


def test_a_login_the_acl_file_lets_create_links_is_a_federation_login(tmp_path: Path) -> None:
    """No tag: the ACL file's `create link` right makes `down` a federation login (the issue's
    other way), in its own name; mallory, without that right, is refused as before."""
    rules = "acl allow down create link\nacl deny all create link\nacl allow all all\n"
    pair = Federation(tmp_path, acl=rules)
    try:
        pair.delivers(10)  # down's adverts were taken: its interest reached up
        _advert_refused(pair.up, "mallory", "pw", _interest(DOWN, "stolen"), own_queue="stolen")
        pair.delivers(10)
    finally:
        pair.close()
