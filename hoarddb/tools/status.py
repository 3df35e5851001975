"""What ``hoarddb ping`` and ``hoarddb status`` ask a running server, and how they say it.

    >>> from hoarddb.tools.status import ping, status
    >>> ping(address="127.0.0.1:7070", insecure=True)      # a Ping: answered, seconds, server, note
    >>> with hoarddb.connect("hoarddb://admin:pw@db1:7070/?tls_ca=ca.pem") as client:
    ...     print(status(client).text())

Both use only operations every server has: the connection's hello (version, protocol,
limits), ``whoami``, ``list_databases``, ``list_buckets``, ``stats`` and ``metrics``.
A ping needs no login: a server that answers its hello and asks for a login is up.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import AuthFailedError, HoardError
from ..operations import LIST_BUCKETS, STATS, WHOAMI


@dataclass
class Ping:
    """Ping is one try at reaching a server: whether it answered as a hoardDB server, and how fast.

    ``seconds`` is the time to connect, finish TLS and the hello (and log in, with a
    user), plus one ``whoami`` round trip when logged in; ``round_trip`` is that round
    trip alone (None without a login). ``note`` says what a login-less ping saw.
    """

    address: str
    answered: bool
    seconds: float
    server: str | None = None
    round_trip: float | None = None
    user: str | None = None
    note: str | None = None
    error: str | None = None

    def text(self) -> str:
        if not self.answered:
            return f"{self.address}: no answer: {self.error}"
        timing = f"{self.seconds * 1000:.1f} ms" + (
            f" (round trip {self.round_trip * 1000:.2f} ms)" if self.round_trip is not None else "")
        return f"{self.address}: {self.server or 'a hoardDB server'} answered in {timing}" + (
            f"; {self.note}" if self.note else "")


def ping(url: str | None = None, *, address: str | None = None, **options) -> Ping:
    """Reach the server ``url`` (or ``hoarddb.connect``'s keyword options) once; a :class:`Ping`, never raising.

    A server that asks for a login the options do not give answered all the same (its
    note says so); a refused login with a user given counts as no answer, since the
    caller asked for that login to work.
    """
    from ..client import connect
    from ..client.options import ConnectOptions

    try:
        where = ConnectOptions.from_url(url, **options).address
    except HoardError as exc:
        return Ping(address=address or str(url), answered=False, seconds=0.0, error=f"{exc.codeName}: {exc.message}")
    started = time.perf_counter()
    try:
        client = connect(url, **options)
    except AuthFailedError as exc:
        seconds = time.perf_counter() - started
        if options.get("user") or (url and "@" in url):
            return Ping(address=where, answered=False, seconds=seconds, error=f"{exc.codeName}: {exc.message}")
        return Ping(address=where, answered=True, seconds=seconds,
                    note="it asks for a login (give --user to time a request too)")
    except HoardError as exc:
        return Ping(address=where, answered=False, seconds=time.perf_counter() - started,
                    error=f"{exc.codeName}: {exc.message}")
    with client:
        try:
            sent = time.perf_counter()
            who = client.execute({"op": WHOAMI.name}).get("result") or {}
            done = time.perf_counter()
        except HoardError as exc:
            return Ping(address=where, answered=False, seconds=time.perf_counter() - started,
                        error=f"{exc.codeName}: {exc.message}")
        return Ping(address=where, answered=True, seconds=done - started, round_trip=done - sent,
                    server=_server_name(client), user=who.get("user"))


def _server_name(client) -> str | None:
    info = getattr(client._executor, "server_info", None) or {}
    return info.get("server")


@dataclass
class DatabaseStatus:
    """DatabaseStatus is one database as ``status`` sees it: its buckets by type, their entries and bytes."""

    name: str
    buckets: int = 0
    types: dict[str, int] = field(default_factory=dict)
    entries: int = 0
    bytes: int = 0
    #: Why the numbers are missing or partial (the user may not read a bucket's stats), or None.
    error: str | None = None


@dataclass
class Status:
    """Status is what an operator looks at first: where the server is, what runs there, who is
    logged in, what it holds, and the state of its indexes and TTL sweeper."""

    address: str
    server: str | None
    protocol: int | None
    tls: bool
    user: str | None
    roles: list[str]
    round_trip: float
    max_message_bytes: int | None
    databases: list[DatabaseStatus]
    #: ``{"ready": 3, "building": 0, ...}``: index states summed over the server (from ``metrics``), or None.
    indexes: dict[str, int] | None = None
    #: Documents past their time not yet removed, an estimate (``hoarddb_ttl_backlog_estimate``), or None.
    ttl_backlog: float | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    def text(self) -> str:
        """The status as labelled lines, the busiest facts first."""
        security = "TLS" if self.tls else "no TLS (insecure)"
        who = (f"{self.user} ({', '.join(self.roles)})" if self.user
               else f"no login ({', '.join(self.roles) or 'no roles'})")
        total_entries = sum(d.entries for d in self.databases)
        total_bytes = sum(d.bytes for d in self.databases)
        lines = [
            ("server", f"{self.address}  {self.server or '?'}, protocol {self.protocol if self.protocol else '?'}"),
            ("security", security),
            ("user", who),
            ("round trip", f"{self.round_trip * 1000:.2f} ms"),
            ("databases", (f"{len(self.databases)}, {sum(d.buckets for d in self.databases)} bucket(s), "
                           f"{total_entries:,} entries, {_size(total_bytes)} on disk")),
        ]
        for d in self.databases:
            kinds = ", ".join(f"{n} {t}" for t, n in sorted(d.types.items()))
            lines.append(("", f"{d.name}: {d.buckets} bucket(s)" + (f" ({kinds})" if kinds else "")
                              + f", {d.entries:,} entries, {_size(d.bytes)}"
                              + (f" — {d.error}" if d.error else "")))
        if self.indexes is not None:
            lines.append(("indexes", ", ".join(f"{n} {state}" for state, n in self.indexes.items())))
        if self.ttl_backlog is not None:
            lines.append(("ttl backlog", f"{self.ttl_backlog:,.0f} document(s) past their time"))
        if self.max_message_bytes:
            lines.append(("max message", _size(self.max_message_bytes)))
        width = max(len(label) for label, _ in lines)
        out = [f"{label:<{width}}  {value}" for label, value in lines]
        out.extend(f"note: {n}" for n in self.notes)
        return "\n".join(out)


def status(client) -> Status:
    """The :class:`Status` of the server ``client`` is connected to (raises when it cannot be reached).

    Databases are those the user may see; a bucket whose stats the user may not read is
    counted, and its database says so. One ``stats`` request per bucket is sent, all in
    one round trip.
    """
    from ..client import pipeline

    executor = client._executor
    options = getattr(executor, "options", None)
    info = getattr(executor, "server_info", None) or {}
    sent = time.perf_counter()
    who = client.execute({"op": WHOAMI.name}).get("result") or {}
    round_trip = time.perf_counter() - sent
    notes: list[str] = []
    databases: list[DatabaseStatus] = []
    names = client.databases()
    listed = pipeline(client, [{"op": LIST_BUCKETS.name, "db": n} for n in names]) if names else []
    asks: list[tuple[DatabaseStatus, str]] = []
    for name, answer in zip(names, listed):
        d = DatabaseStatus(name)
        databases.append(d)
        if isinstance(answer, HoardError):
            d.error = f"{answer.codeName}: {answer.message}"
            continue
        buckets = answer.get("result") or []
        d.buckets = len(buckets)
        asks.extend((d, b) for b in buckets)
    answers = pipeline(client, [{"op": STATS.name, "db": d.name, "bucket": b} for d, b in asks]) if asks else []
    for (d, bucket), answer in zip(asks, answers):
        if isinstance(answer, HoardError):
            d.error = d.error or f"{answer.codeName} for bucket {bucket} (and maybe others): counts are partial"
            continue
        stats = answer.get("result") or {}
        d.types[stats.get("type", "?")] = d.types.get(stats.get("type", "?"), 0) + 1
        d.entries += int(stats.get("entries") or 0)
        d.bytes += int(stats.get("bytes") or 0)
    indexes, backlog = None, None
    try:
        metrics = client.metrics()
    except HoardError as exc:
        notes.append(f"index and TTL figures need the metrics operation: {exc.codeName}")
    else:
        states = {k[len('hoarddb_indexes{state="'):-2]: int(v) for k, v in metrics.items()
                  if k.startswith('hoarddb_indexes{state="')}
        indexes = states or None
        backlog = metrics.get("hoarddb_ttl_backlog_estimate")
    return Status(
        address=options.address if options is not None else "?",
        server=info.get("server"),
        protocol=info.get("protocol"),
        tls=bool(options is not None and not options.insecure),
        user=who.get("user"),
        roles=list(who.get("roles") or []),
        round_trip=round_trip,
        max_message_bytes=info.get("maxMessageSize"),
        databases=databases,
        indexes=indexes,
        ttl_backlog=backlog,
        notes=notes,
    )


def _size(n: Any) -> str:
    n = float(n or 0)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
