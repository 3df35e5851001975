"""The server's TLS: the certificate it is given, or a self-signed pair made on first start.

    DATA/tls/server.crt     PEM certificate (EC P-256, 10 years, names: localhost, this
                            host's names, 127.0.0.1, ::1 and the listening address)
    DATA/tls/server.key     PEM private key, mode 0600

Clients verify a self-signed server by its SHA-256 fingerprint (``--tls-fingerprint``,
printed at every start) or by trusting server.crt as a CA (``--tls-ca DATA/tls/server.crt``).

Both files missing is a first start: a new pair is made (with a warning naming its
fingerprint when the data directory already holds buckets, since clients that pinned the
old one will refuse it). One of the two missing (a backup restored halfway), a file that
does not read as PEM, or a key that does not match its certificate is CorruptDataError
naming the file: the pair is never replaced behind the user's back. The pair is written
as two temporary files, then renamed key first; a start that finds one file beside the
other's temporary file finishes that rename (a crash cut the first start short).
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import re
import socket
import ssl
from pathlib import Path

from ..errors import BadValueError, CorruptDataError
from ..storage.oserrors import fsync_directory, storage_error
from ..wire.fingerprint import fingerprint

TLS_DIR = "tls"
CERT_NAME, KEY_NAME = "server.crt", "server.key"

log = logging.getLogger("hoarddb.server")

#: What a pinned client does when the pair is made anew: said wherever that may happen.
NEW_PAIR_NOTE = ("clients that pin the old fingerprint (--tls-fingerprint) or trust the old server.crt (--tls-ca) "
                 "then refuse the server until they are given the new one")


def ensure_self_signed(data_dir, host: str = "127.0.0.1") -> tuple[Path, Path, bool]:
    """``(cert, key, created)``: DATA/tls's pair, checked, or made now when neither file exists.

    CorruptDataError when only one of the two exists, when one does not read as PEM, or
    when the key is not the certificate's; nothing is changed then.
    """
    directory = Path(data_dir) / TLS_DIR
    cert, key = directory / CERT_NAME, directory / KEY_NAME
    for path in (key, cert):  # the first start was cut short between the two renames: finish it
        if not path.exists() and _temp(path).exists() and (cert.exists() or key.exists()):
            os.rename(_temp(path), path)
            fsync_directory(directory)
    if cert.exists() and key.exists():
        problem = pair_problem(cert, key)
        if problem:
            raise CorruptDataError(f"{problem}. {_REGENERATE_HINT}")
        return cert, key, False
    if cert.exists() or key.exists():
        there, missing = (cert, key) if cert.exists() else (key, cert)
        raise CorruptDataError(
            f"{missing} is missing but {there.name} is there (a backup restored halfway?); nothing was made or "
            f"changed. {_REGENERATE_HINT}")
    try:
        _make_pair(directory, cert, key, host)
    except OSError as exc:
        raise storage_error(f"making a TLS certificate in {directory}", exc, "the server was not started") from None
    if _holds_buckets(Path(data_dir)):
        log.warning("%s had no TLS certificate and key: a new self-signed pair was made, but this data directory "
                    "holds buckets, so this is not its first start. The new SHA-256 fingerprint is %s: give it to "
                    "the clients that pin the old one (--tls-fingerprint), and a copy of %s to those that trust the "
                    "old server.crt (--tls-ca); until then they refuse this server",
                    directory, cert_fingerprint(cert), cert)
    return cert, key, True


def _make_pair(directory: Path, cert: Path, key: Path, host: str) -> None:
    """Write a new pair: both as temporary files, flushed, then renamed key first."""
    if not directory.is_dir():
        directory.mkdir(parents=True)
        fsync_directory(directory.parent)
    cert_pem, key_pem = make_self_signed(host)
    _write_durably(_temp(key), key_pem, 0o600)
    _write_durably(_temp(cert), cert_pem, 0o644)
    os.rename(_temp(key), key)
    os.rename(_temp(cert), cert)
    fsync_directory(directory)


def pair_problem(cert_path, key_path) -> str | None:
    """What is wrong with a PEM certificate and key: one of them does not read, or the key
    is not the certificate's; None when they make a pair (or use an algorithm only OpenSSL
    knows: then loading them says)."""
    from cryptography import x509
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    cert_bytes, key_bytes = _read(cert_path), _read(key_path)
    try:
        cert = x509.load_pem_x509_certificate(cert_bytes)
    except ValueError as exc:
        return f"{cert_path} does not read as a PEM certificate ({len(cert_bytes)} bytes; {_why(exc)})"
    try:
        key = serialization.load_pem_private_key(key_bytes, password=None)
    except TypeError:
        return f"{key_path} is a PEM private key protected by a password; the server needs it unencrypted"
    except ValueError as exc:
        return f"{key_path} does not read as a PEM private key ({len(key_bytes)} bytes; {_why(exc)})"
    except UnsupportedAlgorithm:
        return None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    try:
        ours = key.public_key().public_bytes(serialization.Encoding.DER, public)
        theirs = cert.public_key().public_bytes(serialization.Encoding.DER, public)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return None
    if ours != theirs:
        return f"the key {key_path} is not the key of the certificate {cert_path}: they do not match"
    return None


#: What to do about a damaged or half-missing pair in DATA/tls.
_REGENERATE_HINT = (f"Restore {CERT_NAME} and {KEY_NAME} together from a backup, or delete both to have a new "
                    f"pair made at the next start: its fingerprint is in the start line, and {NEW_PAIR_NOTE}")


def _holds_buckets(data_dir: Path) -> bool:
    """Whether the data directory holds a bucket: a database's folder (named with a letter
    first, as every database is; not the catalog's or tls), made with its first bucket."""
    try:
        return any(p.name[:1].isalpha() and p.name not in ("catalog", TLS_DIR) and p.is_dir()
                   for p in data_dir.iterdir())
    except OSError:
        return False


def _read(path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise storage_error(f"reading {path}", exc, "the server was not started") from None


def _why(exc: BaseException) -> str:
    """cryptography's words for a file it cannot load, without the address of its FAQ."""
    text = re.sub(r"\s*See https?://\S+ for more details\.", "", str(exc)).strip()
    return text.splitlines()[0][:160] if text else type(exc).__name__


def _temp(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


def make_self_signed(host: str = "127.0.0.1") -> tuple[bytes, bytes]:
    """A new self-signed certificate and its key, both PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    dns = {"localhost"}
    for name in (socket.gethostname(), socket.getfqdn()):
        if name:
            dns.add(name)
    ips = {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")}
    try:
        ip = ipaddress.ip_address(host)
        if not ip.is_unspecified:
            ips.add(ip)
    except ValueError:
        if host:
            dns.add(host)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hoardDB self-signed"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "hoardDB")])
    now = datetime.datetime.now(datetime.timezone.utc)
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.SubjectAlternativeName(
            [x509.DNSName(d) for d in sorted(dns)] + [x509.IPAddress(i) for i in sorted(ips, key=str)]),
            critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=False,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def cert_fingerprint(cert_path) -> str:
    """The SHA-256 fingerprint of the first certificate of a PEM file."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    data = _read(cert_path)
    try:
        return fingerprint(x509.load_pem_x509_certificate(data).public_bytes(Encoding.DER))
    except ValueError as exc:
        raise BadValueError(f"{cert_path} does not read as a PEM certificate ({_why(exc)})") from None


#: A certificate that ends within this many days is warned about at every start.
EXPIRY_WARNING_DAYS = 30


def expiry_warning(cert_path, now: datetime.datetime | None = None) -> str | None:
    """What to warn of when the certificate of ``cert_path`` has expired, is not valid yet or
    ends within EXPIRY_WARNING_DAYS; None when it is fine. Clients that check it against a CA
    refuse an expired one (clients that pin its fingerprint do not look at its dates)."""
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(_read(cert_path))
    except ValueError as exc:
        raise BadValueError(f"{cert_path} does not read as a PEM certificate ({_why(exc)})") from None
    now = now or datetime.datetime.now(datetime.timezone.utc)
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    if end <= now:
        return (f"the TLS certificate {cert_path} expired on {end:%Y-%m-%d %H:%M} UTC: clients that verify it "
                "against a CA refuse to connect; give a renewed one (--tls-cert, --tls-key)")
    if start > now:
        return (f"the TLS certificate {cert_path} is not valid before {start:%Y-%m-%d %H:%M} UTC "
                "(check this machine's clock): clients that verify it refuse to connect until then")
    if end - now <= datetime.timedelta(days=EXPIRY_WARNING_DAYS):
        return (f"the TLS certificate {cert_path} expires on {end:%Y-%m-%d %H:%M} UTC, in "
                f"{(end - now).days} day(s): renew it before then (--tls-cert, --tls-key)")
    return None


def server_context(cert_path, key_path) -> ssl.SSLContext:
    """The server's SSL context: TLS 1.2 or later, the given pair (BadValueError saying which
    file is wrong when they do not read, or do not match)."""
    advice = "give a certificate and its own key, both PEM, the key unencrypted (--tls-cert, --tls-key)"
    for path in (cert_path, key_path):
        if not Path(path).is_file():
            raise BadValueError(f"cannot serve TLS: {path} is not a file; {advice}")
    problem = pair_problem(cert_path, key_path)
    if problem:
        raise BadValueError(f"cannot serve TLS: {problem}; {advice}")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(cert_path), str(key_path))
    except (OSError, ssl.SSLError) as exc:
        raise BadValueError(f"cannot load the TLS certificate {cert_path} and key {key_path}: {exc}") from None
    return ctx


def _write_durably(path: Path, data: bytes, mode: int) -> None:
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
