"""The server: listens, authenticates, runs operations on the engine, commits in groups, stops gracefully.

    server = Server(ServerConfig(data="./data", port=0).check())
    asyncio.run(server.serve())          # until SIGTERM / Ctrl-C, or server.request_stop()

Threads: the event loop (uvloop's, unless the ``event_loop`` option says asyncio) owns
every socket and runs what costs microseconds itself (one-key reads); writes go to the
group commit (:mod:`.commit`), which runs each turn's writes and their fsync on a thread
of its own; scans, blobs and administration run in two pools, one for reads and one for
writes. A read never waits behind a slow write or fsync. A stop (SIGTERM, Ctrl-C) closes
the listener, stops reading new requests, lets those already received finish, makes them
durable, answers them, then closes the connections and the engine. A cluster node started
with ``--drain-on-stop`` first moves its partitions to the other nodes, serving meanwhile
(hoarddb/cluster/membership.py); a second stop request skips the rest of that.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import logging
import os
import signal
import ssl
import struct
import threading
import weakref
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from time import perf_counter_ns
from typing import Any

from .. import operations
from ..version import __version__
from ..catalog import check_name, is_part
from ..engine import Engine
from ..operations import CLOSE_CURSOR, METRICS, MORE, check_request
from ..errors import (BadValueError, ConnectionError_, CursorNotFoundError, DocumentTooLargeError, HoardError,
                      InternalError, InvalidArgumentError, LimitExceededError, StorageError, HoardTimeoutError,
                      UnauthorizedError)
from ..options import Options
from ..values.codec import encode_checked
from ..values.filter import DEFAULT_REGEX_TIMEOUT, filter_has_regex, regex_time_limit
from ..wire.framing import MAX_MESSAGE_SIZE, encode_message
from ..wire.messages import CHUNK_SIZE, error_answer
from ..wire.protocol import Principal, Request
from . import auth, logformat, tls
from .auth import Authenticator, authorize
from .. import busypoll
from ..busypoll import BusyPoll
from .commit import GroupCommitter
from .config import ServerConfig
from .connection import Connection
from .logins import LoginLimiter
from .metrics import MetricsEndpoint, ServerMetrics
from .slowlog import SlowLog
from .users import UserStore, check_password

log = logging.getLogger("hoarddb.server")

#: Operations that write, verbs and catalog and server operations alike (the table's ``write``).
WRITE_OPS = operations.names(write=True)
#: Operations the server answers itself, without the engine (the table's ``runs=SERVER``).
SERVER_OPS = operations.names(runs=operations.SERVER)
#: Operations whose answer is a stream of chunks (a blob's bytes).
STREAMS = operations.names(streams=True)
#: Operations whose answer lists only the databases a user holds a role on.
NARROWED = operations.names(narrowed=True)


#: The cursors' operations: a connection may name only the cursors it opened.
CURSOR_OPS = frozenset({MORE.name, CLOSE_CURSOR.name})
def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def is_write(op: str) -> bool:
    return op in WRITE_OPS


# Reads known to touch few keys and no file (Engine.is_quick_read: get, length, peek or
# list of at most 100, a search a unique index answers or whose index holds few entries
# for its values) run on the event loop itself: a request to a read-pool thread and back
# costs more than such a read. Anything that may scan (find, count, range, a search on
# many entries, long lists, blobs) goes to the read pool, so the loop is never held long.
# Writes of documents and elements (every write verb, store fields' too) go to the group
# commit; catalog changes and blob uploads to the write pool.
#: Seconds the loop waits for a read it handed to the read pool before it serves others
#: meanwhile: most scans finish within it, and are answered without a hop back to the loop.
READ_WAIT = 0.002
#: Seconds between two looks at the users file for changes made by another process
#: (``hoarddb user``): the bound within which they reach open connections.
USERS_POLL = 0.25
#: Server operations that change users: applied to open connections at once.
USER_CHANGES = operations.names(runs=operations.SERVER, write=True)
#: Catalog reads as cheap as a point read.
INLINE_CATALOG_READS = frozenset(n for n, op in operations.ADMIN.items()
                                 if op.runs == operations.ENGINE and not op.write and op.cost == operations.POINT)


class _Pool(ThreadPoolExecutor):
    """A thread pool that counts its tasks not finished yet (``busy``): the group commit
    holds a lone write's LMDB commit past its answer only while nothing runs here."""

    def __init__(self, threads: int, name: str):
        super().__init__(threads, thread_name_prefix=name)
        self._busy_lock = threading.Lock()
        self.busy = 0

    def submit(self, fn, /, *args, **kwargs):
        with self._busy_lock:
            self.busy += 1
        try:
            future = super().submit(fn, *args, **kwargs)
        except BaseException:
            self._done(None)
            raise
        future.add_done_callback(self._done)
        return future

    def _done(self, _future) -> None:
        with self._busy_lock:
            self.busy -= 1


class Server:
    """Server is one running hoardDB server: its engine, listener, connections and metrics."""

    def __init__(self, config: ServerConfig):
        self.config = config
        self.loop: asyncio.AbstractEventLoop | None = None
        self.engine: Engine | None = None
        self.metrics = ServerMetrics()
        self.slowlog = SlowLog(config.slow_ms, config.slowlog_length)
        self.users = UserStore(config.data)
        self.authenticator = Authenticator(self.users, LoginLimiter(
            config.auth_user_failures, config.auth_address_failures, config.auth_lockout)) if config.auth else None
        self.info = {"server": f"hoardDB {__version__}", "chunkSize": CHUNK_SIZE}
        self.connections: set[Connection] = set()
        #: Connections accepted and still in their TLS handshake: they count toward max_connections.
        #: Weak: a handshake that fails drops its connection without a call (the TLS layer
        #: calls connection_made and connection_lost only after a handshake that worked).
        self.handshaking: weakref.WeakSet[Connection] = weakref.WeakSet()
        self.tls_context: ssl.SSLContext | None = None
        #: Bytes of messages not received whole, all connections together (receive_budget).
        self.receiving = 0
        self.committer: GroupCommitter | None = None
        self.fingerprint: str | None = None
        self.host, self.port = config.host, config.port
        self.metrics_port: int | None = None
        self.stopping = False
        self._listener: asyncio.AbstractServer | None = None
        self._endpoint: MetricsEndpoint | None = None
        self._stop_event: asyncio.Event | None = None
        self._idle_event: asyncio.Event | None = None
        self._reads = _Pool(config.read_threads, "hoarddb-read")
        self._writes = _Pool(config.write_threads, "hoarddb-write")
        self._syncs = ThreadPoolExecutor(1, thread_name_prefix="hoarddb-commit")
        self._corking: list | None = None  # connections whose answers are held (_answers_together)
        # seconds a lone connection is polled after its answers; none on one CPU (busypoll.py)
        self._busy_poll_off = busypoll.unavailable() if config.busy_poll else None
        self._busy_poll = config.busy_poll / 1e6 if self._busy_poll_off is None else 0.0
        #: This server's part in a cluster (hoarddb/cluster/node.py), or None for a single server.
        self.cluster = None
        self._stops_asked = 0
        self._drain: asyncio.Task | None = None  # a cluster node's drain before its stop (--drain-on-stop)

    # -- life cycle

    async def start(self) -> None:
        """Open the engine, listen, and log the start line."""
        self.loop = asyncio.get_running_loop()
        self.loop.set_exception_handler(_quiet_tls_errors)
        self._stop_event = asyncio.Event()
        self._idle_event = asyncio.Event()
        data = Path(self.config.data)
        group = self.config.group_commit and hasattr(Engine, "sync")
        try:
            self.engine = await self.loop.run_in_executor(self._writes, lambda: Engine(
                data, Options(sync=not group, max_answer_bytes=MAX_MESSAGE_SIZE,  # no read past one message
                              cursor_timeout=self.config.cursor_timeout, max_cursors=self.config.max_cursors)))
        except OSError as exc:  # not a listening problem: say which (run() reports OSErrors as those)
            raise StorageError(f"cannot open the data directory {data}: {exc}") from None
        try:
            if group:
                self.committer = GroupCommitter(self.engine, self._syncs, self.metrics, self._answers_together,
                                                alone=lambda: len(self.connections) <= 1, quiet=self._quiet,
                                                limits=self._limits)
            if self.config.auth:
                self._bootstrap_admin()
            context = None
            if self.config.tls:
                if self.config.tls_cert:
                    cert, key = Path(self.config.tls_cert), Path(self.config.tls_key)
                else:
                    cert, key, created = tls.ensure_self_signed(data, self.config.host)
                    if created:
                        log.info("created a self-signed TLS certificate %s", cert)
                context = tls.server_context(cert, key)
                self.fingerprint = tls.cert_fingerprint(cert)
                warning = tls.expiry_warning(cert)
                if warning:
                    log.warning("%s", warning)
            self.tls_context = context
            self._listener = await self.loop.create_server(
                self._accepted, self.config.host, self.config.port, ssl=context,
                ssl_handshake_timeout=self.config.handshake_timeout or None if context else None,
                reuse_address=True, backlog=1024)
            self.port = self._listener.sockets[0].getsockname()[1]
            if self.config.metrics_port >= 0:
                self._endpoint = MetricsEndpoint(self._exposition, lambda: not self.stopping)
                await self._endpoint.start(self.config.metrics_host, self.config.metrics_port)
                self.metrics_port = self._endpoint.port
            if self.config.cluster:
                await self._join_cluster()
        except BaseException:
            if self._listener is not None:
                self._listener.close()
            await self.loop.run_in_executor(None, self.engine.close)
            raise
        self._sweeper = self.loop.create_task(self._sweep_connections())
        self._users_watcher = self.loop.create_task(self._watch_users()) if self.config.auth else None
        log.info("%s", self.start_line())

    async def _join_cluster(self) -> None:
        """Join the cluster of ``config.cluster`` as ``config.node_id`` (hoarddb/cluster/node.py)."""
        from ..cluster.coord import parse_cluster_url  # noqa: PLC0415 (only a cluster node needs etcd's client)
        from ..cluster.node import ClusterNode  # noqa: PLC0415

        if self.config.auth and not (os.environ.get("HOARDDB_CLUSTER_USER") and os.environ.get("HOARDDB_CLUSTER_PASSWORD")):
            raise BadValueError("a cluster node with authentication on logs in to the other nodes as a user with the "
                                "admin role: set HOARDDB_CLUSTER_USER and HOARDDB_CLUSTER_PASSWORD (the same user on "
                                "every node)")
        advertise = self.config.advertise or f"{self.config.host}:{self.port}"
        self.info["node"] = self.config.node_id  # (hello says so: a client then reads the map, client/router.py)
        self.cluster = ClusterNode(self, parse_cluster_url(self.config.cluster), self.config.node_id, advertise,
                                   self.config.node_ttl)
        await self.cluster.start({"tls": self.config.tls, "fingerprint": self.fingerprint, "auth": self.config.auth})
        log.info("joined the cluster %s as node %s, advertised at %s", self.config.cluster, self.config.node_id,
                 advertise)

    async def run_here(self, doc: dict) -> dict:
        """``doc``'s answer from this server's engine, a write's once it is durable (a cluster
        node's own part of a request): a verb's write in the group commit, as a client's."""
        doc = {k: v for k, v in doc.items() if k != "id"}
        op = doc.get("op")
        verb = operations.VERBS.get(op)
        if verb is not None and verb.write and self.committer is not None:
            done: asyncio.Future = self.loop.create_future()
            self.committer.submit(doc, lambda result: done.done() or done.set_result(result))
            result = await done
            if isinstance(result, HoardError):
                return result.to_answer()
            if isinstance(result, BaseException):
                return InternalError(f"{type(result).__name__}: {result} (please report this)").to_answer()
            return result
        try:
            answer = await self.loop.run_in_executor(self._writes if is_write(op) else self._reads, self._run, doc)
        except HoardError as e:
            return e.to_answer()
        if is_write(op) and self.committer is not None and answer.get("ok") == 1:
            synced: asyncio.Future = self.loop.create_future()
            self.committer.after_durable(lambda error: synced.done() or synced.set_result(error))
            error = await synced
            if error is not None:
                return error.to_answer()
        return answer

    def start_line(self) -> str:
        tls_text = f"TLS on (SHA-256 fingerprint {self.fingerprint})" if self.config.tls else "TLS off"
        auth_text = "authentication on" if self.config.auth else "authentication off (--insecure)"
        metrics = (f"metrics http://{self.config.metrics_host}:{self.metrics_port}/metrics"
                   if self.metrics_port is not None else "metrics off")
        commit = "group commit" if self.committer else "fsync per write"
        loop = type(self.loop).__module__.split(".")[0]  # "uvloop" or "asyncio"
        poll = (f"busy poll {self.config.busy_poll} µs" if self._busy_poll
                else "busy poll off" + (f" ({self._busy_poll_off})" if self._busy_poll_off else ""))
        return (f"hoardDB {__version__} listening on {self.config.host}:{self.port}, "
                f"data {Path(self.config.data).resolve()}, {tls_text}, {auth_text}, {metrics}, {commit}, "
                f"{loop} loop, {poll}, pid {os.getpid()}"
                + (f", node {self.config.node_id} of cluster {self.config.cluster}" if self.cluster else ""))

    async def serve(self, *, install_signals: bool = True) -> None:
        """Start, run until a stop is asked (SIGTERM, SIGINT, :meth:`request_stop`), stop."""
        await self.start()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self.loop.add_signal_handler(sig, self.request_stop)
        try:
            await self._stop_event.wait()
            if self.cluster is not None and self.config.drain_on_stop and self._stops_asked < 2:
                # its partitions to the others first, serving meanwhile; a second stop asked cancels it
                self._drain = self.loop.create_task(self.cluster.membership.drain(self.config.drain_timeout))
                await asyncio.wait({self._drain})
        finally:
            if self._drain is not None:
                self._drain.cancel()
            if install_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    self.loop.remove_signal_handler(sig)
            await self.stop()

    def request_stop(self) -> None:
        """Ask :meth:`serve` to stop gracefully (safe from a signal handler, on the loop's thread); asked
        again while a cluster node drains, stop without waiting for the drain."""
        self._stops_asked += 1
        if self._drain is not None and not self._drain.done():
            log.warning("stop asked again: stopping now, without waiting for the drain (the partitions not moved "
                        "yet are unavailable until this node starts again; their moves resume then)")
            self._drain.cancel()
        if self._stop_event is not None:
            self._stop_event.set()

    async def stop(self) -> None:
        """Stop accepting, finish and make durable what is in flight, close everything."""
        if self.stopping:
            return
        self.stopping = True
        log.info("stopping: %d connections, finishing requests in flight", len(self.connections))
        if self._listener is not None:
            self._listener.close()
        for conn in list(self.connections):
            conn.stop_reading()
        deadline = self.loop.time() + self.config.shutdown_timeout
        while any(c.busy for c in self.connections) and self.loop.time() < deadline:
            self._idle_event.clear()
            try:
                await asyncio.wait_for(self._idle_event.wait(), max(0.01, deadline - self.loop.time()))
            except asyncio.TimeoutError:
                break
        if self.committer is not None:
            await self.committer.flush()
        for conn in list(self.connections):
            conn.close()
        for _ in range(100):  # let the transports flush and report connection_lost
            if not self.connections:
                break
            await asyncio.sleep(0.01)
        self._sweeper.cancel()
        if self.cluster is not None:
            await self.cluster.stop()
        if self._users_watcher is not None:
            self._users_watcher.cancel()
        if self._endpoint is not None:
            await self._endpoint.stop()
        if self._listener is not None:
            await self._listener.wait_closed()
        engine = self.engine
        if engine is not None:
            if self.committer is not None:
                await self.loop.run_in_executor(self._syncs, engine.sync)
            await self.loop.run_in_executor(self._writes, engine.close)
        for pool in (self._reads, self._writes, self._syncs):
            pool.shutdown(wait=False)
        log.info("stopped")

    def _bootstrap_admin(self) -> None:
        if self.users.users():
            return
        password = os.environ.get("HOARDDB_ADMIN_PASSWORD")
        if password:
            try:
                check_password(password, self.config.min_password_length)
            except BadValueError as e:  # the server does not start: say which password
                raise BadValueError(f"HOARDDB_ADMIN_PASSWORD, for the first admin: {e.message}") from None
            self.users.add("admin", password, ["admin"])
            log.info("created user admin (role admin) from HOARDDB_ADMIN_PASSWORD")
        else:
            log.warning("authentication is on and there are no users: nobody can log in. Create one with "
                        "`hoarddb user add admin --role admin --data %s`, or start once with "
                        "HOARDDB_ADMIN_PASSWORD set", self.config.data)

    # -- connections

    def over_budget(self, conn: Connection, held: int) -> None:
        """A connection's unfinished message would take the bytes of unfinished messages past
        receive_budget: it is not read further, what it sent before is answered, then it is
        told why and closed."""
        self.metrics.rejected.labels("receive_budget").inc()
        mib = 1 << 20
        log.warning("closing %s: its unfinished message (%d bytes so far) would take the messages being received "
                    "past receive_budget (%.1f of %.1f MiB held)", conn.peer, held, self.receiving / mib,
                    self.config.receive_budget / mib)
        conn.end_after_answers(ConnectionError_(
            f"the server is holding {self.receiving / mib:.1f} MiB of messages not yet received whole, across its "
            f"connections, and this connection's next message would take it past its limit "
            f"({self.config.receive_budget / mib:.1f} MiB, receive_budget); that message was not run (those sent "
            "before it were answered). Reconnect and send it again"))

    def _accepted(self) -> Connection:
        """The protocol of a connection just accepted; with TLS, counted while it shakes hands.

        Connections in their handshake count toward ``max_connections`` with the open ones:
        one accepted when they add up to the limit shakes hands only to be told it is
        refused (connection_opened), and each handshake ends within handshake_timeout."""
        conn = Connection(self)
        if self.tls_context is not None:
            self.metrics.connections_total.inc()
            conn.over_limit = len(self.connections) + len(self.handshaking) >= self.config.max_connections
            self.handshaking.add(conn)
        return conn

    def handshake_ended(self, conn: Connection) -> None:
        self.handshaking.discard(conn)

    def connection_opened(self, conn: Connection) -> bool:
        if self.tls_context is None:  # (a TLS connection was counted at its accept)
            self.metrics.connections_total.inc()
        if self.stopping:
            conn.abort_with(ConnectionError_("the server is stopping; try again after it restarts"))
            return False
        held = len(self.connections) + len(self.handshaking)
        if conn.over_limit or held >= self.config.max_connections:
            self.metrics.rejected.labels("max_connections").inc()
            log.warning("refusing %s: %d connections open or in their TLS handshake is the limit (max_connections)",
                        conn.peer, held)
            conn.abort_with(ConnectionError_(
                f"the server has {held} connections, its limit (max_connections); try again later"))
            return False
        self.connections.add(conn)
        self.metrics.connections.set(len(self.connections))
        log.info("connection %s opened (%d open)", conn.peer, len(self.connections),
                 extra={"hoarddb": {"peer": conn.peer, "event": "open"}})
        return True

    def busy_poller(self, sock) -> BusyPoll | None:
        """What polls a new connection's socket and the listeners while it is the only one, or
        None if this server does not busy-poll (busypoll.py)."""
        if not self._busy_poll or sock is None or self._listener is None:
            return None
        return BusyPoll([sock.fileno(), *(s.fileno() for s in self._listener.sockets)], self._busy_poll)

    def connection_closed(self, conn: Connection) -> None:
        if conn.cursors and self.engine is not None:  # its cursors go with it
            self.engine.cursors.close(list(conn.cursors))
            conn.cursors.clear()
        if conn in self.connections:
            self.connections.discard(conn)
            self.metrics.connections.set(len(self.connections))
            principal = conn.core.principal
            user = principal.user if principal is not None else None
            log.info("connection %s%s closed after %.1f s (%d open)", conn.peer,
                     f" of user {_quoted(user)}" if user else "", self.loop.time() - conn.opened,
                     len(self.connections), extra={"hoarddb": {"peer": conn.peer, "user": user, "event": "close"}})
        self.handshaking.discard(conn)
        self.idle_changed()

    def login_failed(self, conn: Connection, event) -> None:
        """A failed login (a LoginFailed event): counted by reason, logged, and counted
        toward the lockouts of its name and address when it was a guess."""
        self.metrics.auth_failures.labels(event.reason).inc()
        locked = []
        if event.reason in ("unknown_user", "wrong_password"):
            locked = self.authenticator.limiter.failed(event.user, conn.core.address)
        log.warning("failed login on %s: user %s, %s%s%s", conn.peer, _quoted(event.user),
                    event.reason.replace("_", " "), f" ({event.detail})" if event.detail else "",
                    "".join(f"; {what} locked out for {self.config.auth_lockout:g} s"
                            for what in (f"user {_quoted(event.user)}" if w == "user" else f"address {conn.core.address}"
                                         for w in locked)))

    def logged_in(self, conn: Connection, event) -> None:
        self.authenticator.limiter.succeeded(event.user, conn.core.address)
        log.info("connection %s logged in as %s", conn.peer, _quoted(event.user),
                 extra={"hoarddb": {"peer": conn.peer, "user": event.user, "event": "login"}})

    def idle_changed(self) -> None:
        if self._idle_event is not None:
            self._idle_event.set()

    async def _sweep_connections(self) -> None:
        """Close connections that never finished their handshake, sat idle too long, or took
        too long to send one message.

        A logged-in connection with no request in flight is closed when it has sent nothing
        for ``idle_timeout`` (idle_timeout), or when the message it is sending has not arrived
        whole within ``idle_timeout`` of its first byte (message_timeout): a client that
        trickles a message a byte at a time is never idle, and would otherwise hold its slot
        for good (slowloris). While a request of the connection is in flight neither clock
        runs: the server may have stopped reading it meanwhile (backpressure), and its answer
        is on the way. Uploads are requests in flight: their own timeout (UploadReader) fails
        the put first, then a chunk still trickling is a message like any other.
        """
        interval = max(0.05, min(1.0, (self.config.idle_timeout or 60) / 4, self.config.handshake_timeout / 4 or 1))
        while True:
            await asyncio.sleep(interval)
            now = self.loop.time()
            idle_timeout = self.config.idle_timeout
            if self.engine is not None:
                self.engine.cursors.expire()  # idle cursors close even when no request comes
            for conn in list(self.handshaking):  # the TLS layer ends each handshake within its timeout;
                if now - conn.opened > (self.config.handshake_timeout or 60) + 5:  # this is a backstop
                    self.handshaking.discard(conn)
            for conn in list(self.connections):
                if conn.closed:
                    continue
                if not conn.ready:
                    if self.config.handshake_timeout and now - conn.opened > self.config.handshake_timeout:
                        self.metrics.rejected.labels("handshake_timeout").inc()
                        conn.abort_with(HoardTimeoutError(
                            f"no hello and login within {self.config.handshake_timeout:g} s; closing"))
                elif not idle_timeout:
                    continue
                elif not conn.writable.is_set() and now - conn.write_paused_at > idle_timeout:
                    self._close_stalled_reader(conn, now)
                elif conn.busy or conn.uploads:
                    conn.message_started = now  # the message's clock starts again once it is answered
                elif conn.pending and now - conn.message_started > idle_timeout:
                    self._close_slow_message(conn, now)
                elif now - conn.last_activity > idle_timeout:
                    self.metrics.rejected.labels("idle_timeout").inc()
                    conn.abort_with(HoardTimeoutError(
                        f"idle for {idle_timeout:g} s (idle_timeout); closing. Reconnect to go on"))
            conn = None  # else the last one swept stays alive in this frame, closed or not, until another comes

    def _close_stalled_reader(self, conn: Connection, now: float) -> None:
        """Close a connection that has read none of its answers for idle_timeout while they backed
        up (a request in flight or not: a stream it never reads would otherwise hold it for good)."""
        self.metrics.rejected.labels("send_timeout").inc()
        log.warning("closing %s: it has read none of its answers for %.1f s (idle_timeout %g s)",
                    conn.peer, now - conn.write_paused_at, self.config.idle_timeout)
        conn.abort_with(HoardTimeoutError(
            f"this connection read none of its answers for {self.config.idle_timeout:g} s (idle_timeout); "
            "closing. Read the answers of what you send, and reconnect to go on"))

    def _close_slow_message(self, conn: Connection, now: float) -> None:
        """Close a connection whose message has not arrived whole within idle_timeout of its first byte."""
        received, length = conn.pending, conn.pending_length
        of = f"{received} of its {length} bytes" if length is not None else f"{received} bytes"
        self.metrics.rejected.labels("message_timeout").inc()
        log.warning("closing %s: a message has been arriving for %.1f s, %s received (idle_timeout %g s)",
                    conn.peer, now - conn.message_started, of, self.config.idle_timeout)
        conn.abort_with(HoardTimeoutError(
            f"a message did not arrive whole within {self.config.idle_timeout:g} s of its first byte "
            f"({of} received; idle_timeout); closing. Reconnect to go on"))

    def _quiet(self) -> bool:
        """Whether nothing is in flight but the writes of the group commit's flush: at most
        one connection, none of its requests read and waiting, no task in either pool. Then
        no one can read before the flush's answers are out, and its LMDB commit may wait
        until after them (GroupCommitter, storage/kv.py's commits_deferred)."""
        return (len(self.connections) <= 1 and not any(conn.queue for conn in self.connections)
                and not self._reads.busy and not self._writes.busy)

    def _limits(self):
        """The limits a request's evaluation runs inside, on any thread: the regex_timeout."""
        if self.config.regex_timeout == DEFAULT_REGEX_TIMEOUT:  # the filters' own default: nothing to set
            return contextlib.nullcontext()
        return regex_time_limit(self.config.regex_timeout)

    def _run(self, doc: dict) -> dict:
        """The engine's answer to ``doc``, within the server's limits (on whichever thread)."""
        with self._limits():
            return self.engine.execute(doc)

    # -- requests

    def dispatch(self, conn: Connection, request: Request) -> str:
        """How a request runs: "inline" (on the loop, now), "write" (in the next group commit),
        "read" (on a read-pool thread, waited for a moment) or "pool" (in a thread, the loop
        not waiting). Remembered on the request once it is final: a read behind this
        connection's writes is judged again after they ran (they may make it longer)."""
        if conn.revoked is not None:
            return self._refuse_revoked(conn, request)
        how = request.how
        if how is not None:
            return how
        doc = request.doc
        try:
            op = check_request(doc)  # before anything looks a field up
        except HoardError as e:
            request.refusal, request.how = e, "inline"  # answered with its refusal, in its turn
            return "inline"
        try:
            principal = conn.core.principal
            if not principal.admin and not self._authorized(principal, request):
                how = "inline"  # answered at once with its refusal
            elif op in CURSOR_OPS and not self._own_cursors(conn, request):
                how = "inline"  # another connection's cursor, or none: refused in its turn
            elif self.cluster is not None and "_node" in doc and not principal.admin:
                request.refusal = UnauthorizedError("the request field _node is for the nodes of a cluster (they log "
                                                    "in with the admin role); leave it out")
                how = "inline"
            elif is_part(doc.get("bucket")):  # a cluster node's hidden partition: not a name a client may give
                try:
                    check_name(doc["bucket"], "bucket")
                except HoardError as e:
                    request.refusal = e
                how = "inline"
            elif self.cluster is not None and self.cluster.takes(doc):
                how = "cluster"  # forwarded, gathered, or first taken in etcd (run_request)
            elif op in SERVER_OPS or doc.get("upload"):
                how = "pool"
            else:
                verb = operations.VERBS.get(op)
                if verb is not None and verb.write:
                    how = "write" if self.committer is not None else "pool"
                elif op in INLINE_CATALOG_READS or (verb is not None and self.engine.is_quick_read(doc)
                                                    and not _matches_by_regex(doc)):
                    how = "inline"
                else:
                    how = "read" if op not in STREAMS and not is_write(op) else "pool"
        except Exception as e:  # a bug: this request alone is refused, the connection goes on
            log.error("request %.40s on %s could not be dispatched", op, conn.peer, exc_info=e)
            request.refusal, request.how = InternalError(f"{type(e).__name__}: {e} (please report this)"), "inline"
            return "inline"
        if how == "write" or not conn.unexecuted:
            request.how = how
        return how

    def _own_cursors(self, conn: Connection, request: Request) -> bool:
        """Whether every cursor a more or close_cursor names was opened on this connection; if
        not, CURSOR_NOT_FOUND is kept on the request (another's cursor is as good as none)."""
        named = request.doc.get("cursor")
        if request.doc.get("op") != MORE.name:  # close_cursor closes those of its ids that are this connection's
            ids = named if isinstance(named, list) else [named]
            request.doc["cursor"] = [i for i in ids if _hashable(i) and i in conn.cursors]
            conn.cursors.difference_update(request.doc["cursor"])
            return True
        for cursor_id in [named]:
            try:
                mine = cursor_id in conn.cursors
            except TypeError:  # an unhashable id
                mine = False
            if not mine and not (isinstance(cursor_id, int) and not isinstance(cursor_id, bool)):
                request.refusal = BadValueError(f"a cursor id is the integer an answer's 'cursor' gave, "
                                                f"got {cursor_id!r:.40}")
                return False
            if not mine:
                request.refusal = CursorNotFoundError(
                    f"cursor {cursor_id} is not open on this connection: it was read to its end, closed, left "
                    f"unread longer than cursor_timeout ({self.config.cursor_timeout:g} s), or opened on another "
                    "connection; run the read again", cursor=cursor_id)
                return False
        return True

    def _room_for_cursor(self, conn: Connection) -> bool:
        """Whether this connection may hold one more cursor (max_cursors_per_connection), once the
        ones that timed out are forgotten."""
        if len(conn.cursors) >= self.config.max_cursors_per_connection:
            conn.cursors &= set(self.engine.cursors.ids())
        return len(conn.cursors) < self.config.max_cursors_per_connection

    def _refuse_revoked(self, conn: Connection, request: Request) -> str:
        """A request of a connection whose user was removed, or whose password changed: refused;
        the first one ends the connection (after what it read is answered)."""
        reason, error = conn.revoked
        request.refusal = error
        request.how = "inline"
        if conn.goodbye is None:
            self.metrics.rejected.labels(reason).inc()
            log.warning("ending connection %s of user %s: %s", conn.peer, _quoted(conn.core.principal.user),
                        "the user was removed" if reason == "user_removed" else "its password was changed")
            conn.end_after_answers(error)
        return "inline"

    # -- users changed (by `hoarddb user` in another process, or over the wire)

    async def _watch_users(self) -> None:
        """Look at the users file every USERS_POLL seconds; when it changed (``hoarddb user``
        run in another process), apply it to the open connections (:meth:`users_changed`)."""
        stamp = self._users_stamp()
        while True:
            await asyncio.sleep(USERS_POLL)
            now = self._users_stamp()
            if now != stamp:
                stamp = now
                log.info("the users file %s changed: applying it to the open connections", self.users.path)
                self.users_changed()
                if self.cluster is not None:  # (a change the cluster made here finds nothing to send)
                    await self.cluster.users.local_changed()

    def _users_stamp(self):
        try:
            st = os.stat(self.users.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino

    def users_changed(self) -> None:
        """Apply the users as they are now to every logged-in connection: a connection whose
        user was removed, or whose password changed since it logged in, is revoked (its next
        request is refused UNAUTHORIZED saying why, then it is closed); one whose user's roles
        changed holds the new roles from its next request on."""
        if self.authenticator is None:
            return
        try:
            records = {u["name"]: u for u in self.users.users()}
        except HoardError as e:  # a damaged file: logins are refused meanwhile (users.py logs it, once)
            log.debug("the users file could not be read; open connections keep their users: %s", e.message)
            return
        for conn in list(self.connections):
            principal = conn.core.principal
            if principal is None or principal.user is None or conn.closed or conn.revoked is not None:
                continue
            name = principal.user
            record = records.get(name)
            if record is None:
                conn.revoked = ("user_removed", UnauthorizedError(
                    f"user {name!r} was removed while this connection was open: it can run nothing more, "
                    "and the server closes it", user=name))
            elif principal.key is not None and bytes(record["credentials"]["stored_key"]) != principal.key:
                conn.revoked = ("password_changed", UnauthorizedError(
                    f"the password of user {name!r} was changed while this connection was open: the server "
                    "closes it; connect again with the new password", user=name))
            elif record["roles"] != principal.roles:
                conn.core.principal = Principal(name, list(record["roles"]), principal.key)
                log.info("connection %s of user %s: its roles are now %s", conn.peer, _quoted(name),
                         ", ".join(_role_text(r) for r in record["roles"]) or "none")

    @staticmethod
    def _authorized(principal, request: Request) -> bool:
        """Whether the principal may run the request; if not, why is kept on it (``refusal``)."""
        try:
            authorize(principal, request.doc)
        except HoardError as e:
            request.refusal = e
            return False
        return True

    def run_inline(self, conn: Connection, request: Request, arrived: int) -> None:
        """Run a one-key read (or answer a refusal) on the loop, and answer it."""
        doc = request.doc
        try:
            if request.refusal is not None:  # dispatch authorized it, or kept why not
                if request.id in conn.uploads:  # a refused upload: its chunks are dropped as they come
                    conn.finish_upload(request.id)
                raise request.refusal
            answer = self._visible(conn, doc, self._run(doc))
        except HoardError as e:
            answer = e.to_answer()
        except Exception as e:  # a bug: say so in the same shape, keep serving
            answer = self._bug(conn, doc, e)
        self._answer(conn, request.id, doc, answer, arrived)

    def run_read(self, conn: Connection, request: Request, arrived: int):
        """Run a read that may scan on a read-pool thread; the loop waits for it a moment
        (READ_WAIT) and answers at once if it is done: None. A longer one finishes in the
        background while the loop serves others: the task that answers it."""
        doc = request.doc
        future = self._reads.submit(self._read_encoded, conn, doc, request.id)
        try:
            answer, data = future.result(READ_WAIT)
        except concurrent.futures.TimeoutError:
            async def rest():
                answer, data = await asyncio.wrap_future(future)
                self._answer(conn, request.id, doc, answer, arrived, data)
            return conn.finish_later(request, arrived, rest())
        self._answer(conn, request.id, doc, answer, arrived, data)
        return None

    def _read_encoded(self, conn: Connection, doc: dict, rid) -> tuple[dict, bytes]:
        """On a read-pool thread: a read's answer and its message's bytes, encoded here (a
        list of documents one at a time, see encode_answer), not on the event loop."""
        answer = self._read(conn, doc)
        try:
            return answer, encode_answer({"id": rid, **answer}, conn.core.max_message_size)
        except HoardError as e:
            answer = e.to_answer()
            return answer, conn.core.encode({"id": rid, **answer})

    def _read(self, conn: Connection, doc: dict) -> dict:
        """On a read-pool thread: a read's answer, refusals included (dispatch authorized it).

        Not run when its connection closed while it waited for a thread: clients that send
        a scan and hang up would otherwise leave the pool a queue of scans nobody reads,
        growing as long as they come faster than the scans run."""
        if conn.closed:
            return ConnectionError_("the connection closed before this read ran; it was not run").to_answer()
        try:
            return self._visible(conn, doc, self._run(doc))
        except HoardError as e:
            return e.to_answer()
        except Exception as e:  # a bug: say so in the same shape, keep serving
            return self._bug(conn, doc, e)

    def submit_write(self, conn: Connection, request: Request, arrived: int) -> None:
        """Hand a write to the group commit; it is answered once durable (or refused)."""
        doc = request.doc

        def done(result, rid=request.id):
            try:
                if type(result) is dict:  # (the engine's answer: nearly always)
                    answer = result
                    if self.cluster is not None and (again := self.cluster.again(doc, answer)) is not None:
                        self.loop.create_task(self._run_again(conn, rid, again, arrived))
                        return  # (a cluster's pop that found its partition empty: asked the cluster's way)
                elif isinstance(result, HoardError):
                    answer = result.to_answer()
                elif isinstance(result, BaseException):
                    answer = self._bug(conn, doc, result)
                else:
                    answer = result
                self._answer(conn, rid, doc, answer, arrived)
            finally:
                conn.write_ran()  # after its answer: the requests it pumps are answered after it

        self.committer.submit(doc, done)

    async def _run_again(self, conn: Connection, rid, doc: dict, arrived: int) -> None:
        """Run ``doc`` the cluster's way and answer it (ClusterNode.again)."""
        try:
            answer = await self.cluster.run(doc)
        except Exception as e:  # a bug: say so in the same shape, keep serving
            answer = self._bug(conn, doc, e)
        self._answer(conn, rid, doc, answer, arrived)

    async def run_request(self, conn: Connection, request: Request, arrived: int) -> None:
        """Run one request in a pool and send its answer (a write's once it is durable)."""
        doc, rid = request.doc, request.id
        op = doc.get("op")
        upload = conn.uploads.get(rid)
        write = is_write(op)
        try:
            if request.how == "cluster":  # (an upload's bytes go along: a spread blob bucket's put)
                answer = await (self.cluster.run(doc) if upload is None else self.cluster.run(doc, upload=upload))
                if "cursor" in answer or op == MORE.name:  # a cluster cursor's: the connection's, as any cursor
                    answer = self._visible(conn, doc, answer)
            else:
                answer = await self._execute(conn, doc, op, write, upload)
        except HoardError as e:
            answer = e.to_answer()
        except Exception as e:  # a bug: say so in the same shape, keep serving
            answer = self._bug(conn, doc, e)
        finally:
            if upload is not None:
                conn.finish_upload(rid)
        result = answer.get("result")
        if op in STREAMS and answer.get("ok") == 1 and (hasattr(result, "__next__") or hasattr(result, "__anext__")):
            await self._stream(conn, rid, doc, result, arrived)
            return
        if write and self.committer is not None and answer.get("ok") == 1 and request.how != "cluster":
            # (a refusal wrote nothing, and a cluster's answer is durable where it ran: answer now)
            def durable(error, answer=answer):
                self._answer(conn, rid, doc, error.to_answer() if error is not None else answer, arrived)
            self.committer.after_durable(durable)
        else:
            self._answer(conn, rid, doc, answer, arrived)

    async def _execute(self, conn: Connection, doc: dict, op: Any, write: bool, upload) -> dict:
        principal = conn.core.principal
        authorize(principal, doc)
        if op in SERVER_OPS:
            result = await self.loop.run_in_executor(self._writes, self._server_op, principal, doc)
            if op in USER_CHANGES:
                if self.cluster is not None:  # a cluster's users live in etcd: every node applies it
                    await self.cluster.users.publish(op, doc.get("user"))
                self.users_changed()  # at once: the admin's answer comes after the change applies
            return {"ok": 1, "result": result}
        request = {k: v for k, v in doc.items() if k not in ("id", "upload")}
        if upload is not None:
            args = dict(request.get("args") or {})
            if operations.OPERATIONS[op].upload == "docs" and isinstance(args.get("docs"), list) \
                    and len(args["docs"]) == 1:
                args["docs"] = [{**args["docs"][0], "data": upload}]  # a restored blob, keeping its id
            elif isinstance(args.get("doc"), dict):
                args["doc"] = {**args["doc"], "data": upload}
            elif "field" in request and "doc" not in args:  # a blob store field's put: its data is its key
                args["key"] = {**args["key"], "data": upload} if isinstance(args.get("key"), dict) else upload
            else:
                args["doc"] = upload
            request["args"] = args
        answer = await self.loop.run_in_executor(self._writes if write else self._reads, self._run, request)
        return self._visible(conn, doc, answer)

    def _visible(self, conn: Connection, doc: dict, answer: dict) -> dict:
        """An answer the table marks ``narrowed`` (list_databases) shows a user only the
        databases they hold a role on. A cursor an answer opens is the connection's (only it
        may read on, and it closes with it); one read to its end is no longer."""
        if "cursor" in answer:
            if doc.get("op") != MORE.name and "_node" not in doc and not self._room_for_cursor(conn):
                # (a node's part of a cluster cursor is counted by the node that asked, on its client's connection)
                self.engine.cursors.close(answer["cursor"])  # a read with more left than its first batch: refused
                return LimitExceededError(
                    f"this connection has {len(conn.cursors)} cursors open, the most one connection may have "
                    "(max_cursors_per_connection); read them to their end or close them (close_cursor), or ask "
                    "for fewer documents (limit) or bigger batches (batch_size)").to_answer()
            conn.cursors.add(answer["cursor"])
            if conn.closed:  # closed while this ran: connection_closed has freed the others
                self.engine.cursors.close(answer["cursor"])
        elif doc.get("op") == MORE.name:
            conn.cursors.discard(doc.get("cursor"))
        if doc.get("op") in NARROWED and not auth.is_admin(conn.core.principal):
            answer = {**answer, "result": auth.visible_databases(conn.core.principal, answer.get("result") or [])}
        return answer

    def _bug(self, conn: Connection, doc: dict, exc: BaseException) -> dict:
        log.error("request %s on %s failed", str(doc.get("op"))[:40], conn.peer, exc_info=exc)
        return InternalError(f"{type(exc).__name__}: {exc} (please report this)").to_answer()

    def _server_op(self, principal, doc: dict) -> Any:
        """Run an operation the table says the server runs (``runs=SERVER``): its method ``_op_<name>``."""
        return getattr(self, "_op_" + doc["op"])(principal, doc)

    def _op_whoami(self, principal, doc: dict) -> dict:
        return {"user": principal.user, "roles": [_role_text(r) for r in principal.roles]}

    def _op_list_users(self, principal, doc: dict) -> list:
        return [{"name": u["name"], "roles": [_role_text(r) for r in u["roles"]]} for u in self.users.users()]

    def _op_create_user(self, principal, doc: dict) -> dict:
        answer = self.users.add_credentials(doc.get("user"), doc.get("credentials"), list(doc.get("roles") or []))
        _user_change_log(principal, "created", doc)
        return answer

    def _op_update_user(self, principal, doc: dict) -> dict:
        answer = self.users.update(doc.get("user"), credentials=doc.get("credentials"),
                                   roles=doc.get("roles") if "roles" in doc else None)
        _user_change_log(principal, "changed", doc)
        return answer

    def _op_drop_user(self, principal, doc: dict) -> dict:
        answer = self.users.remove(doc.get("user"))
        _user_change_log(principal, "removed", doc)
        return answer

    def _op_set_roles(self, principal, doc: dict) -> dict:
        roles = doc.get("roles")
        if not isinstance(roles, list):
            raise BadValueError("set_roles needs 'roles', a list such as [\"readWrite:app\", \"read:reports\"] "
                                "(an empty list takes every role away)")
        answer = self.users.set_roles(doc.get("user"), roles)
        _user_change_log(principal, "given new roles", doc)
        return answer

    def _op_slowlog(self, principal, doc: dict) -> dict:
        """The slow log, newest first (``limit``: at most so many); ``reset``: forget it after."""
        limit = doc.get("limit")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise InvalidArgumentError(f"slowlog: limit is a whole number from 1, got {type(limit).__name__} "
                                       f"{limit!r:.40}")
        if limit is not None and limit < 1:
            raise BadValueError(f"slowlog: limit is a whole number from 1, got {limit}")
        entries = self.slowlog.newest(limit)
        if doc.get("reset") is True:
            self.slowlog.reset()
        return {"slow_ms": self.config.slow_ms, "slowlog_length": self.config.slowlog_length, "entries": entries}

    def _op_cluster_map(self, principal, doc: dict) -> dict:
        """A single server's map: no cluster (a node answers it itself: hoarddb/cluster/client_map.py)."""
        return {"cluster": False}

    @contextlib.contextmanager
    def _answers_together(self):
        """Inside, each connection's answers are held, then written with one send per connection."""
        corked: list[Connection] = []
        self._corking = corked
        try:
            yield
        finally:
            self._corking = None
            for conn in corked:
                conn.uncork()

    def _answer(self, conn: Connection, rid, doc: dict, answer: dict, arrived: int, data: bytes | None = None) -> None:
        """Send the answer to ``doc`` (``data``: its message, encoded already) and count it."""
        if self._corking is not None and conn.cork():
            self._corking.append(conn)
        conn.send({"id": rid, **answer} if data is None else data)
        code = None if answer.get("ok") == 1 else answer.get("codeName")
        self._answered(conn, doc, arrived, code)
        if type(op := doc.get("op")) is str and op in _LOGGED_OPS:  # (a malformed op may be anything, unhashable)
            _log_admin_op(conn, doc, answer, code)
        conn.done()

    def _answered(self, conn: Connection, doc: dict, arrived: int, code: str | None) -> None:
        """Count an answered request; keep and log it when it was slow (``slow_ms``)."""
        took = perf_counter_ns() - arrived  # the one clock read per request
        op = doc.get("op")
        self.metrics.answered(op, took, code)
        if took >= self.slowlog.threshold_ns:
            principal = conn.core.principal
            entry = self.slowlog.add(took, doc, conn.peer, principal.user if principal is not None else None, code)
            where = ".".join(x for x in (entry["db"], entry["bucket"], entry["field"]) if x)
            log.warning("slow request: %s%s took %.1f ms on %s%s%s", entry["op"], f" on {where}" if where else "",
                        took / 1e6, conn.peer, f" of user {_quoted(entry['user'])}" if entry["user"] else "",
                        f", refused {code}" if code else "",
                        extra={"hoarddb": {k: v for k, v in entry.items() if k not in ("id", "time")}})

    async def _stream(self, conn: Connection, rid, doc: dict, chunks, arrived: int) -> None:
        """Send a blob's chunks as they are read, never more than the connection's write buffer ahead
        (``chunks``: an iterator read in a thread, or an async one: a stream a cluster node relays)."""
        codename = None
        relayed = hasattr(chunks, "__anext__")
        try:
            while not conn.closed:
                if relayed:
                    chunk = await anext(chunks, None)
                else:
                    chunk = await self.loop.run_in_executor(self._reads, next, chunks, None)
                if chunk is None:
                    conn.send({"id": rid, "ok": 1, "end": True})
                    break
                view = memoryview(chunk)
                for start in range(0, len(view), CHUNK_SIZE):
                    conn.send({"id": rid, "ok": 1, "chunk": bytes(view[start:start + CHUNK_SIZE])})
                    await conn.writable.wait()
        except HoardError as e:
            codename = e.codeName
            conn.send(error_answer(rid, e))
        except Exception as e:
            log.exception("stream on %s failed", conn.peer)
            err = InternalError(f"{type(e).__name__}: {e} (please report this)")
            codename = err.codeName
            conn.send(error_answer(rid, err))
        finally:
            if relayed:
                await chunks.aclose()
            elif (close := getattr(chunks, "close", None)) is not None:
                await self.loop.run_in_executor(self._reads, close)
        self._answered(conn, doc, arrived, codename)
        conn.done()

    async def _exposition(self) -> bytes:
        engine_text = b""
        if self.engine is not None and not self.stopping:
            try:
                await self.loop.run_in_executor(self._reads, self.engine.execute, {"op": METRICS.name})
                engine_text = self.engine.metrics.exposition()
            except HoardError:
                pass
        cluster_text = self.cluster.exposition() if self.cluster is not None else b""
        return self.metrics.exposition() + engine_text + cluster_text


_RESULT_KEY = b"\x04result\x00"
#: Answers of at most this many documents are encoded in one call (short: one call is quicker).
ONE_CALL = 64


def encode_answer(answer: dict, max_size: int) -> bytes:
    """The message of an answer; one whose ``result`` is a list of documents is encoded a
    document at a time. DocumentTooLargeError as soon as the message passes ``max_size``.

    bson's encoder holds the GIL for the whole of one call: a find answering 100,000
    documents (28 MB), encoded in one call on the event loop, held every connection for
    280 ms. A read thread encodes its answer a document at a time, and the loop runs in
    between (it takes the GIL back within the interpreter's switch interval, 5 ms).
    """
    result = answer.get("result")
    if type(result) is not list or len(result) <= ONE_CALL or not all(isinstance(v, Mapping) for v in result):
        return encode_message(answer, max_size)
    head = encode_checked({k: v for k, v in answer.items() if k != "result"}, "an answer")
    size = len(head) + len(_RESULT_KEY) + 5
    parts = []
    for i, value in enumerate(result):
        part = b"\x03" + str(i).encode() + b"\x00" + encode_checked(value, "a document of the answer")
        size += len(part)
        if size > max_size:
            raise DocumentTooLargeError(
                f"the answer is over the {max_size}-byte limit of one message (its first {i + 1} of "
                f"{len(result)} documents pass it); ask for fewer with limit, narrow the filter, or read "
                "the whole bucket in pages with export", size=size)
        parts.append(part)
    array = b"".join(parts)
    body = head[4:-1] + _RESULT_KEY + struct.pack("<i", len(array) + 5) + array + b"\x00"
    return struct.pack("<i", len(body) + 5) + body + b"\x00"


def _matches_by_regex(doc: dict) -> bool:
    """Whether a request's filter holds a regular expression: a quick read that does is run
    in the read pool, not on the loop (its matching may take up to regex_timeout)."""
    args = doc.get("args")
    return isinstance(args, dict) and filter_has_regex(args.get("filter"))


#: Operations whose every run is logged with its outcome (the table's ``logged``).
_LOGGED_OPS = frozenset(name for name, op in operations.OPERATIONS.items() if op.logged)


def _log_admin_op(conn: Connection, doc: dict, answer: dict, code: str | None) -> None:
    """Log a check, backup or TTL sweep run over the wire: by whom, and what came of it."""
    principal = conn.core.principal
    user = principal.user if principal is not None else None
    op, result = doc.get("op"), answer.get("result")
    problems = 0
    if code is not None:
        outcome = f"refused {code}: {str(answer.get('message'))[:200]}"
    elif isinstance(result, dict) and isinstance(result.get("buckets"), list):  # a check's report, a backup's
        buckets = result["buckets"]
        problems = sum(len(b.get("problems") or []) + (b.get("more") or 0) for b in buckets if isinstance(b, dict))
        outcome = f"{len(buckets)} buckets" + (f", {problems} problems" if any(
            isinstance(b, dict) and "problems" in b for b in buckets) else "")
    elif isinstance(result, dict) and "expired" in result:  # a TTL sweep's
        outcome = f"{result['expired']} documents expired"
    else:
        outcome = "done"
    scope = ".".join(x for x in (doc.get("db"), doc.get("bucket")) if isinstance(x, str))
    log.log(logging.WARNING if problems else logging.INFO,
            "%s%s by %s on %s: %s", op, f" of {scope}" if scope else "", _quoted(user) if user else "(no user)",
            conn.peer, outcome, extra={"hoarddb": {"peer": conn.peer, "user": user, "event": op}})


def _user_change_log(principal, what: str, doc: dict) -> None:
    """Log a change of users made over the wire (once made)."""
    by = principal.user if principal is not None else None
    log.info("user %s %s by %s", _quoted(doc.get("user")), what, _quoted(by) if by else "a connection without a user",
             extra={"hoarddb": {"user": by, "target": doc.get("user") if isinstance(doc.get("user"), str) else None,
                                "event": "user " + what}})


def _quoted(user) -> str:
    """A user name as the log shows it: quoted and cut short (a client chose it), or "(none)"."""
    return "(none)" if user is None else f"{user!r:.70}"


def _role_text(role: dict) -> str:
    return role["role"] + (f":{role['db']}" if role.get("db") else "")


def _quiet_tls_errors(loop, context) -> None:
    """TLS handshakes that fail (a plaintext client, a port scan) are the client's problem: log them quietly."""
    exc = context.get("exception")
    if isinstance(exc, (ssl.SSLError, ConnectionResetError, BrokenPipeError, TimeoutError)) or \
            "handshake" in str(context.get("message", "")).lower():
        log.debug("connection failed: %s %s", context.get("message"), exc)
        return
    loop.default_exception_handler(context)


#: The server process's garbage collector looks for cycles among new containers after this
#: many more were made than freed (Python's default is 700; see :func:`collect_less`).
GC_YOUNG = 10_000


def collect_less() -> None:
    """Set the garbage collector of a server's process (:func:`run` owns the process; a
    program that embeds a :class:`Server` keeps its own settings).

    A pipeline of 100 requests keeps about a thousand containers alive until its answers
    leave, so at Python's default threshold the young generation is searched for cycles
    several times per pipeline, and each search promotes the requests still in flight
    to older generations; every ~7,000 promotions a full collection walks every object
    of the process (~10 ms here). Measured over 100,000 pipelined pushes and pops: 7% of
    the server's CPU, and none with this (docs/benchmarks.md). The server's
    requests make no cycles worth collecting sooner. What the imports made (modules,
    classes, functions: three quarters of the objects) is frozen, so that no full
    collection walks it again.
    """
    gc.freeze()
    young, *older = gc.get_threshold()
    gc.set_threshold(max(young, GC_YOUNG), *older)


def run(config: ServerConfig) -> int:
    """Run a server in this process until it is stopped; the exit status."""
    logformat.configure(config.log_level, config.log_format)
    server = Server(config)
    collect_less()
    try:
        with asyncio.Runner(loop_factory=config.loop_factory()) as runner:
            runner.run(server.serve())
    except HoardError as e:
        log.error("%s: %s", e.codeName, e.message)
        return 1
    except OSError as e:
        log.error("cannot listen on %s:%s: %s", config.host, config.port, e)
        return 1
    return 0
