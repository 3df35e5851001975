"""One set of connection options for every client: the URL, keyword arguments, the shell's flags.

    hoarddb://user:password@host:port/?tls_ca=FILE&tls_fingerprint=SHA256&insecure=true&timeout=30

    option            URL / keyword       shell flag            default
    host, port        host:port           --host, --port        127.0.0.1, 7070
    user, password    user:password@      --user, --password    none; HOARDDB_PASSWORD
    tls_ca            tls_ca=             --tls-ca FILE         the system's CAs
    tls_fingerprint   tls_fingerprint=    --tls-fingerprint     none (pin a SHA-256)
    insecure          insecure=true       -insecure             false: TLS on
    timeout           timeout=            --timeout             none: wait for answers
    connect_timeout   connect_timeout=                          10 s
    busy_poll         busy_poll=                                1000 µs; 0 turns it off

A keyword argument overrides the URL. The password may also come from the
environment variable HOARDDB_PASSWORD, so it need not be on a command line.
"""

from __future__ import annotations

import math
import os
import ssl
from dataclasses import dataclass, fields, replace
from urllib.parse import parse_qsl, unquote, urlsplit

from ..busypoll import MAX_BUSY_POLL
from ..errors import BadValueError, ConnectionError_, UnknownOptionError
from ..wire.fingerprint import normalize
from ..wire.messages import DEFAULT_PORT

SCHEME = "hoarddb"


@dataclass(frozen=True)
class ConnectOptions:
    """ConnectOptions says where a server is and how to talk to it."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    user: str | None = None
    password: str | None = None
    #: A PEM file of the CA (or the server's own certificate) to verify the server by.
    tls_ca: str | None = None
    #: The SHA-256 of the server's certificate; when set, the certificate is checked against
    #: it instead of against CAs (the way to trust a self-signed server).
    tls_fingerprint: str | None = None
    #: Plaintext, no authentication: only against a server started with --insecure.
    insecure: bool = False
    #: Seconds to wait for an answer before giving up (TimeoutError_); None waits forever.
    timeout: float | None = None
    #: Seconds to wait for the connection, TLS and login.
    connect_timeout: float = 10.0
    #: Microseconds to wait for an answer awake, polling the socket, before sleeping in
    #: ``recv`` (hoarddb/busypoll.py); backs off when answers come later; 0 turns it off.
    busy_poll: int = 1000

    @classmethod
    def from_url(cls, url: str | None = None, **overrides) -> "ConnectOptions":
        """Options from a ``hoarddb://`` URL, then keyword overrides (None means not given)."""
        values: dict = {}
        if url is not None and not isinstance(url, str):
            raise BadValueError(f"a hoardDB URL is a string such as hoarddb://127.0.0.1:{DEFAULT_PORT}/; got {url!r}")
        if url:
            try:
                parts = urlsplit(url)
            except ValueError as exc:  # an unclosed [IPv6 bracket...
                raise BadValueError(f"{url!r} is not a valid URL ({exc}); a hoardDB URL is such as "
                                    f"hoarddb://user@host:{DEFAULT_PORT}/") from None
            if parts.scheme != SCHEME:
                raise BadValueError(f"a hoardDB URL starts with {SCHEME}://, such as hoarddb://127.0.0.1:{DEFAULT_PORT}; "
                                    f"got {url!r}")
            if parts.hostname:
                values["host"] = parts.hostname
            try:
                port = parts.port
            except ValueError:
                raise BadValueError(f"the port in {url!r} is not a number 1-65535") from None
            if port is not None:  # :0 too, for check() to refuse rather than to mean the default
                values["port"] = port
            if parts.username:
                values["user"] = unquote(parts.username)
            if parts.password is not None:
                values["password"] = unquote(parts.password)
            if parts.path not in ("", "/"):
                raise BadValueError(f"a hoardDB URL has no path ({parts.path!r}); choose a database with client[name]")
            for key, value in parse_qsl(parts.query, keep_blank_values=True):
                values[key] = value
        values.update({k: v for k, v in overrides.items() if v is not None})
        known = {f.name for f in fields(cls)}
        for key in values:
            if key not in known:
                raise UnknownOptionError(f"unknown connection option {key!r}; options: {', '.join(sorted(known))}")
        if values.get("user") and values.get("password") is None and os.environ.get("HOARDDB_PASSWORD"):
            values["password"] = os.environ["HOARDDB_PASSWORD"]
        return replace(cls(), **{k: _convert(k, v) for k, v in values.items()}).check()

    def check(self) -> "ConnectOptions":
        if self.insecure and (self.tls_ca or self.tls_fingerprint):
            raise BadValueError("insecure means no TLS: leave out tls_ca and tls_fingerprint, or insecure")
        if self.tls_fingerprint:
            try:
                normalize(self.tls_fingerprint)
            except ValueError as e:
                raise BadValueError(str(e)) from None
        if not 0 < self.port < 65536:
            raise BadValueError(f"port must be 1..65535, got {self.port}")
        if isinstance(self.busy_poll, bool) or not isinstance(self.busy_poll, int):
            raise BadValueError(f"busy_poll must be a whole number of microseconds, got {self.busy_poll!r}")
        if not 0 <= self.busy_poll <= MAX_BUSY_POLL:
            raise BadValueError(f"busy_poll must be 0..{MAX_BUSY_POLL} microseconds (0 turns it off), "
                                f"got {self.busy_poll}")
        return self

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def url(self) -> str:
        """The URL of these options, without the password."""
        user = f"{self.user}@" if self.user else ""
        query = "&".join(f"{k}={v}" for k, v in (("insecure", "true" if self.insecure else None),
                                                 ("tls_ca", self.tls_ca), ("tls_fingerprint", self.tls_fingerprint))
                         if v)
        return f"{SCHEME}://{user}{self.address}/" + (f"?{query}" if query else "")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client's SSL context (None when insecure). A pinned fingerprint is checked
        by :func:`check_fingerprint` after the handshake, not by the CA chain."""
        if self.insecure:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.tls_fingerprint:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            try:
                if self.tls_ca:
                    ctx.load_verify_locations(cafile=self.tls_ca)
                else:
                    ctx.load_default_certs()
            except (OSError, ssl.SSLError) as exc:
                raise ConnectionError_(f"cannot read the CA file {self.tls_ca}: {exc}") from None
        return ctx

    def check_fingerprint(self, der: bytes | None) -> None:
        """Raise ConnectionError_ unless the server's certificate has the pinned fingerprint."""
        if not self.tls_fingerprint:
            return
        import hashlib

        from ..wire.fingerprint import fingerprint
        if der is None or hashlib.sha256(der).hexdigest() != normalize(self.tls_fingerprint):
            got = fingerprint(der) if der else "none"
            raise ConnectionError_(
                f"the server at {self.address} presented a certificate with SHA-256 fingerprint {got}, not the "
                f"pinned {self.tls_fingerprint}; refusing to talk to it. If the server's certificate was replaced "
                "on purpose, pin its new fingerprint (the server prints it at start)")

    def tls_advice(self, exc: Exception) -> ConnectionError_:
        """The error for a failed TLS handshake, saying what to try."""
        text = str(exc)
        if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
            hint = ("the server's certificate does not verify: if it is self-signed, pass --tls-fingerprint "
                    "(printed at the server's start) or --tls-ca DATA/tls/server.crt")
        elif "WRONG_VERSION_NUMBER" in text or "record layer failure" in text or "wrong version" in text \
                or isinstance(exc, (ConnectionResetError, EOFError)) or "EOF" in text:
            hint = ("the server does not speak TLS here: if it runs with --insecure, connect with -insecure "
                    "(insecure=true); otherwise check the port")
        else:
            hint = "check the port, and that the server runs with TLS"
        return ConnectionError_(f"TLS handshake with {self.address} failed ({text}): {hint}")


def _convert(key: str, value):
    if key == "port":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
        raise BadValueError(f"port must be a whole number 1..65535, got {value!r}")
    if key == "insecure":
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text in ("1", "true", "yes", "on", ""):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise BadValueError(f"insecure must be true or false, got {value!r}")
    if key == "busy_poll":  # a URL's text; anything else is for check() to judge
        try:
            return int(value) if isinstance(value, str) else value
        except ValueError:
            raise BadValueError(f"busy_poll must be a whole number of microseconds, got {value!r}") from None
    if key in ("timeout", "connect_timeout"):
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise BadValueError(f"{key} must be a number of seconds, got {value!r}") from None
        if not 0 < number < math.inf:  # NaN fails this too
            raise BadValueError(f"{key} must be a finite number of seconds > 0, got {value!r}")
        return number
    return value if value is None else str(value)
