"""Who may connect: hashed users file, built-in guest (loopback only), SASL PLAIN/AMQPLAIN."""

from gateway.security.passwords import PasswordHash, hash_password
from gateway.security.sasl import MECHANISMS, AuthenticationFailed, authenticate
from gateway.security.users import (
    User,
    UsersDB,
    UsersFileError,
    is_loopback,
    run_passwd,
    set_password,
)

__all__ = [
    "MECHANISMS",
    "AuthenticationFailed",
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
