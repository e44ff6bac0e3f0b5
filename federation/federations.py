"""The federated exchanges of one node (OpenAMQ's exchange federation; see
federation.attachment): those the node's config asks for, those added at runtime with
`amq-route federate add`, each with its own peering link to its parent, and the management
operations federations.list/add/delete.

Rules from the config (FederationSettings.rules(): [[federate]] entries, attach_all, the ESB
trio of `attach`) apply to the exchanges of vhost "/" that exist at start and to every one
declared later; the first matching rule wins, and exchanges that cannot be federated
(internal, default, system) are skipped by patterns. Runtime federations are stored when
durable and restored at start, before the rules. An exchange is federated at most once, and
not while it has dynamic routes. A federated exchange that is deleted and declared again is
attached again (its peering keeps running meanwhile and reports the missing exchange).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import trio

from federation.address import BrokerAddress
from federation.attachment import Attachment, AttachmentConfig, Peering, federatable, normalize_type
from federation.health import combined
from federation.link import Link
from federation.persistence import FederationStore
from federation.ports import Connect, PeerConnection
from federation.routes import LocalNode
from federation.timing import HEARTBEAT
from gateway.broker.exchange import Exchange
from gateway.federation_config import OUTBOX_POLICIES, FederationRule, FederationSettings
from gateway.management import ManagementError, Operation
from gateway.names import DEFAULT_TRANSPORT, DEFAULT_VHOST, TLS_TRANSPORT, TRANSPORTS, transport_name
from gateway.tls import ClientTls
from gateway.tomlfile import ConfigError

LOGGER = logging.getLogger("federation.federations")

#: The local vhost config rules apply to (OpenAMQ servers have one).
RULES_VHOST = DEFAULT_VHOST
#: Seconds between a peering's heartbeats: a dead or half-open parent is noticed after two.
PEERING_HEARTBEAT = HEARTBEAT


@dataclass
class _Entry:
    attachment: Attachment
    peering: Peering
    link: Link


def _record(entry: _Entry) -> dict[str, Any]:
    """A federation's record: the peering's state folded with its link's, the name the parent
    gave (None before the first connection), and how long its link has not been Operational
    (its traffic each way is `forwarded` and `received`)."""
    link = entry.link.snapshot()
    return {
        **entry.attachment.record(combined(entry.peering.health, link)),
        "parent_node": link["node"],
        "down_seconds": link["down_seconds"],
    }


class Federations:
    """Federated exchanges; `start` within the node's federation nursery."""

    def __init__(
        self, node: LocalNode, settings: FederationSettings, connect: Connect, tls: ClientTls | None = None
    ) -> None:
        """`tls`: the node's own CA, certificate and key, what ssl peerings use by default."""
        self.node = node
        self._tls = tls
        self.settings = settings
        self._rules = settings.rules()
        self._connect = connect
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._nursery: trio.Nursery | None = None
        self._store: FederationStore | None = None

    def operations(self) -> dict[str, Operation]:
        return {
            "federations.list": self.list,
            "federations.add": self.add,
            "federations.delete": self.delete,
        }

    def attached(self, vhost: str, exchange: str) -> bool:
        return (vhost, exchange) in self._entries

    # -- life cycle -------------------------------------------------------------------------

    def start(self, nursery: trio.Nursery, store: FederationStore) -> None:
        """Restore stored federations, apply the config's rules, and follow new exchanges."""
        self._nursery, self._store = nursery, store
        for record in store.load_attachments():
            config = AttachmentConfig(**record)
            try:
                self._start(config, self._exchange(config.vhost, config.exchange))
            except ManagementError as error:
                LOGGER.warning("stored federation of '%s' not started: %s", config.exchange, error.message)
        vhost = self.node.broker.vhosts.get(RULES_VHOST)
        for exchange in list(vhost.exchanges.values()) if vhost is not None else []:
            self._apply_rules(exchange)
        self.node.broker.on_exchange_created = self._exchange_created

    async def close(self) -> None:
        """Close every peering (bounded by the link's own timeout); nothing starts after this."""
        self._nursery = None
        self.node.broker.on_exchange_created = None
        async with trio.open_nursery() as nursery:
            for entry in self._entries.values():
                nursery.start_soon(entry.link.close)

    def _exchange_created(self, exchange: Exchange) -> None:
        entry = self._entries.get((exchange.vhost.name, exchange.name))
        if entry is not None:
            entry.attachment.attach(exchange)  # declared again after a delete
        elif self._nursery is not None:
            self._apply_rules(exchange)

    def _apply_rules(self, exchange: Exchange) -> None:
        if exchange.vhost.name != RULES_VHOST or federatable(exchange) is not None:
            return
        rule = next((rule for rule in self._rules if rule.matches(exchange.name)), None)
        if rule is None or self.attached(RULES_VHOST, exchange.name):
            return
        if exchange.federation is not None:
            LOGGER.warning("%s: exchange '%s' has dynamic routes; not federated", rule.origin, exchange.name)
            return
        config = self._config_from_rule(rule, exchange)
        self._start(config, exchange)
        LOGGER.info(
            "%s: exchange '%s' federated to %s:%d (%s)",
            rule.origin,
            exchange.name,
            rule.host,
            rule.port,
            config.type,
        )

    def _config_from_rule(self, rule: FederationRule, exchange: Exchange) -> AttachmentConfig:
        return AttachmentConfig(
            exchange=exchange.name,
            vhost=RULES_VHOST,
            type=normalize_type(rule.type, exchange.type),
            host=rule.host,
            port=rule.port,
            parent_vhost=rule.vhost,
            username=rule.login,
            password=rule.password,
            durable=False,
            source="config",
            outbox_limit=self.settings.outbox_limit,
            outbox_policy=self.settings.outbox_policy,
        )

    # -- management -------------------------------------------------------------------------

    def list(self) -> list[dict[str, Any]]:
        return [_record(entry) for entry in self._entries.values()]

    def add(
        self,
        host: str,
        port: int,
        exchange: str,
        vhost: str = DEFAULT_VHOST,
        type: str | None = None,  # noqa: A002 - the record's and the CLI's name for it
        username: str | None = None,
        password: str | None = None,
        durable: bool = False,
        parent_vhost: str | None = None,
        transport: str = DEFAULT_TRANSPORT,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
    ) -> dict[str, Any]:
        """Federate `exchange` to the parent host:port (its `parent_vhost`, by default the
        node's attach_vhost); its record. An ssl (tls) peering runs over TLS as an ssl link
        does (federation.manager.Federation.add_link), an empty username logging in with
        EXTERNAL."""
        target = self._exchange(vhost, exchange)
        if not isinstance(port, int) or not 1 <= port <= 65535:
            raise ManagementError("usage", f"port {port!r} is not a port number")
        # A peering is a link this node opens: the ACL's `create link`, as for links.add.
        self.node.management.authorize("create", "link", str(BrokerAddress(host, port)))
        transport = transport_name(transport)
        if transport not in TRANSPORTS:
            raise ManagementError(
                "usage", f"transport '{transport}' is not supported: use {' or '.join(TRANSPORTS)}"
            )
        settings = self.settings
        username = username if username is not None else settings.attach_login
        if not username and transport == TLS_TRANSPORT:
            password = ""  # EXTERNAL: the certificate names the user
        elif password is None:
            try:
                password = settings.password_for(username)
            except ConfigError as error:
                raise ManagementError("usage", str(error)) from None
        config = AttachmentConfig(
            exchange=exchange,
            vhost=vhost,
            type=normalize_type(type, target.type),
            host=host,
            port=port,
            parent_vhost=parent_vhost or settings.attach_vhost,
            username=username,
            password=password,
            durable=bool(durable),
            outbox_limit=settings.outbox_limit,
            outbox_policy=settings.outbox_policy,
            transport=transport,
            tls_ca=tls_ca,
            tls_cert=tls_cert,
            tls_key=tls_key,
        )
        tls = config.client_tls(self._tls)
        if tls is not None and not username and tls.cert is None:
            raise ManagementError(
                "usage",
                f"the ssl peering to {config.parent} has no login, so it logs in with EXTERNAL, which"
                " needs a client certificate: give the node a tls_cert, or the peering one",
            )
        entry = self._start(config, target)
        if config.durable:
            self._stored().put_attachment(vhost, exchange, config.to_json())
        return _record(entry)

    def delete(self, host: str, port: int, exchange: str, vhost: str = DEFAULT_VHOST) -> None:
        entry = self._entries.get((vhost, exchange))
        config = entry.attachment.config if entry is not None else None
        if entry is None or config is None or (config.host, config.port) != (host, port):
            raise ManagementError("NOT_FOUND", f"exchange '{exchange}' is not federated to {host}:{port}")
        del self._entries[(vhost, exchange)]
        entry.peering.retire()
        entry.attachment.detach()
        if config.durable:
            self._stored().delete_attachment(vhost, exchange)
        self._running().start_soon(entry.link.close, name=f"closing peering of {exchange}")

    # -- helpers ----------------------------------------------------------------------------

    def _exchange(self, vhost: str, name: str) -> Exchange:
        """The local exchange to federate, or why it cannot be."""
        found = self.node.broker.vhosts.get(vhost)
        exchange = found.exchanges.get(name) if found is not None else None
        if exchange is None:
            raise ManagementError(
                "NOT_FOUND", f"no exchange '{name}' in vhost '{vhost}' on node '{self.node.name}'"
            )
        reason = federatable(exchange)
        if reason is not None:
            raise ManagementError("usage", reason)
        return exchange

    def _start(self, config: AttachmentConfig, exchange: Exchange) -> _Entry:
        """Attach and start the peering, after the at-most-once checks."""
        existing = self._entries.get((config.vhost, config.exchange))
        if existing is not None:
            current = existing.attachment.config
            raise ManagementError(
                "duplicate",
                f"exchange '{config.exchange}' is already federated to {current.host}:{current.port} "
                f"({current.type}): an exchange is federated at most once",
            )
        if exchange.federation is not None:
            raise ManagementError(
                "usage",
                f"exchange '{config.exchange}' has dynamic routes: an exchange is federated at most once",
            )
        if config.outbox_policy not in OUTBOX_POLICIES:
            raise ManagementError("usage", f"unknown outbox policy '{config.outbox_policy}'")
        nursery = self._running()
        attachment = Attachment(config, self.node, exchange.vhost)
        attachment.attach(exchange)
        peering = Peering(attachment, self._store)
        tls = config.client_tls(self._tls)
        link = Link(
            config.parent if tls is None else replace(config.parent, tls=tls),
            heartbeat=PEERING_HEARTBEAT,
            connect=self._peering_connect(config),
            name=f"peering of exchange '{config.exchange}' to {config.parent}",
        )
        peering.link_counters = link.counters
        link.attach(peering)
        entry = self._entries[(config.vhost, config.exchange)] = _Entry(attachment, peering, link)
        nursery.start_soon(link.run, name=f"peering of {config.exchange} to {config.parent}")
        return entry

    def _peering_connect(self, config: AttachmentConfig) -> Connect:
        connect = self._connect

        @asynccontextmanager
        async def peering_connect(address: BrokerAddress, **options: Any) -> AsyncIterator[PeerConnection]:
            async with connect(address, vhost=config.parent_vhost, **options) as connection:
                yield connection

        return peering_connect

    def _running(self) -> trio.Nursery:
        if self._nursery is None:
            raise ManagementError("unavailable", "federation is not running on this node")
        return self._nursery

    def _stored(self) -> FederationStore:
        assert self._store is not None, "the store is open while federation runs"
        return self._store
