"""The Qpid ACL file (issue 26 §2): the seed's own examples (seed 001, L1840-1872), each
checked for what it allows AND what it denies, and the parser's errors, all at once."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from gateway.security.acl import AclFileError, AclRules
from gateway.tomlfile import ConfigError

#: The seed's example file (L1842-1863), without its typo line `cl allow all consume queue`
#: (a parse error, tested below), and with the final rule it says to always include. The
#: seed's trailing space after `stocks.rht.#` is kept (\x20): whitespace after tokens is ignored.
SEED_FILE = """\
group admin ted@QPID martin@QPID
group user-consume martin@QPID ted@QPID
group group2 kim@QPID user-consume rob@QPID
group publisher group2 \\
tom@QPID andrew@QPID debbie@QPID

acl allow carlt@QPID create exchange name=carl.*
acl deny rob@QPID create queue
acl allow guest@QPID bind exchange name=amq.topic routingkey=stocks.rht.#\x20
acl allow user-consume create queue name=tmp.*

acl allow publisher publish all durable=false
acl allow publisher create queue name=RequestQueue
acl allow consumer consume queue durable=true
acl allow fred@QPID create all
acl allow bob@QPID all queue
acl allow admin all
acl allow all bind exchange

acl deny all all
"""

#: The seed's "do not allow guest to access and log some QMF management methods" (L1866-1872),
#: then everything else allowed, to show what the three rules leave alone.
ALL_USERS_FILE = """\
group allUsers guest@QPID
acl deny-log allUsers create link
acl deny-log allUsers access method name=connect
acl deny-log allUsers access method name=echo
acl allow all all
"""


def rules(tmp_path: Path, text: str) -> AclRules:
    path = tmp_path / "policy.acl"
    path.write_text(text)
    return AclRules.load(path)


def errors(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "policy.acl"
    path.write_text(text)
    with pytest.raises(AclFileError) as raised:
        AclRules.load(path)
    assert isinstance(raised.value, ConfigError)  # the CLI prints it as it prints config errors
    return [line.removeprefix(f"{path}:") for line in raised.value.errors]


@pytest.fixture
def seed(tmp_path: Path) -> AclRules:
    return rules(tmp_path, SEED_FILE)


# -- each example on its own: what it allows, and what it does not ---------------------------


def test_carlt_may_create_exchanges_named_carl_dot_anything(tmp_path: Path) -> None:
    acl = rules(tmp_path, "acl allow carlt@QPID create exchange name=carl.*\n")
    assert acl.allows("carlt", "create", "exchange", "carl.prices")
    assert acl.allows("carlt@QPID", "create", "exchange", "carl.")
    assert acl.allows("carlt", "create", "exchange", "carl.x", {"durable": "true", "type": "topic"})
    assert not acl.allows("carlt", "create", "exchange", "carlx")
    assert not acl.allows("carlt", "create", "exchange", "prices.carl.x")
    assert not acl.allows("carlt", "create", "queue", "carl.q")
    assert not acl.allows("carlt", "delete", "exchange", "carl.prices")
    assert not acl.allows("carl", "create", "exchange", "carl.prices")
    assert not acl.allows("carlt@OTHER", "create", "exchange", "carl.prices")


def test_guest_may_bind_amq_topic_with_keys_under_stocks_rht(tmp_path: Path) -> None:
    acl = rules(tmp_path, "acl allow guest@QPID bind exchange name=amq.topic routingkey=stocks.rht.#\n")

    def bind(key: str, exchange: str = "amq.topic", user: str = "guest") -> bool:
        return acl.allows(user, "bind", "exchange", exchange, {"routingkey": key, "queuename": "q"})

    assert bind("stocks.rht.#") and bind("stocks.rht") and bind("stocks.rht.nyse.open")
    assert not bind("stocks.ibm.nyse")
    assert not bind("stocks.#")  # broader than the rule's key
    assert not bind("stocks.rht.nyse", exchange="amq.direct")
    assert not bind("stocks.rht.nyse", user="carlt")
    assert not acl.allows("guest", "bind", "exchange", "amq.topic")  # no key given: not this rule
    assert not acl.allows("guest", "unbind", "exchange", "amq.topic", {"routingkey": "stocks.rht.x"})


def test_a_deny_before_an_allow_wins(seed: AclRules) -> None:
    """`acl deny rob@QPID create queue` comes before the publisher group's RequestQueue rule,
    and rob is a publisher (through group2): first match wins."""
    assert not seed.allows("rob", "create", "queue", "RequestQueue")
    assert seed.allows("kim", "create", "queue", "RequestQueue")  # kim, also in group2
    assert not seed.allows("kim", "create", "queue", "RequestQueue2")
    assert seed.allows("rob", "publish", "exchange", "amq.direct", {"durable": "false"})


def test_user_consume_may_create_tmp_queues(seed: AclRules) -> None:
    assert seed.allows("martin", "create", "queue", "tmp.1")
    assert not seed.allows("kim", "create", "queue", "tmp.1")  # group2, not user-consume
    assert not seed.allows("andrew", "create", "queue", "tmp.1")


def test_publishers_publish_only_to_non_durable_objects(seed: AclRules) -> None:
    """publisher = group2 (kim, user-consume's martin and ted, rob) + tom, andrew, debbie."""
    for user in ("tom", "andrew", "debbie", "kim", "rob", "martin"):
        assert seed.allows(user, "publish", "exchange", "amq.direct", {"durable": "false", "routingkey": "k"})
    assert not seed.allows("tom", "publish", "exchange", "durable.x", {"durable": "true", "routingkey": "k"})
    assert not seed.allows("tom", "publish", "exchange", "amq.direct", {"routingkey": "k"})
    assert not seed.allows("carlt", "publish", "exchange", "amq.direct", {"durable": "false"})


def test_an_undefined_group_name_is_a_user(seed: AclRules) -> None:
    """`consumer` is no group: the rule is for the user called consumer (seed L1826-1827)."""
    assert seed.allows("consumer", "consume", "queue", "orders", {"durable": "true"})
    assert not seed.allows("consumer", "consume", "queue", "orders", {"durable": "false"})
    assert not seed.allows("tom", "consume", "queue", "orders", {"durable": "true"})


def test_all_as_object_and_as_action(seed: AclRules) -> None:
    for obj in ("queue", "exchange", "link"):
        assert seed.allows("fred", "create", obj, "anything")
    assert not seed.allows("fred", "delete", "queue", "anything")
    for action in ("create", "consume", "delete", "purge"):
        assert seed.allows("bob", action, "queue", "anything")
    assert not seed.allows("bob", "create", "exchange", "anything")


def test_admin_may_do_everything_and_all_may_bind(seed: AclRules) -> None:
    assert seed.allows("ted", "delete", "exchange", "amq.topic")
    assert seed.allows("martin", "access", "method", "links.add")
    assert seed.allows("nobody", "bind", "exchange", "x", {"routingkey": "k", "queuename": "q"})
    assert not seed.allows("nobody", "unbind", "exchange", "x", {"routingkey": "k", "queuename": "q"})
    assert not seed.allows("nobody", "access", "method", "node.info")  # the final deny


def test_all_users_may_not_create_links_or_call_connect_and_it_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    acl = rules(tmp_path, ALL_USERS_FILE)
    caplog.set_level(logging.INFO, "gateway.security.acl")
    assert not acl.allows("guest", "create", "link", "127.0.0.1:5673")
    assert not acl.allows("guest", "access", "method", "connect")
    assert not acl.allows("guest@QPID", "access", "method", "echo")
    assert acl.allows("guest", "access", "method", "node.info")
    assert acl.allows("ted", "create", "link", "127.0.0.1:5673")
    path = tmp_path / "policy.acl"
    assert [record.getMessage() for record in caplog.records] == [
        f"acl denied: user 'guest' create link '127.0.0.1:5673' (rule {path}:2)",
        f"acl denied: user 'guest' access method 'connect' (rule {path}:3)",
        f"acl denied: user 'guest@QPID' access method 'echo' (rule {path}:4)",
    ]
    assert {record.levelname for record in caplog.records} == {"WARNING"}


def test_a_logged_decision_escapes_what_the_client_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    acl = rules(tmp_path, "acl allow-log all create queue\n")
    caplog.set_level(logging.INFO, "gateway.security.acl")
    assert acl.allows("guest", "create", "queue", "q\nFAKE 2026 ERROR forged", {"durable": "tr\x1bue"})
    (message,) = [record.getMessage() for record in caplog.records]
    assert "\n" not in message and "\x1b" not in message
    assert "'q\\nFAKE 2026 ERROR forged' durable='tr\\x1bue'" in message


def test_the_file_ends_at_deny_all_all_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    acl = rules(tmp_path, "acl allow ted create queue\nacl deny all all\n# comment\nacl allow all all\n")
    assert acl.allows("ted", "create", "queue", "q")
    assert not acl.allows("kim", "create", "queue", "q")
    assert acl.warnings == (
        f"{tmp_path / 'policy.acl'}:2: 'acl deny all all' ends the rules; the 1 line(s) after it"
        " (from line 4) are ignored",
    )
    assert acl.warnings[0] in caplog.text


def test_nothing_is_allowed_without_a_rule(tmp_path: Path) -> None:
    """The implicit final `acl deny all all`."""
    acl = rules(tmp_path, "# only comments\n\n   \n")
    assert not acl.allows("guest", "consume", "queue", "q")


def test_a_plain_rule_name_and_a_realm_name_are_one_user(tmp_path: Path) -> None:
    acl = rules(
        tmp_path,
        "acl allow ted create queue\nacl allow kim@QPID create queue\nacl allow al@EXAMPLE.COM all\n",
    )
    assert acl.allows("ted@QPID", "create", "queue", "q") and acl.allows("ted", "create", "queue", "q")
    assert acl.allows("kim", "create", "queue", "q")
    assert acl.allows("al@EXAMPLE.COM", "create", "queue", "q")
    assert not acl.allows("al", "create", "queue", "q")


# -- the parser: every error at once, as file:line: what -------------------------------------


def test_every_error_is_reported_with_its_line(tmp_path: Path) -> None:
    text = """\
# the seed's parse-error cases, one per line
acl allow all CREATE queue
acl allow all create queue \\
name=x
  acl allow all consume queue
group bad$group ted
acl allow bad$user consume queue
cl allow all consume queue
acl permit all consume queue
ACL allow all consume queue
acl allow all create link durable=true
acl allow all consume queue routingkey=a.b
acl allow all create queue colour=red
acl allow all create queue durable=yes
acl allow all create queue name=a*b
acl allow late consume queue
group late ted
acl allow all create widget
acl allow all create queue name=a name=b
acl allow all create
group \\
publisher ted
acl allow all all queue name=ok
"""
    assert errors(tmp_path, text) == [
        "2: unknown action 'CREATE' (consume, publish, create, access, bind, unbind, delete, purge,"
        " update or all); tokens are case-sensitive",
        "3: an acl rule must be on one line ('\\' continues group lists only)",
        "5: 'acl' must start the line (no leading whitespace)",
        "6: bad group name 'bad$group' (letters, digits, '-' and '_'; not 'all')",
        "7: bad user name 'bad$user' (letters, digits, '-', '_', '.', one '@REALM')",
        "8: a line must start with 'group' or 'acl', not 'cl'",
        "9: bad permission 'permit' (allow, allow-log, deny, deny-log)",
        "10: a line must start with 'group' or 'acl', not 'ACL' (tokens are case-sensitive)",
        "11: property 'durable' does not apply to 'create link'",
        "12: property 'routingkey' does not apply to 'consume queue'",
        "13: unknown property 'colour' (name, alternate, autodelete, durable, exclusive, passive,"
        " queuename, routingkey, schemaclass, schemapackage, type)",
        "14: property 'durable' is true or false, not 'yes'",
        "15: 'name=a*b': '*' is a wildcard only at the end of a value",
        "17: group 'late' is defined after line 16 named it as a user: define groups before the"
        " lines that use them",
        "18: unknown object 'widget' (queue, exchange, broker, link, method or all)",
        "19: property 'name' is given twice",
        "21: '\\' must come after the group's name",
    ]


def test_a_continued_group_list_and_its_errors(tmp_path: Path) -> None:
    acl = rules(tmp_path, "group g a \\\n   b \\\n c\nacl allow g consume queue\n")
    assert all(acl.allows(user, "consume", "queue", "q") for user in "abc")
    assert errors(tmp_path, "group g a \\\n\nacl allow g consume queue\n") == [
        "2: an empty line cannot continue the line before it",
    ]
    assert errors(tmp_path, "group g a \\\n") == ["1: the last line ends in '\\' with no line after it"]


def test_the_seeds_typo_line_is_an_error(tmp_path: Path) -> None:
    text = SEED_FILE.replace("acl allow admin all\n", "acl allow admin all\ncl allow all consume queue \n")
    assert errors(tmp_path, text) == ["18: a line must start with 'group' or 'acl', not 'cl'"]


def test_a_missing_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "nosuch.acl"
    with pytest.raises(AclFileError) as raised:
        AclRules.load(path)
    assert str(raised.value) == f"{path}: cannot read the ACL file: No such file or directory"


def test_docs_security_md_shows_the_files_tested_here() -> None:
    """The page's two example files are this module's, so what it says of them is tested."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    section = page[page.index("## The ACL file") :]
    blocks = re.findall(r"```\n(.*?)```", section, re.S)
    assert blocks[1] == SEED_FILE.replace("#\x20\n", "#\n")
    assert blocks[2] == ALL_USERS_FILE


def test_errors_show_control_characters_escaped_and_count_lines_as_editors_do(tmp_path: Path) -> None:
    """Form feeds and vertical tabs separate tokens but end no line (str.splitlines would)."""
    text = "acl allow all create queue\fname=x\vdurable=true\nacl al\x1bow all all\n"
    assert errors(tmp_path, text) == ["2: bad permission 'al\\x1bow' (allow, allow-log, deny, deny-log)"]
