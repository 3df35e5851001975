"""One set of connection options for every client: the URL, keyword arguments, the shell's flags.

    hoarddb://user:password@host:port/?tls_ca=FILE&tls_fingerprint=SHA256&insecure=true&timeout=30

    option            URL / keyword       shell flag            default
    host, port        host:port           --host, --port        127.0.0.1, 7070
    user, password    user:password@      --user, --password    none; HOARDDB_PASSWORD
    tls_ca            tls_ca=             --tls-ca FILE         the system's CAs
    tls_fingerprint   tls_fingerprint=    --tls-fingerprint     none (pin a SHA-256)
    insecure          insecure=true       -insecure             false: TLS on
    timeout           timeout=            --timeout             60 s of silence while an answer is due
    connect_timeout   connect_timeout=                          10 s
    busy_poll         busy_poll=                                1000 µs; 0 turns it off
    route             route=                                    owner: a cluster's keyed requests go to
                                                                their partition's owner; any: all to
                                                                the URL's node (client/router.py)

A keyword argument overrides the URL. The password may also come from the
environment variable HOARDDB_PASSWORD, so it need not be on a command line. It is
never shown: not in ``repr(options)``, not in ``url()``, not in an error about a URL.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import ssl
from contextvars import ContextVar
from dataclasses import dataclass, field, fields, replace
from urllib.parse import parse_qsl, unquote, urlsplit

from ..busypoll import MAX_BUSY_POLL
from ..errors import BadValueError, ConnectionError_, UnknownOptionError
from ..wire.fingerprint import normalize
from ..wire.messages import DEFAULT_PORT

SCHEME = "hoarddb"
#: The values of the ``route`` option.
ROUTES = ("owner", "any")

#: Who is told what to pass: ``"python"`` (a program: keyword arguments, ``tls_fingerprint=``)
#: or ``"flags"`` (a hoarddb command: its flags, ``--tls-fingerprint``). hoarddb/cli.py sets it
#: for the run of a command; every other caller is a program.
CALLER: ContextVar[str] = ContextVar("hoarddb_caller", default="python")
_FLAGS = (("tls_fingerprint= ", "--tls-fingerprint "), ("tls_fingerprint=", "--tls-fingerprint "),
          ("tls_ca= ", "--tls-ca "), ("tls_ca=", "--tls-ca "), ("insecure=True", "-insecure"))


def in_callers_words(advice: str) -> str:
    """``advice`` (naming keyword arguments) in the words of who is told (:data:`CALLER`)."""
    if CALLER.get() == "flags":
        for keyword, flag in _FLAGS:
            advice = advice.replace(keyword, flag)
    return advice


@dataclass(frozen=True)
class ConnectOptions:
    """ConnectOptions says where a server is and how to talk to it."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    user: str | None = None
    #: Kept out of ``repr`` (and so out of logs and tracebacks that show the options).
    password: str | None = field(default=None, repr=False)
    #: A PEM file of the CA (or the server's own certificate) to verify the server by.
    tls_ca: str | None = None
    #: The SHA-256 of the server's certificate; when set, the certificate is checked against
    #: it instead of against CAs (the way to trust a self-signed server).
    tls_fingerprint: str | None = None
    #: Plaintext, no authentication: only against a server started with --insecure.
    insecure: bool = False
    #: Seconds the server may stay silent while an answer (or the next chunk of a stream, or
    #: room for an upload's next chunk) is due, before the call gives up with HoardTimeoutError
    #: and the connection is closed. A long answer that keeps coming never times out; a
    #: stalled server or network does. Raise it for requests that run longer on the server
    #: (a count over millions of documents). None (only by building ConnectOptions yourself)
    #: waits forever.
    timeout: float | None = 60.0
    #: Seconds to wait for the connection, TLS and login (each step).
    connect_timeout: float = 10.0
    #: Microseconds to wait for an answer awake, polling the socket, before sleeping in
    #: ``recv`` (hoarddb/busypoll.py); backs off when answers come later; 0 turns it off.
    busy_poll: int = 1000
    #: More servers to try in turn, ``(host, port)`` each, when ``host`` cannot be reached
    #: (the nodes of a cluster: ``hoarddb://h1:7070,h2:7070/``).
    others: tuple = ()
    #: Against a cluster: "owner" sends each keyed request (get, insert, update... of one document) to
    #: the node owning its partition, over a connection of its own (hoarddb/client/router.py); "any"
    #: sends every request to the URL's node, which forwards what it does not own. A single server
    #: is the same either way.
    route: str = "owner"

    def candidates(self) -> list["ConnectOptions"]:
        """These options, then one per server of ``others``: the servers to try, in turn."""
        return [self] + [replace(self, host=h, port=p, others=()) for h, p in self.others]

    @classmethod
    def from_url(cls, url: str | None = None, **overrides) -> "ConnectOptions":
        """Options from a ``hoarddb://`` URL, then keyword overrides (None means not given)."""
        values = _parse_url(url) if url is not None else {}
        values.update({k: v for k, v in overrides.items() if v is not None})
        known = {f.name for f in fields(cls)}
        for key in values:
            if key not in known:
                raise UnknownOptionError(f"unknown connection option {key!r}; options: {', '.join(sorted(known))}")
        if values.get("user") and values.get("password") is None and os.environ.get("HOARDDB_PASSWORD"):
            values["password"] = os.environ["HOARDDB_PASSWORD"]
        return replace(cls(), **{k: _convert(k, v) for k, v in values.items()}).check()

    def check(self) -> "ConnectOptions":
        if not isinstance(self.host, str) or not _host_ok(self.host):
            raise BadValueError(f"host must be a host name (letters, digits, '.', '-', '_') or an IP address, "
                                f"got {self.host!r}; in a URL an IPv6 address goes in brackets: "
                                f"hoarddb://[::1]:{DEFAULT_PORT}/")
        for name in ("tls_ca", "tls_fingerprint", "user"):
            if getattr(self, name) == "":
                raise BadValueError(f"{name} is empty; leave it out, or give {_WHAT[name]}")
        if self.password is not None and not self.user:
            raise BadValueError("a password without a user: give both (hoarddb://USER:PASSWORD@host/, or user= and "
                                "password=)")
        if self.insecure and (self.tls_ca or self.tls_fingerprint):
            raise BadValueError("insecure means no TLS: leave out tls_ca and tls_fingerprint, or insecure")
        if self.tls_fingerprint:
            try:
                normalize(self.tls_fingerprint)
            except ValueError as e:
                raise BadValueError(str(e)) from None
        if not 0 < self.port < 65536:
            raise BadValueError(f"port must be 1..65535, got {self.port}")
        if self.route not in ROUTES:
            raise BadValueError(f"route must be one of {', '.join(ROUTES)} (owner: each keyed request to its "
                                f"partition's owner; any: every request to the URL's node), got {self.route!r}")
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
                                                 ("tls_ca", self.tls_ca), ("tls_fingerprint", self.tls_fingerprint),
                                                 ("route", self.route if self.route != "owner" else None))
                         if v)
        return f"{SCHEME}://{user}{self.address}/" + (f"?{query}" if query else "")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client's SSL context (None when insecure). A pinned fingerprint is checked
        by :func:`check_fingerprint` after the handshake, not by the CA chain. A CA file
        that cannot be read is BadValueError: no connection can fix it."""
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
                reason = (exc.reason if isinstance(exc, ssl.SSLError) else exc.strerror) or exc
                raise BadValueError(f"cannot read the CA file {self.tls_ca!r} ({reason}): tls_ca must be a PEM file "
                                    "of the CA that signed the server's certificate, or a copy of that certificate "
                                    "(the server's DATA/tls/server.crt)") from None
        return ctx

    def check_fingerprint(self, der: bytes | None) -> None:
        """Raise ConnectionError_ unless the server's certificate has the pinned fingerprint."""
        if not self.tls_fingerprint:
            return
        import hashlib

        from ..wire.fingerprint import fingerprint
        if der is None or hashlib.sha256(der).hexdigest() != normalize(self.tls_fingerprint):
            got = fingerprint(der) if der else "none"
            raise ConnectionError_(in_callers_words(
                f"the server at {self.address} presented a certificate with SHA-256 fingerprint {got}, not the "
                f"pinned {self.tls_fingerprint}; refusing to talk to it. If the server's certificate was replaced "
                "on purpose, pin its new fingerprint with tls_fingerprint= (the server prints it at start)"),
                outcome_unknown=False)

    def tls_advice(self, exc: Exception) -> ConnectionError_:
        """The error for a failed TLS handshake, saying what to try."""
        text = str(exc)
        why = getattr(exc, "verify_message", None) or text
        if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
            if "mismatch" in why:
                hint = (f"the server's certificate is not made out to {self.host!r}, the name you connected to: "
                        "connect by a host name or IP address the certificate names, or pin the certificate "
                        "with tls_fingerprint= (the server prints it at start)")
            elif "expired" in why:
                hint = ("the server's certificate has expired (or this machine's clock is ahead): the server needs "
                        "a renewed certificate (--tls-cert, --tls-key); check the clocks of both machines")
            elif "not yet valid" in why:
                hint = ("the server's certificate is not valid yet: check the clocks of this machine and the "
                        "server's")
            elif self.tls_ca:
                hint = (f"the CA file {self.tls_ca} does not vouch for the server's certificate: give the CA that "
                        "signed it, or a copy of the server's own DATA/tls/server.crt; or pin the certificate with "
                        "tls_fingerprint= (printed at the server's start)")
            else:
                hint = ("the server's certificate does not verify against this machine's CAs: if it is "
                        "self-signed, pass tls_fingerprint= (printed at the server's start) or "
                        "tls_ca=DATA/tls/server.crt")
        elif "WRONG_VERSION_NUMBER" in text or "record layer failure" in text or "wrong version" in text \
                or isinstance(exc, (ConnectionResetError, EOFError)) or "EOF" in text:
            hint = ("the server does not speak TLS here: if it runs with --insecure, connect with insecure=True; "
                    "otherwise check the port")
        else:
            hint = "check the port, and that the server runs with TLS"
        return ConnectionError_(f"TLS handshake with {self.address} failed ({why}): {in_callers_words(hint)}",
                                outcome_unknown=False)


#: What an option holds, for the message refusing it empty.
_WHAT = {"tls_ca": "a PEM file of the CA or of the server's certificate",
         "tls_fingerprint": "the SHA-256 fingerprint the server prints at its start", "user": "a user name"}
_EXAMPLE = f"hoarddb://user:password@host:{DEFAULT_PORT}/?tls_fingerprint=SHA256"
_ENCODE = "percent-encode @ : / ? # in a user name or password (%40 %3A %2F %3F %23)"
_HOST_NAME = re.compile(r"[\w-]+(\.[\w-]+)*\.?")


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***``, to show in a message."""
    head, sep, rest = url.partition("//")
    at = rest.rfind("@")
    if not sep or at < 0:
        return url if "@" not in url else head.split(":", 1)[0] + ":***"  # no //: cannot tell where it is
    user, colon, _ = rest[:at].partition(":")
    return f"{head}//{user}{':***' if colon else ''}{rest[at:]}"


def _host_ok(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return _HOST_NAME.fullmatch(host) is not None


def _parse_url(url) -> dict:
    """The options a ``hoarddb://`` URL holds, refusing anything else with what is accepted."""
    if not isinstance(url, str):
        raise BadValueError(f"a hoardDB URL is a string such as {_EXAMPLE}; got {type(url).__name__} {url!r:.40}")
    text = url.strip()
    if not text:
        return {}
    shown = redact(text)
    if not text.lower().startswith(SCHEME + "://"):
        raise BadValueError(f"a hoardDB URL starts with {SCHEME}://, such as {_EXAMPLE}; got {shown!r}")
    others = []
    head, slash, rest = text[len(SCHEME) + 3:].partition("/")
    if "," in head.rpartition("@")[2]:  # hoarddb://h1:7070,h2:7070/: the first here, the others tried after it
        cred, at, hosts = head.rpartition("@")
        first, *more = hosts.split(",")
        for h in [first, *more] if not first else more:  # (an empty first one is refused, not taken for 127.0.0.1)
            other_host, colon, other_port = h.rpartition(":") if not h.endswith("]") else (h, "", "")
            other_host = other_host if colon else h
            if not _host_ok(other_host.strip("[]")) or (colon and not other_port.isdigit()):
                raise BadValueError(f"{h!r} in {shown!r} is not HOST or HOST:PORT; several servers are written "
                                    f"hoarddb://h1:7070,h2:7070/")
            others.append((other_host.strip("[]"), int(other_port) if colon else DEFAULT_PORT))
        text = f"{SCHEME}://{cred}{at}{first}{slash}{rest}"
    hint = f"; {_ENCODE}" if "@" in text else ""
    try:
        parts = urlsplit(text)
    except ValueError as exc:  # an unclosed [IPv6 bracket...
        raise BadValueError(f"{shown!r} is not a valid URL ({exc}); a hoardDB URL is such as "
                            f"{_EXAMPLE}{hint}") from None
    if parts.fragment or text.endswith("#"):
        raise BadValueError(f"a hoardDB URL has no #fragment ({shown!r}){hint or '; percent-encode a # as %23'}")
    if parts.path not in ("", "/"):
        raise BadValueError(f"a hoardDB URL has no path ({shown!r}): choose a database with client[name]{hint}")
    address = parts.netloc.rpartition("@")[2]
    if address.startswith("[") and not re.fullmatch(r"\[[^\]]*\](:\d*)?", address):
        raise BadValueError(f"after an IPv6 address in brackets comes only :PORT ({shown!r}), such as "
                            f"hoarddb://[::1]:{DEFAULT_PORT}/")
    values: dict = {}
    if parts.hostname:
        values["host"] = unquote(parts.hostname)
    try:
        port = parts.port
    except ValueError:
        raise BadValueError(f"the port in {shown!r} is not a number 1-65535{hint}") from None
    if port is not None:  # :0 too, for check() to refuse rather than to mean the default
        values["port"] = port
    if parts.username:
        values["user"] = unquote(parts.username)
    if parts.password is not None:
        values["password"] = unquote(parts.password)
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in values:
            raise BadValueError(f"{key} is given twice in {shown!r}; give it once")
        if value == "" and key != "insecure":  # ?insecure alone means true
            raise BadValueError(f"{key} has no value in {shown!r}; write {key}=VALUE, or leave it out")
        values[key] = value
    if others:
        values["others"] = tuple(others)
    return values


def _convert(key: str, value):
    if key == "others":
        return tuple((str(h), int(p)) for h, p in value)
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
