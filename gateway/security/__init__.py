"""Who may connect and what they may do: hashed users file, built-in guest (loopback only),
SASL PLAIN/AMQPLAIN (EXTERNAL over TLS), the throttle and bounds that keep a storm of logins
affordable, and RabbitMQ's permissions checked at the broker's one check point (access)."""

from gateway.security.access import Authority, SessionAccess
from gateway.security.logins import Logins, LoginThrottle
from gateway.security.passwd import TAGS, run_passwd, set_password
from gateway.security.passwords import PasswordHash, hash_password
from gateway.security.permissions import Permission, PermissionTable, TopicPermission
from gateway.security.sasl import EXTERNAL, MECHANISMS, AuthenticationFailed, authenticate
from gateway.security.users import (
    User,
    UsersDB,
    UsersFileError,
    is_loopback,
)

__all__ = [
    "EXTERNAL",
    "MECHANISMS",
    "TAGS",
    "AuthenticationFailed",
    "Authority",
    "LoginThrottle",
    "Logins",
    "PasswordHash",
    "Permission",
    "PermissionTable",
    "SessionAccess",
    "TopicPermission",
    "User",
    "UsersDB",
    "UsersFileError",
    "authenticate",
    "hash_password",
    "is_loopback",
    "run_passwd",
    "set_password",
]
