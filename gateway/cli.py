"""`amq-gateway`: run a node (`serve`), a whole topology on this host (`up`, and `clean` to
remove what it keeps), manage a users file (`passwd`), and make demo TLS certificates (`certs`).

Flags override the TOML node config; every bad input ends with one line on stderr naming what
was wrong and exit status 2 (usage) or 1 (runtime), never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

import trio

from gateway import __version__, collector
from gateway.certs import DEFAULT_DAYS, CertsError, run_certs
from gateway.config import NodeConfig, load_node_config
from gateway.logformat import configure_logging
from gateway.memoryalarm import one_heap
from gateway.names import DEFAULT_PORT, DEFAULT_TLS_PORT
from gateway.node import Node
from gateway.security import TAGS, UsersDB, UsersFileError, run_passwd
from gateway.security.password_input import HELP as PASSWORD_HELP
from gateway.security.password_input import PasswordUnavailable, add_password_options, given_password
from gateway.server import Limits, ListenError
from gateway.store import Store, StoreError
from gateway.tls import LOGIN_FIELDS, VERIFY_MODES, TlsError
from gateway.tomlfile import ConfigError

LOGGER = logging.getLogger("gateway")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="amq-gateway",
        description="An AMQP 0-9-1 broker node and federation gateway.",
    )
    parser.add_argument("--version", action="version", version=f"amq-gateway {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run one broker node until SIGINT/SIGTERM")
    serve.add_argument("--config", type=Path, metavar="FILE", help="TOML node config")
    serve.add_argument(
        "--host", metavar="H", help="address to listen on (default: all interfaces, also written '*')"
    )
    serve.add_argument("--port", type=int, metavar="P", help=f"AMQP port (default {DEFAULT_PORT})")
    storage = serve.add_mutually_exclusive_group()
    storage.add_argument("--data-dir", metavar="DIR", help="default ./var/<name>")
    storage.add_argument("--memory", action="store_true", default=None, help="keep everything in RAM")
    serve.add_argument("--name", metavar="NAME", help="node name (default: the host name)")
    serve.add_argument("--users", metavar="FILE", help="users file (default: guest/guest, loopback only)")
    serve.add_argument(
        "--acl-file",
        metavar="FILE",
        help="Qpid ACL file: who may do what (the node does not start if it is missing or has errors;"
        " SIGHUP or `amq-config reload-acl` reloads it)",
    )
    serve.add_argument(
        "--log-level", metavar="L", choices=["debug", "info", "warning", "error"], help="default info"
    )
    serve.add_argument(
        "--disk-free-limit",
        metavar="SIZE",
        help="hold publishers while the data dir's filesystem has less free (default 50MB; e.g. 1GB, 512MiB)",
    )
    serve.add_argument(
        "--memory-high-watermark",
        metavar="W",
        help="hold publishers while the node uses more memory: a fraction of the memory available"
        " (default 0.4) or a size (e.g. 300MB)",
    )
    serve.add_argument(
        "--queue-memory-budget",
        metavar="SIZE",
        help="bytes of ready message bodies each queue keeps in memory; beyond, bodies go to disk"
        " (default 16MiB)",
    )
    serve.add_argument(
        "--max-message-size",
        metavar="SIZE",
        help="largest message body accepted; a larger one closes its channel with 406 before any of"
        " it is read (default 128MiB, at most 512MiB)",
    )
    serve.add_argument(
        "--max-connections",
        metavar="N",
        help="connections the node lets open at once; more are refused with 530 at Connection.Open"
        " (default: no limit)",
    )
    tls = serve.add_argument_group("TLS (see docs/security.md)")
    tls.add_argument(
        "--tls-port",
        metavar="P",
        help=f"AMQP over TLS port (default {DEFAULT_TLS_PORT} once --tls-cert is given)",
    )
    tls.add_argument("--tls-cert", metavar="FILE", help="the node's certificate (PEM, with its chain)")
    tls.add_argument("--tls-key", metavar="FILE", help="the certificate's private key (PEM)")
    tls.add_argument(
        "--tls-ca",
        metavar="FILE",
        help="the CA certificates client certificates (only these) and link peers are checked against",
    )
    tls.add_argument(
        "--tls-verify",
        choices=VERIFY_MODES,
        help="client certificates: none (not asked for), peer (checked when sent; the default),"
        " require (a client without a valid one is refused; needs --tls-ca)",
    )
    tls.add_argument(
        "--tls-only", action="store_true", default=None, help="close the plain AMQP port (Qpid's sslOnly)"
    )
    tls.add_argument(
        "--tls-login-field",
        choices=LOGIN_FIELDS,
        help="what names the user of an EXTERNAL login: the certificate subject's cn (default) or whole dn",
    )
    federation = serve.add_argument_group("federation (OpenAMQ's; see docs/federation.md)")
    federation.add_argument(
        "--attach",
        metavar="HOST[:PORT]",
        help="parent node: federate amq.service (service), amq.data and amq.dataex (fanout) to it",
    )
    federation.add_argument(
        "--attach-vhost",
        "--attach_vhost",
        dest="attach_vhost",
        metavar="VHOST",
        help="vhost on the parent (default /)",
    )
    federation.add_argument(
        "--attach-login",
        "--attach_login",
        dest="attach_login",
        metavar="USER",
        help="login on the parent (default peering); its password is [credentials.USER] in the users file",
    )
    federation.add_argument(
        "--attach-all",
        "--attach_all",
        dest="attach_all",
        metavar="PATTERN",
        help="also federate every exchange matching PATTERN (* any characters, ? one) to the --attach parent",
    )

    passwd = commands.add_parser(
        "passwd",
        help="add a user to a users file, or change a password (and vhosts or tags)",
        description="Add a user to a users file, or change its password (and vhosts or tags). "
        + PASSWORD_HELP
        + " The prompt asks twice.",
    )
    passwd.add_argument("users_file", type=Path, metavar="FILE")
    passwd.add_argument("username", metavar="USER")
    add_password_options(passwd)
    passwd.add_argument(
        "--vhost",
        action="append",
        dest="vhosts",
        metavar="VHOST",
        help="vhost the user may open (repeatable; default: all)",
    )
    tags = passwd.add_mutually_exclusive_group()
    tags.add_argument(
        "--tag",
        action="append",
        dest="tags",
        choices=TAGS,
        help="the user's tags, replacing the old ones (repeatable): administrator may manage the node, "
        "monitoring may read what management lists, federation is the login of the peer node of that name",
    )
    tags.add_argument("--no-tags", dest="tags", action="store_const", const=[], help="remove the user's tags")

    up = commands.add_parser(
        "up",
        help="run every node of a topology file that lives on this host, apply the file, show the map",
        description="Start the topology's nodes on this host (data and logs in VAR/<node>), apply the "
        "file, print the route map and link states, and run until Ctrl-C. See docs/topology.md.",
    )
    up.add_argument("topology_file", type=Path, metavar="FILE", help="topology file (TOML)")
    up.add_argument("--var", type=Path, default=Path("var"), metavar="DIR", help="default ./var")
    up.add_argument(
        "--traffic",
        type=int,
        default=0,
        metavar="N",
        help="each [[publishers]] entry sends N messages; show where they arrived against where they should",
    )
    up.add_argument("--exit", action="store_true", help="stop the nodes once it is all shown")
    up.add_argument(
        "--no-restart",
        dest="restart",
        action="store_false",
        help="report a node that ends but do not start it again (default: restart it after 2 s, doubling to 64 s)",
    )
    up.add_argument(
        "--fresh", action="store_true", help="remove the nodes' data and logs first (as `amq-gateway clean`)"
    )

    certs = commands.add_parser(
        "certs",
        help="make a CA and a TLS certificate per node in DIR, for a demo or a test (runs openssl)",
        description="Make DIR/ca.pem (reused if DIR has one) and DIR/<node>.pem and .key for each node: "
        "subject CN=<node> (its EXTERNAL login), valid for <node>, localhost, 127.0.0.1 and ::1. "
        "See docs/security.md.",
    )
    certs.add_argument("directory", type=Path, metavar="DIR")
    certs.add_argument(
        "--nodes",
        default="",
        metavar="A,B,...",
        help="comma-separated node (or user) names to make certificates for",
    )
    certs.add_argument(
        "--users",
        type=Path,
        metavar="FILE",
        help="also add each name to this users file (random passwords: they log in with their certificates)",
    )
    certs.add_argument(
        "--days", type=int, default=DEFAULT_DAYS, metavar="N", help=f"validity (default {DEFAULT_DAYS})"
    )

    clean = commands.add_parser(
        "clean",
        help="remove the data and logs `up` keeps for a topology's nodes on this host",
        description="Remove VAR/<node> for every node of the file on this host: stores (with the "
        "messages left in them) and logs. A node still running is never touched.",
    )
    clean.add_argument("topology_file", type=Path, metavar="FILE", help="topology file (TOML)")
    clean.add_argument("--var", type=Path, default=Path("var"), metavar="DIR", help="default ./var")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "serve":
            return serve(args)
        if args.command == "certs":
            if args.days < 1:
                build_parser().error("--days: a certificate must be valid for at least 1 day")
            names = [name for name in args.nodes.split(",") if name]
            return run_certs(args.directory, names, args.days, args.users)
        if args.command in ("up", "clean"):
            from topology.up import Options, clean, up  # only these need the planner and networkx

            if args.command == "clean":
                return clean(args.topology_file, args.var)
            options = Options(args.var, args.traffic, not args.exit, args.restart, args.fresh)
            return up(args.topology_file, options)
        password = given_password(args)
        return run_passwd(args.users_file, args.username, password, args.vhosts, args.tags)
    except (ConfigError, UsersFileError, StoreError, PasswordUnavailable, TlsError, CertsError) as exc:
        for line in str(exc).splitlines():  # an ACL file's errors: one line each
            print(f"amq-gateway: error: {line}", file=sys.stderr)
        return 1


def node_config(args: argparse.Namespace) -> NodeConfig:
    config = load_node_config(args.config) if args.config else NodeConfig()
    return config.with_overrides(
        host=args.host,
        port=args.port,
        data_dir=args.data_dir,
        memory=args.memory,
        name=args.name,
        users=args.users,
        acl_file=args.acl_file,
        log_level=args.log_level,
        disk_free_limit=args.disk_free_limit,
        memory_high_watermark=args.memory_high_watermark,
        queue_memory_budget=args.queue_memory_budget,
        max_message_size=args.max_message_size,
        max_connections=args.max_connections,
        tls_port=args.tls_port,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_ca=args.tls_ca,
        tls_verify=args.tls_verify,
        tls_only=args.tls_only,
        tls_login_field=args.tls_login_field,
        attach=args.attach,
        attach_vhost=args.attach_vhost,
        attach_login=args.attach_login,
        attach_all=args.attach_all,
    )


def serve(args: argparse.Namespace) -> int:
    config = node_config(args)
    configure_logging(config.log_level)
    collector.install()
    one_heap()
    users = UsersDB.load(config.users_file) if config.users_file else UsersDB.default()
    federation = config.federation.with_credentials(users.credentials)
    federation.rules()  # every federation setting is checked before anything starts
    store = None if config.store_dir is None else Store.open(config.store_dir)
    LOGGER.info(
        "node %r keeps its durable state %s",
        config.name,
        "in memory only (--memory)" if store is None else f"in {store.path}",
    )
    node: Node | None = None
    try:
        node = Node(
            name=config.name,
            users=users,
            acl_file=config.acl_file,
            store=store,
            limits=Limits(config.heartbeat, config.frame_max, config.channel_max, config.max_message_size),
            federation=federation,
            disk_free_limit=config.disk_free_limit,
            memory_high_watermark=config.memory_high_watermark,
            queue_memory_budget=config.queue_memory_budget,
            queue_defaults=config.queue_defaults,
            max_connections=config.max_connections,
            vhost_limits=config.vhost_limits,
            tls=config.tls,
        )
        for vhost in config.vhosts:
            node.broker.add_vhost(vhost)
        failures: list[str] = []
        try:
            trio.run(_serve_until_signalled, node, config.host, config.port)
        except* ListenError as group:
            failures.extend(str(exc) for exc in group.exceptions)
        for failure in failures:
            print(f"amq-gateway: error: {failure}", file=sys.stderr)
        if failures:
            return 1
    finally:
        if node is not None:
            node.spill.close()
        if store is not None:
            store.close()
    LOGGER.info("node %r stopped", config.name)
    return 0


async def _serve_until_signalled(node: Node, host: str | None, port: int) -> None:
    """Serve until SIGINT or SIGTERM; with an ACL file, SIGHUP reloads it (without one, SIGHUP
    keeps its default: the node ends)."""
    reload = (signal.SIGHUP,) if node.acl_file is not None else ()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, *reload) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(node.serve, host, port)
            async for signum in signals:
                LOGGER.info("received %s", signal.Signals(signum).name)
                if signum != signal.SIGHUP:
                    break
                node.reload_acl_logged()
            await node.shutdown()


if __name__ == "__main__":
    sys.exit(main())


def amq_route(argv: list[str] | None = None) -> int:
    """The amq-route console script: federation's command line with the planner's `topology`
    commands mounted (composed here so that federation never imports topology)."""
    from federation.cli.route_cli import Mount, main
    from topology.cli import add_commands

    topology = Mount("topology", "topology files: check, map, plan and apply a deployment", add_commands)
    return main(argv, mounts=[topology])


def amq_sim(argv: list[str] | None = None) -> int:
    """The amq-sim console script: the simulator's command line with the live sides of
    `validate` (topology.validate, which runs nodes) and `capture` (topology.capture, which
    reads them) handed in, so that simulations never load trio."""
    from simulations.cli import main
    from topology.capture import capture
    from topology.validate import validate

    return main(argv, live=validate, capture=capture)
