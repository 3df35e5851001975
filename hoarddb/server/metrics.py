"""The server's own metrics, and the HTTP endpoint that serves them with the engine's: /metrics, /healthz.

Names (all ``hoarddb_server_*``; the engine adds ``hoarddb_ttl_*`` and ``hoarddb_indexes``):

    requests_total{op}            requests answered, by operation
    errors_total{op,code}         of those, refused ones, by codeName
    request_seconds{op}           from a request's arrival to its answer (writes: fsync included),
                                  timed with perf_counter_ns (the event loop's clock ticks in ms under uvloop)
    open_connections              open connections now
    accepted_connections_total    connections accepted
    connections_rejected_total{reason}   max_connections, handshake_timeout, idle_timeout,
                                  message_timeout (a message not whole within idle_timeout),
                                  send_timeout (answers not read for idle_timeout), protocol_error,
                                  receive_budget (a message that would pass it), user_removed and
                                  password_changed (a connection of a user removed, or whose
                                  password changed, ended at its next request)
    auth_failures_total{reason}   failed logins: unknown_user, wrong_password, locked_user and
                                  locked_address (refused by a lockout, logins.py), bad_message
    received_bytes_total, sent_bytes_total
    fsyncs_total                  group commits (Engine.sync calls)
    ops_per_fsync                 write operations made durable by one fsync (histogram)
    fsync_seconds                 how long each one took (histogram)
    busy_polls_total{outcome}     busy polls after a lone client's answer: "request" (one came
                                  in time) or "timeout" (busypoll.py)

and prometheus_client's own ``python_gc_*`` (the garbage collector, by generation) and
``process_*`` (CPU seconds, memory, open files) of the server's process.
"""

from __future__ import annotations

import asyncio
import bisect
import logging

from prometheus_client import GC_COLLECTOR, PROCESS_COLLECTOR, CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

from .. import operations
from ..wire.messages import AUTH_CONTINUE, AUTH_START, CHUNK, HELLO

log = logging.getLogger("hoarddb.server")

_LATENCY = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_KNOWN_OPS = frozenset(operations.OPERATIONS) | {HELLO, AUTH_START, AUTH_CONTINUE, CHUNK}


class ServerMetrics:
    """ServerMetrics holds the server's counters in a registry of its own.

    What every request touches (requests, errors, latency, bytes, group commits) is kept
    in plain Python numbers, updated on the event loop's thread only, and turned into
    Prometheus families when /metrics is read (:class:`_Hot`): a prometheus_client
    counter takes a lock per increment, several per request. The rest are ordinary
    prometheus_client metrics.
    """

    def __init__(self):
        r = self.registry = CollectorRegistry()
        self.connections = Gauge("hoarddb_server_open_connections", "Open connections", registry=r)
        self.connections_total = Counter("hoarddb_server_accepted_connections_total", "Connections accepted", registry=r)
        self.rejected = Counter("hoarddb_server_connections_rejected_total",
                                "Connections closed by the server, by reason", ["reason"], registry=r)
        self.auth_failures = Counter("hoarddb_server_auth_failures_total", "Failed logins, by reason", ["reason"],
                                     registry=r)
        for reason in ("unknown_user", "wrong_password", "locked_user", "locked_address", "bad_message"):
            self.auth_failures.labels(reason)
        for reason in ("max_connections", "handshake_timeout", "idle_timeout", "message_timeout", "send_timeout",
                       "protocol_error", "receive_budget", "user_removed", "password_changed"):
            self.rejected.labels(reason)
        self.received = 0  # bytes from clients
        self.sent = 0  # bytes to clients
        self.requests: dict[str, list] = {}  # op label -> [count, seconds, bucket counts...]
        self.errors: dict[tuple[str, str], int] = {}  # (op label, codeName) -> count
        self.fsyncs = _Histogram(_OPS_PER_FSYNC)  # observations: operations made durable by one sync
        self.fsync_seconds = _Histogram(_LATENCY)
        self.busy_polls = {"request": 0, "timeout": 0}
        r.register(_Hot(self))
        r.register(GC_COLLECTOR)
        r.register(PROCESS_COLLECTOR)

    def answered(self, op, nanoseconds: int, error_code: str | None = None) -> None:
        """Count one answered request that took ``nanoseconds`` (on the event loop's thread)."""
        label = op if type(op) is str and op in _KNOWN_OPS else "unknown"  # labels must not grow without bound
        row = self.requests.get(label)
        if row is None:
            row = self.requests[label] = _Histogram(_LATENCY)
        row.observe(nanoseconds / 1e9)
        if error_code is not None:
            key = (label, error_code)
            self.errors[key] = self.errors.get(key, 0) + 1

    def committed(self, operations: int, seconds: float) -> None:
        """Count one group commit: how many writes its sync made durable, and how long it took."""
        self.fsyncs.observe(operations)
        self.fsync_seconds.observe(seconds)

    def busy_polled(self, request: bool) -> None:
        """Count one busy poll: whether a request (or a connection) came before its budget ran out."""
        self.busy_polls["request" if request else "timeout"] += 1

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


_OPS_PER_FSYNC = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class _Histogram:
    """_Histogram is a count, a sum and cumulative-later bucket counts, without locks (one thread writes)."""

    __slots__ = ("bounds", "buckets", "count", "sum")

    def __init__(self, bounds: tuple):
        self.bounds = bounds
        self.buckets = [0] * (len(bounds) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.buckets[bisect.bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value

    def family_buckets(self) -> list:
        out, running = [], 0
        for bound, n in zip(self.bounds + (float("inf"),), self.buckets):
            running += n
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), running))
        return out


class _Hot:
    """_Hot turns ServerMetrics' plain numbers into Prometheus families when they are collected."""

    def __init__(self, metrics: ServerMetrics):
        self.m = metrics

    def collect(self):
        m = self.m
        requests = CounterMetricFamily("hoarddb_server_requests", "Requests answered, by operation", labels=["op"])
        latency = HistogramMetricFamily("hoarddb_server_request_seconds", "Seconds from a request's arrival to its answer",
                                        labels=["op"])
        for label, h in sorted(m.requests.items()):
            requests.add_metric([label], h.count)
            latency.add_metric([label], h.family_buckets(), h.sum)
        errors = CounterMetricFamily("hoarddb_server_errors", "Requests refused, by operation and codeName",
                                     labels=["op", "code"])
        for (label, code), n in sorted(m.errors.items()):
            errors.add_metric([label, code], n)
        yield requests
        yield errors
        yield latency
        yield CounterMetricFamily("hoarddb_server_received_bytes", "Bytes received from clients", value=m.received)
        yield CounterMetricFamily("hoarddb_server_sent_bytes", "Bytes sent to clients", value=m.sent)
        yield CounterMetricFamily("hoarddb_server_fsyncs", "Group commits: Engine.sync calls", value=m.fsyncs.count)
        per = HistogramMetricFamily("hoarddb_server_ops_per_fsync", "Write operations made durable by one fsync")
        per.add_metric([], m.fsyncs.family_buckets(), m.fsyncs.sum)
        yield per
        seconds = HistogramMetricFamily("hoarddb_server_fsync_seconds", "Seconds per group commit fsync")
        seconds.add_metric([], m.fsync_seconds.family_buckets(), m.fsync_seconds.sum)
        yield seconds
        polls = CounterMetricFamily("hoarddb_server_busy_polls",
                                    "Busy polls after answering a lone client, by outcome", labels=["outcome"])
        for outcome, n in m.busy_polls.items():
            polls.add_metric([outcome], n)
        yield polls


#: Seconds a client of /metrics or /healthz has to send its request line and headers.
HEAD_TIMEOUT = 5.0
#: Header lines read after the request line before the request is dropped.
MAX_HEADER_LINES = 100


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

    async def _read_head(self, reader: asyncio.StreamReader) -> bytes:
        """The request line; the headers after it are skipped (at most MAX_HEADER_LINES)."""
        line = await reader.readline()
        for _ in range(MAX_HEADER_LINES):
            if (await reader.readline()) in (b"\r\n", b"\n", b""):
                return line
        raise ValueError("too many header lines")

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            # one deadline for the whole head: a client trickling header lines (slowloris)
            # cannot hold the connection open, and a scrape needs a few hundred bytes
            line = await asyncio.wait_for(self._read_head(reader), HEAD_TIMEOUT)
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
        except (asyncio.TimeoutError, ConnectionError, UnicodeError, ValueError):
            pass  # ValueError: a line over the reader's limit, or too many of them
        except Exception:  # never let a scrape take the server down
            log.exception("metrics endpoint failed")
        finally:
            writer.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
