"""gateway.tls without a network: the login a certificate names, the settings a listener
needs, and OpenSSL's reasons put into words."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trio

from gateway.certs import make_cert
from gateway.tls import ClientTls, ServerTls, TlsError, handshake_failure, is_refusal, peer_login, tls_problem

#: What SSLSocket.getpeercert() returns for a certificate of subject O=Example, OU=Ops, CN=app.
PEERCERT = {
    "subject": (
        (("organizationName", "Example"),),
        (("organizationalUnitName", "Ops, East"),),
        (("commonName", "app"),),
    )
}


def test_the_login_is_the_subject_cn_or_the_whole_dn() -> None:
    assert peer_login(PEERCERT, "cn") == "app"
    assert peer_login(PEERCERT, "dn") == "CN=app,OU=Ops\\, East,O=Example"
    # No certificate (or, under --tls-verify none, none checked): no EXTERNAL login.
    assert peer_login({}, "cn") is None
    assert peer_login(None, "dn") is None
    assert peer_login({"subject": ((("organizationName", "Example"),),)}, "cn") is None


@pytest.mark.parametrize(
    ("keys", "problem"),
    [
        ({"tls_cert": "c"}, ("tls_cert", "needs tls_key (the certificate's private key) too")),
        ({"tls_key": "k"}, ("tls_key", "needs tls_cert too")),
        ({"tls_port": 5671}, ("tls_port", "needs tls_cert and tls_key (the node's certificate)")),
        ({"tls_cert": "c", "tls_key": "k", "tls_only": True}, None),
        (
            {"tls_cert": "c", "tls_key": "k", "tls_verify": "require"},
            ("tls_verify", "require needs tls_ca (the CA client certificates are checked against)"),
        ),
        ({}, None),
    ],
)
def test_a_listener_needs_a_certificate_and_its_key(keys: dict[str, object], problem: object) -> None:
    assert tls_problem(keys) == problem


def test_files_that_cannot_be_loaded_are_named(tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path, "node")
    ServerTls(cert, key, tmp_path / "ca.pem").context()
    with pytest.raises(
        TlsError, match=r"^cannot load certificate .*missing\.pem with key .*node\.key: No such file"
    ):
        ServerTls(tmp_path / "missing.pem", key).context()
    with pytest.raises(TlsError, match=r"^cannot load CA certificates from .*node\.key: "):
        ClientTls(ca=key).context()


def test_handshake_failures_in_words_and_which_are_refusals() -> None:
    expired = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] ...")
    expired.verify_message = "certificate has expired"
    broken = trio.BrokenResourceError()
    broken.__cause__ = expired
    assert handshake_failure(broken) == "certificate verify failed: certificate has expired"
    assert is_refusal(broken)
    eof = trio.BrokenResourceError()
    eof.__cause__ = ssl.SSLEOFError(8, "EOF occurred in violation of protocol")
    assert handshake_failure(eof) == "connection closed during the TLS handshake"
    assert not is_refusal(eof)
    assert handshake_failure(trio.BrokenResourceError()) == "connection closed during the TLS handshake"


def test_client_certificates_are_checked_against_the_nodes_ca_only(tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path, "node")
    # No tls_ca: no client certificate asked for, whatever tls_verify says.
    assert ServerTls(cert, key).context().verify_mode == ssl.CERT_NONE
    context = ServerTls(cert, key, tmp_path / "ca.pem").context()
    assert context.verify_mode == ssl.CERT_OPTIONAL
    # Only the node's CA, none of the system's.
    [((name, value),)] = [ca["subject"] for ca in context.get_ca_certs()][0]
    assert (name, value.rsplit(" ", 1)[0]) == ("commonName", "amq-gateway demo CA")
    assert ServerTls(cert, key, tmp_path / "ca.pem", "require").context().verify_mode == ssl.CERT_REQUIRED
    assert ServerTls(cert, key, tmp_path / "ca.pem", "none").context().verify_mode == ssl.CERT_NONE
