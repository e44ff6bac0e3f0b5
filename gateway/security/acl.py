"""The Qpid ACL file as a node's second authority: who may do which action on which object.

A node started with `--acl-file FILE` (or `acl_file` in its config) asks `AclRules.allows`
before each operation the ACL's vocabulary names: the broker model's queue and exchange
operations (where permissions are checked too: both must allow), `create link` where
federation adds a link, and `access method` for every management request. The grammar is
gateway.security.acl_file's; this module decides.

One file covers the whole node, every vhost (a Qpid C++ broker has no vhosts; the request's
vhost is not part of the rule). Users are this node's logins, in the realm NODE_REALM: a rule
for `carlt@QPID` or `carlt` matches the login `carlt`.

Rules are immutable: a reload parses the file again and swaps the node's `acl` attribute, so a
decision always reads one whole file's rules. `-log` rules write one line per decision to the
node log, every client-supplied string escaped (repr), so a name cannot forge a log line.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from gateway.security.acl_file import NODE_REALM, AclFileError, Rule, canonical_user, read

__all__ = ["NODE_REALM", "AclFileError", "AclRules"]

LOGGER = logging.getLogger("gateway.security.acl")


class AclRules:
    """A parsed, immutable ACL file; reload = parse again and swap."""

    def __init__(self, path: Path, rules: tuple[Rule, ...], warnings: tuple[str, ...] = ()) -> None:
        self.path = path
        self.rules = rules
        self.warnings = warnings
        #: (user, action, object) -> the rules that may decide it, in file order: a publish
        #: is checked per message, so only the property tests are left for each decision.
        self._candidates: dict[tuple[str, str, str], tuple[Rule, ...]] = {}

    @classmethod
    def load(cls, path: Path) -> AclRules:
        """Read and parse `path`; AclFileError (a ConfigError) lists every problem as
        file:line: what. Warnings (lines after `acl deny all all`) are logged."""
        parsed = read(Path(path))
        for warning in parsed.warnings:
            LOGGER.warning("%s", warning)
        return cls(Path(path), parsed.rules, parsed.warnings)

    def allows(
        self,
        user: str,
        action: str,
        obj: str,
        name: str = "",
        properties: Mapping[str, str] | None = None,
    ) -> bool:
        """Whether the first rule matching this request allows it (none: the implicit final
        `acl deny all all`). A rule's property matches only a property the request gives."""
        key = (user, action, obj)
        candidates = self._candidates.get(key)
        if candidates is None:
            login = canonical_user(user)
            candidates = self._candidates[key] = tuple(
                rule for rule in self.rules if rule.applies_to(login, action, obj)
            )
        given = properties or {}
        for rule in candidates:
            for prop, match in rule.properties:
                value = name if prop == "name" else given.get(prop)
                if value is None or not match(value):
                    break
            else:
                if rule.log:
                    self._log(rule, user, action, obj, name, given)
                return rule.allow
        return False

    def _log(
        self, rule: Rule, user: str, action: str, obj: str, name: str, properties: Mapping[str, str]
    ) -> None:
        details = "".join(f" {prop}={value!r}" for prop, value in sorted(properties.items()))
        LOGGER.log(
            logging.INFO if rule.allow else logging.WARNING,
            "acl %s: user %r %s %s %r%s (rule %s:%d)",
            "allowed" if rule.allow else "denied",
            user,
            action,
            obj,
            name,
            details,
            self.path,
            rule.line,
        )
