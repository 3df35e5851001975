"""The server's own metrics, and the HTTP endpoint that serves them with the engine's: /metrics, /healthz.

Names (all ``hoarddb_server_*``; the engine adds ``hoarddb_ttl_*`` and ``hoarddb_indexes``):

    requests_total{op}            requests answered, by operation
    errors_total{op,code}         of those, refused ones, by codeName
    request_seconds{op}           from a request's arrival to its answer (writes: fsync included)
    open_connections              open connections now
    accepted_connections_total    connections accepted
    connections_rejected_total{reason}   max_connections, handshake timeout, idle timeout
    auth_failures_total           failed logins
    received_bytes_total, sent_bytes_total
    fsyncs_total                  group commits (Engine.sync calls)
    ops_per_fsync                 write operations made durable by one fsync (histogram)
    fsync_seconds                 how long each one took (histogram)
"""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .. import operations

log = logging.getLogger("hoarddb.server")

_LATENCY = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_KNOWN_OPS = frozenset(operations.VERBS) | {
    "create_database", "drop_database", "list_databases", "create_bucket", "drop_bucket", "list_buckets",
    "describe_bucket", "stats", "alter_bucket", "metrics", "sweep_ttl", "whoami", "create_user", "drop_user",
    "update_user", "list_users", "hello", "auth_start", "auth_continue", "chunk"}


def op_label(op) -> str:
    """The ``op`` label: a known operation's name, else "unknown" (labels must not grow without bound)."""
    return op if isinstance(op, str) and op in _KNOWN_OPS else "unknown"


class ServerMetrics:
    """ServerMetrics holds the server's counters in a registry of its own."""

    def __init__(self):
        r = self.registry = CollectorRegistry()
        self.requests = Counter("hoarddb_server_requests_total", "Requests answered, by operation", ["op"], registry=r)
        self.errors = Counter("hoarddb_server_errors_total", "Requests refused, by operation and codeName",
                              ["op", "code"], registry=r)
        self.latency = Histogram("hoarddb_server_request_seconds", "Seconds from a request's arrival to its answer",
                                 ["op"], buckets=_LATENCY, registry=r)
        self.connections = Gauge("hoarddb_server_open_connections", "Open connections", registry=r)
        self.connections_total = Counter("hoarddb_server_accepted_connections_total", "Connections accepted", registry=r)
        self.rejected = Counter("hoarddb_server_connections_rejected_total",
                                "Connections closed by the server, by reason", ["reason"], registry=r)
        self.auth_failures = Counter("hoarddb_server_auth_failures_total", "Failed logins", registry=r)
        self.received = Counter("hoarddb_server_received_bytes_total", "Bytes received from clients", registry=r)
        self.sent = Counter("hoarddb_server_sent_bytes_total", "Bytes sent to clients", registry=r)
        self.fsyncs = Counter("hoarddb_server_fsyncs_total", "Group commits: Engine.sync calls", registry=r)
        self.ops_per_fsync = Histogram("hoarddb_server_ops_per_fsync", "Write operations made durable by one fsync",
                                       buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512), registry=r)
        self.fsync_seconds = Histogram("hoarddb_server_fsync_seconds", "Seconds per group commit fsync",
                                       buckets=_LATENCY, registry=r)
        self._per_op: dict = {}
        for reason in ("max_connections", "handshake_timeout", "idle_timeout", "protocol_error"):
            self.rejected.labels(reason)

    def answered(self, op, seconds: float, error_code: str | None = None) -> None:
        children = self._per_op.get(op)
        if children is None:  # resolving labels costs more than counting: once per operation name
            label = op_label(op)
            children = (self.requests.labels(label), self.latency.labels(label), label)
            if isinstance(op, str) and op in _KNOWN_OPS:
                self._per_op[op] = children
        children[0].inc()
        children[1].observe(seconds)
        if error_code is not None:
            self.errors.labels(children[2], error_code).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class MetricsEndpoint:
    """MetricsEndpoint serves GET /metrics and GET /healthz over plain HTTP/1.0.

    ``collect()`` is an async callable giving the exposition bytes; ``healthy()`` a
    callable giving True while the server accepts work.
    """

    def __init__(self, collect, healthy):
        self._collect = collect
        self._healthy = healthy
        self._server: asyncio.AbstractServer | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._handle, host, port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            parts = line.decode("latin-1").split()
            path = parts[1].split("?")[0] if len(parts) >= 2 else ""
            if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
                status, body, ctype = "405 Method Not Allowed", b"GET /metrics or /healthz\n", "text/plain"
            elif path == "/metrics":
                status, body, ctype = "200 OK", await self._collect(), "text/plain; version=0.0.4; charset=utf-8"
            elif path == "/healthz":
                ok = self._healthy()
                status = "200 OK" if ok else "503 Service Unavailable"
                body, ctype = (b"ok\n" if ok else b"stopping\n"), "text/plain"
            else:
                status, body, ctype = "404 Not Found", b"try /metrics or /healthz\n", "text/plain"
            head = (f"HTTP/1.0 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                    "Connection: close\r\n\r\n").encode()
            writer.write(head + (body if parts and parts[0] != "HEAD" else b""))
            await writer.drain()
        except (asyncio.TimeoutError, ConnectionError, UnicodeError):
            pass
        except Exception:  # never let a scrape take the server down
            log.exception("metrics endpoint failed")
        finally:
            writer.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
