"""Who may connect: hashed users file, built-in guest (loopback only), SASL PLAIN/AMQPLAIN (EXTERNAL over TLS),
and the throttle and bounds that keep a storm of logins affordable."""

from gateway.security.logins import Logins, LoginThrottle
from gateway.security.passwd import TAGS, run_passwd, set_password
from gateway.security.passwords import PasswordHash, hash_password
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
    "LoginThrottle",
    "Logins",
    "PasswordHash",
    "User",
    "UsersDB",
    "UsersFileError",
    "authenticate",
    "hash_password",
    "is_loopback",
    "run_passwd",
    "set_password",
]
