"""The Qpid ACL file's grammar (seed 001 §8.2): lines in, rules out, every mistake at once.

```
group <group-name> <user-or-group> ... [\\]        # a trailing \\ continues the member list
acl <permission> {<user>|<group>|all} {<action>|all} [<object>|all] [<property>=<value> ...]
```

What the seed says, and how it reads here:

- `#` at the start of a line is a comment (trailing comments do not exist: `#` is a topic
  wildcard in routing keys); blank lines are ignored; tokens are case-sensitive.
- `group` and `acl` must start the line; leading whitespace is an error, as is any other
  first word (the seed's own `cl allow all consume queue`).
- A trailing `\\` continues a group's member list; "all ACL rules are limited to a single
  line", so an `acl` line ending in `\\` is an error.
- Names use `[A-Za-z0-9_-]`; a user is such a name with an optional `@REALM` (the seed's
  `ted@QPID`; `.` is accepted too, for realms like `EXAMPLE.COM`). A group must be defined
  before the lines that use it: a name that is not a group (yet) is a user, so a group
  defined after a rule that names it is reported, since that rule would silently name a user.
- Property values are matched literally, with `*` at the end as a wildcard (`name=carl.*`),
  except `routingkey`, which is a topic binding key (`stocks.rht.#`), as Qpid matches it.
  Boolean properties take `true` or `false`. A property is accepted only on the objects
  (and, for `routingkey` and `queuename`, the actions) it describes.
- The first matching rule decides; the file ends with an implicit `acl deny all all`, and an
  explicit one (or `deny-log all all`) ends the file: the lines after it are ignored, with a
  warning.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from gateway.routing.matchers import matcher_for
from gateway.tomlfile import ConfigError

PERMISSIONS = ("allow", "allow-log", "deny", "deny-log")
ACTIONS = ("consume", "publish", "create", "access", "bind", "unbind", "delete", "purge", "update")
OBJECTS = ("queue", "exchange", "broker", "link", "method")
ALL = "all"

#: Boolean properties: `true` or `false`, no wildcard.
BOOLEAN_PROPERTIES = frozenset({"durable", "passive", "autodelete", "exclusive"})
#: Matched as a topic binding key, `*` one word and `#` zero or more.
TOPIC_PROPERTIES = frozenset({"routingkey"})
_QUEUE_ATTRIBUTES = frozenset({"durable", "passive", "autodelete", "exclusive", "alternate"})
_EXCHANGE_ATTRIBUTES = frozenset({"durable", "passive", "autodelete", "type", "alternate"})
_METHOD_ATTRIBUTES = frozenset({"schemapackage", "schemaclass"})
_BINDING = frozenset({"queuename", "routingkey"})

#: object -> action -> the properties (besides `name`, always valid) a rule may test. The
#: object's own attributes go with every action on it; a binding's queue and key only with
#: bind/unbind, a message's key only with publish. Pairs not listed never happen.
VALID: dict[str, dict[str, frozenset[str]]] = {
    "queue": dict.fromkeys(("create", "access", "consume", "delete", "purge", "update"), _QUEUE_ATTRIBUTES),
    "exchange": {
        **dict.fromkeys(("create", "access", "delete", "update"), _EXCHANGE_ATTRIBUTES),
        "bind": _EXCHANGE_ATTRIBUTES | _BINDING,
        "unbind": _EXCHANGE_ATTRIBUTES | _BINDING,
        "publish": _EXCHANGE_ATTRIBUTES | {"routingkey"},
    },
    "broker": dict.fromkeys(("access", "update"), frozenset()),
    "link": {"create": frozenset()},
    "method": {"access": _METHOD_ATTRIBUTES},
}
PROPERTIES = (
    "name",
    *sorted(set().union(*(props for actions in VALID.values() for props in actions.values()))),
)

#: The realm of this node's users: a login `carlt` is the seed's `carlt@QPID` (Qpid's default
#: --realm), so a rule may name either form.
NODE_REALM = "QPID"

_NAME = re.compile(r"[A-Za-z0-9_-]+")
_USER = re.compile(r"[A-Za-z0-9_.-]+(@[A-Za-z0-9_.-]+)?")
_CONTINUATION = "\\"
#: Control characters a token may hold, escaped in messages (they reach logs and terminals).
_VISIBLE = {code: f"\\x{code:02x}" for code in [*range(32), 127]}


class AclFileError(ConfigError):
    """An ACL file that cannot be used: `errors` holds every problem as `file:line: what`."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


def canonical_user(name: str) -> str:
    """A user name with its realm: `carlt` and `carlt@QPID` are one user of this node."""
    return name if "@" in name else f"{name}@{NODE_REALM}"


ValueMatch = Callable[[str], bool]


@dataclass(frozen=True)
class Rule:
    """One `acl` line: who (None: all), what (None: all) and the properties it tests."""

    line: int
    permission: str
    users: frozenset[str] | None
    action: str | None
    obj: str | None
    properties: tuple[tuple[str, ValueMatch], ...] = field(compare=False)

    @property
    def allow(self) -> bool:
        return self.permission.startswith("allow")

    @property
    def log(self) -> bool:
        return self.permission.endswith("-log")

    def applies_to(self, user: str, action: str, obj: str) -> bool:
        return (
            (self.users is None or user in self.users)
            and self.action in (None, action)
            and self.obj in (None, obj)
        )


@dataclass(frozen=True)
class Parsed:
    rules: tuple[Rule, ...]
    warnings: tuple[str, ...]


def read(path: Path) -> Parsed:
    """Parse the file at `path`; AclFileError lists every problem (an unreadable file too)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise AclFileError([f"{path}: cannot read the ACL file: {reason}"]) from None
    return parse(text, str(path))


def parse(text: str, source: str) -> Parsed:
    """Parse ACL text; `source` names it in messages (`source:line: what`)."""
    # Not splitlines: a form feed or \x1c separates tokens, it ends no line.
    return _Parser(source).run(text.removesuffix("\n").split("\n"))


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.groups: dict[str, frozenset[str]] = {}
        #: Names taken as users so far, and the first line that did, to catch a late group.
        self.as_user: dict[str, int] = {}
        self.rules: list[Rule] = []

    def error(self, line: int, what: str) -> None:
        self.errors.append(f"{self.source}:{line}: {what.translate(_VISIBLE)}")

    def run(self, lines: list[str]) -> Parsed:
        for number, tokens in self._logical_lines(lines):
            if tokens[0] == "group":
                self._group(number, tokens[1:])
            elif tokens[0] == "acl":
                rule = self._rule(number, tokens[1:])
                if rule is not None:
                    self.rules.append(rule)
                    if _ends_file(rule):
                        self._ignore_after(number, rule, lines)
                        break
            else:
                hint = " (tokens are case-sensitive)" if tokens[0].lower() in ("group", "acl") else ""
                self.error(number, f"a line must start with 'group' or 'acl', not '{tokens[0]}'{hint}")
        if self.errors:
            raise AclFileError(self.errors)
        return Parsed(tuple(self.rules), tuple(self.warnings))

    def _ignore_after(self, number: int, rule: Rule, lines: list[str]) -> None:
        """The seed: below an explicit `acl deny all all`, all lines are ignored (say so)."""
        ignored = [
            n for n, line in enumerate(lines[number:], number + 1) if line.strip()[:1] not in ("", "#")
        ]
        if ignored:
            self.warnings.append(
                f"{self.source}:{number}: 'acl {rule.permission} all all' ends the rules;"
                f" the {len(ignored)} line(s) after it (from line {ignored[0]}) are ignored"
            )

    def _logical_lines(self, lines: list[str]) -> Iterable[tuple[int, list[str]]]:
        """(first line number, tokens) of each definition, `\\` continuations joined; a line
        that may not be continued is one error, with the lines that continue it."""
        pending: tuple[int, int, list[str]] | None = None  # first line, its word count, tokens
        for number, line in enumerate(lines, 1):
            text = line.rstrip()
            continued = text.endswith(_CONTINUATION)
            words = text.removesuffix(_CONTINUATION).split()
            if pending is not None:
                if not words:
                    self.error(number, "an empty line cannot continue the line before it")
                pending[2].extend(words)
            elif not text or text.lstrip().startswith("#"):
                continue
            elif line[0].isspace():
                self.error(number, f"'{words[0]}' must start the line (no leading whitespace)")
                continue
            else:
                pending = (number, len(words), words)
            if continued:
                continue
            first, count, tokens = pending
            pending = None
            if self._whole(first, count, tokens, joined=first != number):
                yield first, tokens
        if pending is not None:
            self.error(pending[0], "the last line ends in '\\' with no line after it")

    def _whole(self, first: int, count: int, tokens: list[str], joined: bool) -> bool:
        """Whether a definition may have been continued as it was (group lists only)."""
        if joined and tokens[:1] != ["group"]:
            self.error(first, "an acl rule must be on one line ('\\' continues group lists only)")
            return False
        if joined and count < 2:
            self.error(first, "'\\' must come after the group's name")
            return False
        return bool(tokens)

    def _group(self, number: int, tokens: list[str]) -> None:
        if len(tokens) < 2:
            self.error(number, "a group needs a name and at least one member")
            return
        name, members = tokens[0], tokens[1:]
        if not _NAME.fullmatch(name) or name == ALL:
            self.error(number, f"bad group name '{name}' (letters, digits, '-' and '_'; not 'all')")
            return
        if name in self.groups:
            self.error(number, f"group '{name}' is defined twice")
            return
        if name in self.as_user:
            self.error(
                number,
                f"group '{name}' is defined after line {self.as_user[name]} named it as a user:"
                " define groups before the lines that use them",
            )
        users = self._users(number, members)
        if users is not None:
            self.groups[name] = users

    def _users(self, number: int, names: list[str]) -> frozenset[str] | None:
        """The users that `names` (users and defined groups) stand for; None after an error."""
        users: set[str] = set()
        ok = True
        for name in names:
            if name in self.groups:
                users |= self.groups[name]
            elif name == ALL:
                self.error(number, "'all' is not a group member (write the rule for all instead)")
                ok = False
            elif not _USER.fullmatch(name):
                self.error(number, f"bad user name '{name}' (letters, digits, '-', '_', '.', one '@REALM')")
                ok = False
            else:
                self.as_user.setdefault(name, number)
                users.add(canonical_user(name))
        return frozenset(users) if ok else None

    def _rule(self, number: int, tokens: list[str]) -> Rule | None:
        if len(tokens) < 3:
            self.error(number, "an acl rule needs a permission, a user or group, and an action")
            return None
        permission, who, action = tokens[:3]
        obj = tokens[3] if len(tokens) > 3 else None
        errors = len(self.errors)
        if permission not in PERMISSIONS:
            self.error(
                number,
                f"bad permission '{permission}' ({_choices(PERMISSIONS)}){_case(permission, PERMISSIONS)}",
            )
        users = None if who == ALL else self._users(number, [who])
        if action != ALL and action not in ACTIONS:
            self.error(
                number, f"unknown action '{action}' ({_choices(ACTIONS)} or all){_case(action, ACTIONS)}"
            )
        if obj is not None and "=" in obj:
            self.error(number, f"'{obj}': a property comes after the object (or 'all')")
        elif obj is not None and obj != ALL and obj not in OBJECTS:
            self.error(number, f"unknown object '{obj}' ({_choices(OBJECTS)} or all){_case(obj, OBJECTS)}")
        if len(self.errors) > errors:
            return None
        verb = None if action == ALL else action
        kind = None if obj in (None, ALL) else obj
        properties = self._properties(number, verb, kind, tokens[4:])
        if properties is None:
            return None
        return Rule(number, permission, users, verb, kind, properties)

    def _properties(
        self, number: int, action: str | None, obj: str | None, tokens: list[str]
    ) -> tuple[tuple[str, ValueMatch], ...] | None:
        matches: dict[str, ValueMatch] = {}
        ok = True
        valid = _valid_properties(action, obj)
        for token in tokens:
            prop, equals, value = token.partition("=")
            problem = None
            if not equals or not value:
                problem = f"'{token}' is not property=value"
            elif prop not in PROPERTIES:
                problem = f"unknown property '{prop}' ({_choices(PROPERTIES)}){_case(prop, PROPERTIES)}"
            elif prop in matches:
                problem = f"property '{prop}' is given twice"
            elif prop not in valid:
                problem = f"property '{prop}' does not apply to {_describe(action, obj)}"
            else:
                match, problem = _value_match(prop, value)
                if match is not None:
                    matches[prop] = match
            if problem is not None:
                self.error(number, problem)
                ok = False
        return tuple(matches.items()) if ok else None


def _valid_properties(action: str | None, obj: str | None) -> frozenset[str]:
    """The properties a rule for (action, obj) may test: for `all`, those of any pair covered."""
    found = {"name"}
    for kind, actions in VALID.items():
        if obj in (None, kind):
            for verb, props in actions.items():
                if action in (None, verb):
                    found |= props
    return frozenset(found)


def _value_match(prop: str, value: str) -> tuple[ValueMatch | None, str | None]:
    """(matcher, None) for a good value, (None, what is wrong) otherwise."""
    if prop in BOOLEAN_PROPERTIES:
        if value not in ("true", "false"):
            return None, f"property '{prop}' is true or false, not '{value}'"
        return partial(operator.eq, value), None
    if prop in TOPIC_PROPERTIES:
        return _topic_match(value), None
    if "*" in value[:-1]:
        return None, f"'{prop}={value}': '*' is a wildcard only at the end of a value"
    if value.endswith("*"):
        return operator.methodcaller("startswith", value[:-1]), None
    return partial(operator.eq, value), None


def _topic_match(pattern: str) -> ValueMatch:
    """A routing key against `pattern` as a topic exchange binds it (the broker's own trie)."""
    matcher = matcher_for("topic")
    matcher.bind(pattern, {}, pattern)
    return lambda key: bool(matcher.match(key))


def _ends_file(rule: Rule) -> bool:
    """`acl deny all all` (or deny-log): the seed's final rule, after which nothing counts."""
    return (
        not rule.allow
        and rule.users is None
        and rule.action is None
        and rule.obj is None
        and not rule.properties
    )


def _describe(action: str | None, obj: str | None) -> str:
    if obj is None:
        return f"'{action}' on any object" if action else "a rule for all actions"
    return f"'{action} {obj}'" if action else f"{obj} objects"


def _choices(words: tuple[str, ...]) -> str:
    return ", ".join(words)


def _case(word: str, known: tuple[str, ...]) -> str:
    return "; tokens are case-sensitive" if word.lower() in known else ""
