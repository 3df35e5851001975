"""TLS: the generated certificate, pinning, CA files, and mismatched ends that must fail fast and clearly."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hoarddb
from hoarddb.errors import BadValueError, ConnectionError_, CorruptDataError
from hoarddb.server import ServerConfig
from hoarddb.server.tls import cert_fingerprint, make_self_signed
from hoarddb.testing import ServerThread

from .server_users import add_users

REPO = Path(__file__).resolve().parents[2]


def test_generated_certificate_with_pinned_fingerprint(secure_server):
    assert secure_server.cert.exists() and (secure_server.data / "tls" / "server.key").stat().st_mode & 0o077 == 0
    assert secure_server.fingerprint == cert_fingerprint(secure_server.cert)
    assert secure_server.fingerprint in secure_server.server.start_line()
    with hoarddb.connect(secure_server.url("admin", "admin-pw")) as client:
        assert isinstance(client.databases(), list)


def test_certificate_as_ca_file(secure_server):
    url = f"hoarddb://admin:admin-pw@127.0.0.1:{secure_server.port}/?tls_ca={secure_server.cert}"
    with hoarddb.connect(url) as client:
        client.databases()
    with hoarddb.connect(host="localhost", port=secure_server.port, user="admin", password="admin-pw",
                         tls_ca=str(secure_server.cert)) as client:
        client.databases()


def test_fingerprint_spellings(secure_server):
    bare = secure_server.fingerprint.replace(":", "").lower()
    for spelling in (bare, "sha256:" + bare, secure_server.fingerprint):
        with hoarddb.connect(port=secure_server.port, user="admin", password="admin-pw",
                             tls_fingerprint=spelling) as client:
            client.databases()


def test_a_pinned_fingerprint_that_does_not_match(secure_server):
    wrong = "AB:" * 31 + "AB"
    with pytest.raises(ConnectionError_, match="not the pinned"):
        hoarddb.connect(port=secure_server.port, user="admin", password="admin-pw", tls_fingerprint=wrong)


def test_unverified_self_signed_certificate(secure_server):
    # a Python caller is told the keyword arguments it can pass, not the shell's flags
    with pytest.raises(ConnectionError_, match="pass tls_fingerprint= .* or tls_ca=") as refused:
        hoarddb.connect(port=secure_server.port, user="admin", password="admin-pw")
    assert "--tls" not in refused.value.message


def test_plaintext_client_against_tls_server_fails_fast(secure_server):
    started = time.monotonic()
    with pytest.raises(ConnectionError_, match="TLS"):
        hoarddb.connect(port=secure_server.port, insecure=True, connect_timeout=8)
    assert time.monotonic() - started < 5


def test_tls_client_against_plaintext_server_fails_fast(insecure_server):
    started = time.monotonic()
    with pytest.raises(ConnectionError_, match="does not speak TLS"):
        hoarddb.connect(port=insecure_server.port, tls_fingerprint="AB" * 32, connect_timeout=8)
    assert time.monotonic() - started < 5


def test_insecure_is_refused_off_loopback():
    with pytest.raises(BadValueError, match="loopback"):
        ServerConfig(data="x", host="0.0.0.0", insecure=True).check()
    ServerConfig(data="x", host="::1", insecure=True).check()
    ServerConfig(data="x", host="localhost", insecure=True).check()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, "-m", "hoarddb.cli", "server", "--data", "/nonexistent/x",
                             "--host", "0.0.0.0", "--insecure"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2 and "loopback" in result.stderr


def test_given_certificate_and_restart_keeps_the_generated_one(tmp_path):
    cert_pem, key_pem = make_self_signed("127.0.0.1")
    (tmp_path / "c.pem").write_bytes(cert_pem)
    (tmp_path / "k.pem").write_bytes(key_pem)
    data = tmp_path / "data"
    add_users(data)
    with ServerThread(data, tls_cert=str(tmp_path / "c.pem"), tls_key=str(tmp_path / "k.pem")) as server:
        assert server.fingerprint == cert_fingerprint(tmp_path / "c.pem")
        assert not (data / "tls").exists()
        with hoarddb.connect(server.url("admin", "admin-pw")) as client:
            client.databases()
    prints = []
    for _ in range(2):
        with ServerThread(data) as server:
            prints.append(server.fingerprint)
    assert prints[0] == prints[1]


def test_a_certificate_near_or_past_its_end_is_warned_about(tmp_path):
    import datetime

    from hoarddb.server.tls import expiry_warning

    cert_pem, _ = make_self_signed("127.0.0.1")  # valid from 5 minutes ago for 3,650 days
    (tmp_path / "c.pem").write_bytes(cert_pem)
    now = datetime.datetime.now(datetime.timezone.utc)
    assert expiry_warning(tmp_path / "c.pem", now) is None
    soon = expiry_warning(tmp_path / "c.pem", now + datetime.timedelta(days=3640))
    assert "expires on" in soon and "renew it" in soon
    assert "expired on" in expiry_warning(tmp_path / "c.pem", now + datetime.timedelta(days=3651))
    assert "not valid before" in expiry_warning(tmp_path / "c.pem", now - datetime.timedelta(days=1))


def test_the_server_warns_at_start_of_an_expired_certificate(tmp_path, caplog):
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "expired")])
    then = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=30)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(then)
            .not_valid_after(then + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    (tmp_path / "c.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "k.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    data = tmp_path / "data"
    add_users(data)
    with caplog.at_level("WARNING", logger="hoarddb.server"):
        with ServerThread(data, tls_cert=str(tmp_path / "c.pem"), tls_key=str(tmp_path / "k.pem")) as server:
            with hoarddb.connect(server.url("admin", "admin-pw")) as client:  # a pinned client does not look at dates
                client.databases()
    assert "expired on" in caplog.text and "c.pem" in caplog.text


@pytest.mark.parametrize("missing", ["server.crt", "server.key"])
def test_one_file_of_the_generated_pair_missing_is_refused_not_replaced(tmp_path, missing):
    """A backup restored halfway: the other file is kept as it is and the start refused (before:
    a new pair replaced it silently, and pinned clients found a new fingerprint)."""
    data = tmp_path / "data"
    add_users(data)
    with ServerThread(data):
        pass
    tls = data / "tls"
    (tls / missing).unlink()
    (kept,) = [p for p in tls.iterdir() if p.name != missing]
    before = kept.read_bytes()
    with pytest.raises(CorruptDataError, match=f"{missing} is missing but {kept.name} is there") as caught:
        ServerThread(data).start()
    assert "delete both" in caught.value.message and "pin the old fingerprint" in caught.value.message
    assert kept.read_bytes() == before and not (tls / missing).exists()


def test_a_pair_made_again_where_buckets_are_is_warned_about(tmp_path, caplog):
    """Both files deleted: a new pair is made (as the docs tell to replace it), with a warning
    naming the new fingerprint when the data directory holds buckets (before: an info line);
    none at a first start, even with its users added before it."""
    data = tmp_path / "data"
    add_users(data)
    with caplog.at_level("INFO", logger="hoarddb.server"):
        with ServerThread(data) as server:
            first = server.fingerprint
            with hoarddb.connect(server.url("admin", "admin-pw")) as client:
                client["app"].create_bucket("H", type="hash")
    assert not [r for r in caplog.records if r.levelname == "WARNING" and "fingerprint" in r.getMessage()]
    for name in ("server.crt", "server.key"):
        (data / "tls" / name).unlink()
    caplog.clear()
    with caplog.at_level("INFO", logger="hoarddb.server"):
        with ServerThread(data) as server:
            with hoarddb.connect(server.url("admin", "admin-pw")) as client:
                assert client["app"].buckets() == ["H"]
    assert server.fingerprint != first
    (warning,) = [r.getMessage() for r in caplog.records
                  if r.levelname == "WARNING" and "fingerprint" in r.getMessage()]
    assert server.fingerprint in warning and "not its first start" in warning and "pin" in warning


def test_a_first_start_cut_short_between_its_two_renames_is_finished(tmp_path):
    """The pair is written as two temporary files and renamed, key first: a crash between the
    renames leaves the key beside server.crt.tmp, which the next start puts in place."""
    cert_pem, key_pem = make_self_signed("127.0.0.1")
    data = tmp_path / "data"
    add_users(data)
    (data / "tls").mkdir()
    (data / "tls" / "server.key").write_bytes(key_pem)
    (data / "tls" / "server.crt.tmp").write_bytes(cert_pem)
    with ServerThread(data) as server:
        assert server.fingerprint == cert_fingerprint(data / "tls" / "server.crt")
    assert (data / "tls" / "server.crt").read_bytes() == cert_pem
