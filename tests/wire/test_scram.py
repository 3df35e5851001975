"""SCRAM-SHA-256 against RFC 7677's example exchange, and the failures that must look alike."""

from __future__ import annotations

import base64

import pytest

from hoarddb.errors import AuthFailedError, ProtocolError
from hoarddb.wire import scram

RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")


def test_rfc7677_example():
    client = scram.ScramClient("user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == "n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    creds = scram.make_credentials("pencil", 4096, RFC_SALT)
    server = scram.ScramServer(lambda u: creds if u == "user" else None, None,
                               nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.first(client.first())
    assert first == "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = client.final(first)
    assert final == ("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    server_final = server.final(final)
    assert server_final == "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    client.verify(server_final)


def _exchange(user, password, lookup):
    client = scram.ScramClient(user, password)
    decoy = lambda u: scram.make_credentials("x" * 20, 4096, b"decoysalt1234567")  # noqa: E731
    server = scram.ScramServer(lookup, decoy)
    return server.final(client.final(server.first(client.first())))


def test_wrong_password_and_unknown_user_fail_the_same_way():
    creds = scram.make_credentials("right", 4096)
    lookup = {"ann": creds}.get
    with pytest.raises(AuthFailedError) as wrong:
        _exchange("ann", "wrong", lookup)
    with pytest.raises(AuthFailedError) as unknown:
        _exchange("bob", "right", lookup)
    assert str(wrong.value) == str(unknown.value)


def test_names_with_commas_and_equals():
    creds = scram.make_credentials("pw", 4096)
    assert _exchange("a,b=c", "pw", {"a,b=c": creds}.get).startswith("v=")


def test_a_client_detects_a_server_without_the_keys():
    client = scram.ScramClient("ann", "pw")
    client.final(f"r={client.nonce}xyz,s={base64.b64encode(b'salt5678').decode()},i=4096")
    with pytest.raises(AuthFailedError, match="signature"):
        client.verify("v=" + base64.b64encode(b"\x00" * 32).decode())


def test_malformed_messages():
    server = scram.ScramServer(lambda u: None, lambda u: scram.make_credentials("x", 4096))
    with pytest.raises(ProtocolError):
        server.first("p=tls-unique,,n=a,r=b")
    with pytest.raises(ProtocolError):
        server.first("n,,garbage")
    with pytest.raises(ProtocolError):
        scram.ScramServer(None, None).final("c=biws,r=x,p=AAAA")


def test_credentials_hold_no_password():
    creds = scram.make_credentials("hunter2-secret", 4096)
    assert set(creds) == {"mechanism", "salt", "iterations", "stored_key", "server_key"}
    assert b"hunter2" not in b"".join(v for v in creds.values() if isinstance(v, bytes))
