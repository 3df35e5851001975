"""The server's TLS: the certificate it is given, or a self-signed pair made on first start.

    DATA/tls/server.crt     PEM certificate (EC P-256, 10 years, names: localhost, this
                            host's names, 127.0.0.1, ::1 and the listening address)
    DATA/tls/server.key     PEM private key, mode 0600

Clients verify a self-signed server by its SHA-256 fingerprint (``--tls-fingerprint``,
printed at every start) or by trusting server.crt as a CA (``--tls-ca DATA/tls/server.crt``).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
from pathlib import Path

from ..errors import BadValueError
from ..wire.fingerprint import fingerprint

TLS_DIR = "tls"
CERT_NAME, KEY_NAME = "server.crt", "server.key"


def ensure_self_signed(data_dir, host: str = "127.0.0.1") -> tuple[Path, Path, bool]:
    """``(cert, key, created)``: DATA/tls's pair, made now when it does not exist yet."""
    directory = Path(data_dir) / TLS_DIR
    cert, key = directory / CERT_NAME, directory / KEY_NAME
    if cert.exists() and key.exists():
        return cert, key, False
    directory.mkdir(parents=True, exist_ok=True)
    cert_pem, key_pem = make_self_signed(host)
    _write(key, key_pem, 0o600)
    _write(cert, cert_pem, 0o644)
    return cert, key, True


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
    pem = Path(cert_path).read_text()
    return fingerprint(ssl.PEM_cert_to_DER_cert(pem[:pem.index("-----END CERTIFICATE-----") + 25]))


#: A certificate that ends within this many days is warned about at every start.
EXPIRY_WARNING_DAYS = 30


def expiry_warning(cert_path, now: datetime.datetime | None = None) -> str | None:
    """What to warn of when the certificate of ``cert_path`` has expired, is not valid yet or
    ends within EXPIRY_WARNING_DAYS; None when it is fine. Clients that check it against a CA
    refuse an expired one (clients that pin its fingerprint do not look at its dates)."""
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(Path(cert_path).read_bytes())
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
    """The server's SSL context: TLS 1.2 or later, the given pair."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(cert_path), str(key_path))
    except (OSError, ssl.SSLError) as exc:
        raise BadValueError(f"cannot load the TLS certificate {cert_path} and key {key_path}: {exc}") from None
    return ctx


def _write(path: Path, data: bytes, mode: int) -> None:
    temp = path.with_name(path.name + ".tmp")
    with open(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.rename(temp, path)
