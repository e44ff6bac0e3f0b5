"""`amq-gateway certs DIR`: a CA and one certificate per node for a demo or a test, made by the
`openssl` command (no cryptography of our own, and no Python package for it).

Files, all PEM: DIR/ca.pem and DIR/ca.key (the CA, made once and reused when DIR has one), and
DIR/<name>.pem and DIR/<name>.key for each name. A certificate's subject CN is the name, so a
node presenting it logs in to its peers as that user with SASL EXTERNAL; it serves and
connects (serverAuth and clientAuth) and is valid for the name, localhost, 127.0.0.1 and ::1,
so nodes on one machine check each other's host names as any TLS client does. Keys are 0600.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
from pathlib import Path

from gateway.names import FEDERATION_TAG
from gateway.security import UsersDB, set_password

#: Days a certificate is valid unless asked otherwise; the CA lasts ten years.
DEFAULT_DAYS = 825
CA_DAYS = 3650
#: A CA's CN, with a random suffix: two demo CAs must not share a subject, or a client that
#: trusts one looks the other's certificates up under the same name.
CA_SUBJECT = "amq-gateway demo CA"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]


class CertsError(Exception):
    """openssl is missing or failed; the text says which and why."""


def _openssl(*args: str) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise CertsError("the openssl command is not installed (apt-get install openssl)")
    done = subprocess.run([binary, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise CertsError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def _private(path: Path) -> None:
    os.chmod(path, 0o600)


def make_ca(directory: Path) -> Path:
    """DIR/ca.pem (and ca.key), made unless it exists; the CA's certificate path."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, key = directory / "ca.pem", directory / "ca.key"
    if ca.exists() and key.exists():
        return ca
    _openssl(
        "req",
        "-x509",
        *_KEY,
        "-keyout",
        str(key),
        "-out",
        str(ca),
        "-days",
        str(CA_DAYS),
        "-subj",
        f"/CN={CA_SUBJECT} {secrets.token_hex(4)}",
    )
    _private(key)
    return ca


def make_cert(directory: Path, name: str, days: int = DEFAULT_DAYS) -> tuple[Path, Path]:
    """DIR/<name>.pem and .key, signed by DIR's CA (made if missing), subject CN=<name>.

    `days` below 1 makes a certificate that has already expired (tests need one).
    """
    if not _NAME.match(name):
        raise CertsError(f"{name!r} is not a name for a certificate (letters, digits, . _ - @)")
    ca = make_ca(directory)
    cert, key, request = directory / f"{name}.pem", directory / f"{name}.key", directory / f"{name}.csr"
    extensions = directory / f"{name}.ext"
    extensions.write_text(
        f"subjectAltName=DNS:{name},DNS:localhost,IP:127.0.0.1,IP:::1\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
        "keyUsage=digitalSignature,keyEncipherment\n"
    )
    try:
        _openssl("req", *_KEY, "-keyout", str(key), "-out", str(request), "-subj", f"/CN={name}")
        _private(key)
        _openssl(
            "x509",
            "-req",
            "-in",
            str(request),
            "-CA",
            str(ca),
            "-CAkey",
            str(directory / "ca.key"),
            "-CAcreateserial",
            "-CAserial",
            str(directory / "ca.srl"),
            "-out",
            str(cert),
            "-days",
            str(days),
            "-extfile",
            str(extensions),
        )
    finally:
        request.unlink(missing_ok=True)
        extensions.unlink(missing_ok=True)
    return cert, key


def add_users(users_file: Path, names: list[str]) -> list[str]:
    """Each name the users file lacks, added with a random password nobody is told: these users
    log in with their certificates (EXTERNAL), which needs them in the file. They are the
    nodes' own logins, tagged `federation`: each may send dynamic routes' adverts in the name of
    the node it is (docs/security.md, "Federation's own traffic"). The names added."""
    existing = UsersDB.load(users_file) if users_file.exists() else None
    added = [name for name in names if existing is None or existing.get(name) is None]
    for name in added:
        set_password(users_file, name, secrets.token_urlsafe(24), tags=[FEDERATION_TAG])
    return added


def run_certs(directory: Path, names: list[str], days: int = DEFAULT_DAYS, users: Path | None = None) -> int:
    """The `certs` command: the CA and each name's certificate, one line per file made; with
    `users`, the names are added to that users file too."""
    print(f"CA: {make_ca(directory)}")
    for name in names:
        cert, key = make_cert(directory, name, days)
        print(f"{name}: {cert} {key}")
    if users is not None:
        added = add_users(users, names)
        print(f"users added to {users} (certificate logins): {', '.join(added) or 'none'}")
    return 0
