"""Trust on first use, as ssh does it: the servers a user has trusted, by address and certificate
fingerprint, in a known-hosts file; and the look at a server's certificate before logging in.

The file is ``$XDG_CONFIG_HOME/hoarddb/known_hosts`` (``~/.config/hoarddb/known_hosts``),
readable by its owner only (0600), one server a line::

    127.0.0.1:7070 SHA256 3F:A1:...:9C

The shell uses it when given neither ``--tls-fingerprint`` nor ``--tls-ca``; programs
pass ``tls_fingerprint=`` or ``tls_ca=`` and never read it.
"""

from __future__ import annotations

import os
import socket
import ssl
import tempfile
from pathlib import Path

from ..errors import HoardConnectionError, HoardTimeoutError
from ..wire.fingerprint import normalize
from .connection import dial
from .options import ConnectOptions


class NothingListens(HoardConnectionError):
    """NothingListens is a connection refused, or not answered: no server at that address."""


class NotTrusted(HoardConnectionError):
    """NotTrusted is a server whose certificate the connection options do not vouch for."""


def default_path() -> Path:
    """Where the known-hosts file is: under XDG_CONFIG_HOME, else ~/.config."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "hoarddb" / "known_hosts"


class KnownHosts:
    """KnownHosts is the known-hosts file: the fingerprint remembered for each server address."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path is not None else default_path()

    def _entries(self) -> dict[str, str]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        out = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 3 and not parts[0].startswith("#") and parts[1] == "SHA256":
                out[parts[0]] = parts[2]
        return out

    def get(self, address: str) -> str | None:
        """The fingerprint remembered for ``address`` (``host:port``), or None."""
        return self._entries().get(address)

    def remember(self, address: str, fp: str) -> None:
        """Remember ``fp`` for ``address`` (replacing what was), in a file only its owner reads."""
        entries = self._entries()
        entries[address] = fp
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        text = "".join(f"{a} SHA256 {f}\n" for a, f in entries.items())
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".known_hosts.")  # made 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, self.path)
        except BaseException:
            os.unlink(tmp)
            raise
        os.chmod(self.path, 0o600)


def same(a: str, b: str) -> bool:
    """Whether two fingerprints, however written, are the same (a damaged one is no match)."""
    try:
        return normalize(a) == normalize(b)
    except ValueError:
        return False


def server_certificate(options: ConnectOptions, *, verify: bool = True) -> bytes | None:
    """Connect, do the TLS handshake as a client with ``options`` does (``verify``: checking the
    certificate by them; else taking whatever it is), close; the certificate (DER), None when
    insecure. Raises HoardConnectionError: NothingListens (no server there), NotTrusted (a
    certificate the options do not vouch for), or itself (a handshake that fails otherwise)."""
    o = options
    context = o.ssl_context() if verify else _unverified()
    sock = dial(o, NothingListens)
    if context is None:
        sock.close()
        return None
    try:
        with context.wrap_socket(sock, server_hostname=o.host) as tls:
            der = tls.getpeercert(binary_form=True)
    except socket.timeout:
        sock.close()
        raise HoardTimeoutError(f"TLS handshake with {o.address} took over {o.connect_timeout:g} s; "
                            "is it a hoardDB server?", outcome_unknown=False) from None
    except (ssl.SSLError, OSError) as exc:
        sock.close()
        error = o.tls_advice(exc)
        if isinstance(exc, ssl.SSLCertVerificationError):
            raise NotTrusted(error.message, outcome_unknown=False) from None
        raise error from None
    if verify:
        o.check_fingerprint(der)
    return der


def _unverified() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx
