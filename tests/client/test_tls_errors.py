"""TLS that fails, on both clients: each refusal is CONNECTION_ERROR with a hint that fits its cause
(plaintext against TLS and back: tests/server/test_tls.py and tests/client/test_aio.py)."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import hoarddb
import hoarddb.aio
from hoarddb.errors import ConnectionError_
from hoarddb.testing import ServerThread

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from server_users import add_users  # noqa: E402


def make_cert(folder: Path, names=("localhost",), ips=("127.0.0.1",), expired=False) -> tuple[str, str]:
    """A self-signed certificate (and its key) for ``names`` and ``ips``; PEM files in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    start = now - datetime.timedelta(days=30 if expired else 0, minutes=5)
    end = start + datetime.timedelta(days=1 if expired else 365)
    alt = [x509.DNSName(n) for n in names] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName(alt), critical=False).sign(key, hashes.SHA256()))
    (folder / "c.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "k.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()))
    return str(folder / "c.pem"), str(folder / "k.pem")


def both_refuse(port: int, **options) -> list[ConnectionError_]:
    """The errors of the blocking and the asyncio client connecting with ``options``."""
    errors = []
    with pytest.raises(ConnectionError_) as e:
        hoarddb.connect(port=port, user="admin", password="admin-pw", connect_timeout=10, **options)
    errors.append(e.value)

    async def aio():
        await hoarddb.aio.connect(port=port, user="admin", password="admin-pw", connect_timeout=10, **options)
    with pytest.raises(ConnectionError_) as e:
        asyncio.run(aio())
    errors.append(e.value)
    for error in errors:
        assert error.code == 29 and error.outcome_unknown is False
        assert "_ssl.c" not in error.message  # the reason, not the C source line of it
    return errors


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """A server whose certificate names only other.example, and one whose certificate expired."""
    root = tmp_path_factory.mktemp("tls")
    out = {}
    with_names = make_cert(root / "other", names=("other.example",), ips=())
    expired = make_cert(root / "expired", expired=True)
    started = []
    try:
        for name, (cert, key) in (("other", with_names), ("expired", expired)):
            add_users(root / name / "data")
            server = ServerThread(root / name / "data", tls_cert=cert, tls_key=key, auth_failure_delay=0.05).start()
            started.append(server)
            out[name] = (server, cert)
        out["unrelated_ca"] = make_cert(root / "unrelated")[0]
        yield out
    finally:
        for server in started:
            server.stop()


def test_a_certificate_for_another_name_says_to_connect_by_a_name_it_holds(servers):
    """Regression: a host name mismatch was told "if it is self-signed, pass --tls-fingerprint"."""
    server, cert = servers["other"]
    for error in both_refuse(server.port, tls_ca=cert):
        assert "not made out to '127.0.0.1'" in error.message
        assert "connect by a host name or IP address the certificate names" in error.message


def test_an_expired_certificate_says_to_renew_it(servers):
    """Regression: an expired certificate was told "if it is self-signed, pass --tls-fingerprint"."""
    server, cert = servers["expired"]
    for error in both_refuse(server.port, tls_ca=cert):
        assert "the server's certificate has expired" in error.message and "--tls-cert" in error.message


def test_a_ca_file_that_does_not_vouch_for_the_server_names_it(servers):
    """Regression: the hint said to pass --tls-ca to a user who had passed one."""
    server, _ = servers["other"]
    ca = servers["unrelated_ca"]
    for error in both_refuse(server.port, tls_ca=ca):
        assert f"the CA file {ca} does not vouch for the server's certificate" in error.message


def test_pinning_the_fingerprint_still_connects(servers):
    server, _ = servers["other"]
    with hoarddb.connect(port=server.port, user="admin", password="admin-pw",
                         tls_fingerprint=server.fingerprint) as client:
        assert isinstance(client.databases(), list)
