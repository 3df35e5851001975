"""The blocking client: one socket to a server, and the executor that :class:`hoarddb.api.Client` runs on.

    client = hoarddb.api.Client(RemoteExecutor(ConnectOptions(host="127.0.0.1", insecure=True)))

is what ``hoarddb.connect("hoarddb://127.0.0.1/?insecure=true")`` returns: the same
Client as ``hoarddb.open(path)``, whose requests go over the wire. This module is the
blocking adapter over :mod:`hoarddb.client.core` (ids, encoding, answers filed by id,
errors, the retry rule, streams and uploads): it owns the socket, the waiting, the
timeouts and the taking of turns between threads. Errors come back as the same classes
(``error_from_answer``); a lost connection is ConnectionError_, a late answer
HoardTimeoutError, and the next call reconnects.

What a call does when the connection fails:

    found dead before sending (the server restarted,   a new connection carries the request:
    or closed it idle; its goodbye is read first)       nothing was sent on the old one
    lost after sending a read                          sent once more on a new connection
    lost after sending a write                         ConnectionError_ / HoardTimeoutError with
                                                       ``outcome_unknown = True``: never resent
    the client closed by another thread meanwhile      ClosedError (``outcome_unknown`` as above)
    queued behind another thread's call that timed     HoardTimeoutError, ``outcome_unknown = False``:
    out, or waiting its turn ``timeout`` seconds       never sent (every caller hears within about
    while nothing moved on the connection              one timeout of the server falling silent)

Against a cluster (the server's hello names its node), each request for one document goes
to its partition's owner over a connection of its own to that node, the URL's options
with the node's address (hoarddb/client/router.py; ``route="any"`` turns it off).

Blobs: a ``put`` whose data is a file object or more than 4 MiB is uploaded in 1 MiB
chunks read as they are sent; ``stream`` gives an iterator that reads the server's
chunks as it is consumed. If another request needs the connection before a stream is
consumed, that stream's chunks wait for it, past a few in memory in a temporary file
(memory stays bounded), and the iterator reads them from there.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Iterator

from .. import busypoll
from ..errors import (ClosedError, ConnectionError_, HoardError, HoardTimeoutError, PartitionUnavailableError,
                      ProtocolError, UnknownVerbError, error_from_answer)
from .core import (STREAMS, UPLOADS, ClientCore, Stream, bad_bytes, check_request, connection_lost, may_resend, not_hoarddb,
                   nothing_sent, ordinal, result, retryable, stream_closed, stream_of, unanswered, upload_source)
from .core import _RETRYABLE  # noqa: F401 - where it was: the table's tests read it here
from .options import ConnectOptions
from .router import READ_MAP, Owner, Router

_RECV = 256 * 1024


def dial(o: ConnectOptions, refused: type[ConnectionError_] = ConnectionError_) -> socket.socket:
    """A TCP connection to ``o``'s address; HoardTimeoutError past ``connect_timeout``, ``refused``
    (the connection error, or a kind of it) when nothing there takes it."""
    try:
        return socket.create_connection((o.host, o.port), timeout=o.connect_timeout)
    except socket.timeout:
        raise HoardTimeoutError(f"no answer from {o.address} within {o.connect_timeout:g} s (connect_timeout)",
                            outcome_unknown=False) from None
    except OSError as exc:
        raise refused(f"cannot connect to {o.address}: {exc.strerror or exc}; is the server running, "
                      "on this host and port?", outcome_unknown=False) from None


class Connection:
    """Connection is one open, logged-in socket to a server (blocking; not thread-safe by itself).

    The socket, the waiting and the timeouts are this class's; ids, encoding and the
    filing of answers by id are its :class:`ClientCore`'s (``core``).
    """

    def __init__(self, options: ConnectOptions):
        self.options = options
        self.closed = False
        #: Why the server closed the connection, when it said so (its goodbye message).
        self.error: HoardError | None = None
        #: Whether a request went out on it (a read that fails on a fresh connection is not resent).
        self.used = False
        self.core = ClientCore(options.user, options.password)
        #: polls the socket for a moment before a blocking recv (hoarddb/busypoll.py), or None
        self.poller: busypoll.BusyPoll | None = None  # (none during the handshake)
        self._sent: float | None = None  # when the last request went, until the first read after it
        #: When the connection last moved (time.monotonic()): bytes came from the server, or it took
        #: a whole request or chunk of ours. A call waiting for its turn counts its silence from here.
        self.moved = time.monotonic()
        #: When the server stayed silent for ``timeout`` (time.monotonic()); None while it has not.
        self.timed_out: float | None = None
        self.sock = self._open()
        try:
            self._handshake()
        except BaseException:
            self.close()
            raise
        self.sock.settimeout(options.timeout)
        #: the socket when it speaks TLS (which may hold bytes read but not yet taken), else None
        self._tls: ssl.SSLSocket | None = self.sock if isinstance(self.sock, ssl.SSLSocket) else None
        self._readable_poll: select.poll | None = None
        if hasattr(select, "poll"):
            self._readable_poll = select.poll()
            self._readable_poll.register(self.sock.fileno(), select.POLLIN)
        self.poller = (busypoll.BusyPoll([self.sock.fileno()], options.busy_poll / 1e6)
                       if options.busy_poll and busypoll.unavailable() is None else None)

    # -- opening

    def _open(self) -> socket.socket:
        """A connected socket to the first of the servers (``options.candidates()``) that can be reached."""
        *others, last = self.options.candidates()
        for o in others:
            try:
                return self._open_one(o)
            except (ConnectionError_, HoardTimeoutError):
                pass  # the next one
        return self._open_one(last)

    def _open_one(self, o: ConnectOptions) -> socket.socket:
        context = o.ssl_context()  # a CA file that cannot be read is refused before connecting
        sock = dial(o)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if context is None:
            return sock
        try:
            tls = context.wrap_socket(sock, server_hostname=o.host)
        except socket.timeout:
            sock.close()
            raise HoardTimeoutError(f"TLS handshake with {o.address} took over {o.connect_timeout:g} s; "
                                "is it a hoardDB server?", outcome_unknown=False) from None
        except (ssl.SSLError, OSError) as exc:
            sock.close()
            raise o.tls_advice(exc) from None
        try:
            o.check_fingerprint(tls.getpeercert(binary_form=True))
        except BaseException:
            tls.close()
            raise
        return tls

    def _handshake(self) -> None:
        core = self.core
        self._send(core.start())
        while not core.ready:
            try:
                data = self.sock.recv(_RECV)
            except socket.timeout:
                raise HoardTimeoutError(f"no handshake answer from {self.options.address} within "
                                    f"{self.options.connect_timeout:g} s; is it a hoardDB server?",
                                    outcome_unknown=False) from None
            except (ssl.SSLError, OSError) as exc:
                raise self._lost(exc, handshake=True) from None
            if not data:
                raise self._lost(None, handshake=True)
            try:
                out = core.handshake(data)
            except ProtocolError as exc:
                raise not_hoarddb(self.options.address, exc) from None
            if out:
                self._send(out)

    @property
    def server_info(self) -> dict:
        return self.core.server_info

    # -- sending

    def _send(self, data: bytes) -> None:
        if self.closed:
            raise self._closed_error()
        if self.poller is not None:
            self._sent = time.monotonic()  # the first read after it waits for an answer
        try:
            self.sock.sendall(data)
        except socket.timeout:
            self._time_out()
            raise HoardTimeoutError(f"the server at {self.options.address} took none of our request for "
                                f"{self.options.timeout:g} s (timeout); the connection is closed") from None
        except (ssl.SSLError, OSError) as exc:
            raise self._lost(exc) from None
        except BaseException:  # interrupted (Ctrl-C) halfway: what follows would be read as the rest of it
            self.close()
            raise
        self.moved = time.monotonic()

    def send(self, doc: dict) -> int:
        """Send one request; its id."""
        request_id, data = self.core.request(doc)
        self.used = True
        self._send(data)
        return request_id

    def send_many(self, docs: list) -> range:
        """Send many requests in one write (a pipeline); their ids."""
        ids, data = self.core.requests(docs)
        self.used = True
        self._send(data)  # one send: the server reads them together and runs them as one group
        return ids

    def send_chunk(self, request_id: int, data, *, end: bool = False, abort: bool = False) -> None:
        self._send(self.core.chunk(request_id, data, end=end, abort=abort))

    # -- receiving

    def receive(self, request_id, last: bool = True) -> dict:
        """The next message for ``request_id``, reading (and filing others') until it comes;
        ``last``: it is the request's answer, the last message it gets."""
        core = self.core
        message = core.next(request_id, last)
        while message is None:
            self._read_some()
            message = core.next(request_id, last)
        return message

    def answer(self, request_id, last: bool = True) -> dict:
        """As :meth:`receive`, for the request just sent as ``request_id``: nothing was read since,
        so nothing can be filed for it yet, and reading comes first."""
        next_message = self.core.next
        while True:
            self._read_some()
            message = next_message(request_id, last)
            if message is not None:
                return message

    def has_message(self, request_id) -> bool:
        """Read what already arrived, without waiting; whether a message for ``request_id`` is there."""
        self._sent = None  # what this reads is no answer waited for: nothing for the busy poller to learn
        while not self.closed and self._readable():
            self._read_some()
        return self.core.has_message(request_id)

    def _readable(self) -> bool:
        """Whether a read would not wait: bytes (or an end of file) arrived, or TLS holds some."""
        if self._tls is not None and self._tls.pending():
            return True
        if self._readable_poll is not None:
            return bool(self._readable_poll.poll(0))
        return bool(select.select([self.sock], [], [], 0)[0])

    def alive(self) -> bool:
        """Whether the connection is still open, as far as can be told without waiting: reads
        what already arrived, so a server that closed it (a restart, an idle timeout: its
        goodbye, or the end of the stream) is noticed before a request is sent into it."""
        if self.closed:
            return False
        if self._readable():
            try:
                self.has_message(None)
            except HoardError:
                pass  # the connection closed itself, saying why
        return not self.closed

    def finish(self, request_id) -> None:
        """Nobody waits for ``request_id`` any more (its call was interrupted, its stream
        dropped): what came for it and what still comes is dropped."""
        self.core.finish(request_id)

    @property
    def _answers(self) -> dict:
        """The requests waiting for messages (empty when no call is under way)."""
        return self.core.answers

    @property
    def _spools(self) -> dict:
        """The requests whose messages wait in a file."""
        return self.core.spools

    def _closed_error(self) -> HoardError:
        return self.error or ConnectionError_(f"the connection to {self.options.address} is closed")

    def _read_some(self) -> None:
        if self.closed:
            raise self._closed_error()
        poller, sent, self._sent = self.poller, self._sent, None  # sent: only with a poller
        if sent is not None and poller is not None and poller.wanted():
            if not (self._tls is not None and self._tls.pending()):
                poller.run()  # a quick answer is awaited awake (hoarddb/busypoll.py)
            sent = None
        try:
            data = self.sock.recv(_RECV)
        except socket.timeout:
            self._time_out()
            raise HoardTimeoutError(f"the server at {self.options.address} sent nothing for {self.options.timeout:g} s "
                                "while an answer was due (timeout); the connection is closed") from None
        except (ssl.SSLError, OSError) as exc:
            raise self._lost(exc) from None
        if not data:
            raise self._lost(None)
        self.moved = time.monotonic()
        if sent is not None and poller is not None:  # a wait the poller let pass: how long the answer took
            poller.waited(time.monotonic() - sent)  # tells it about the next
        try:
            goodbye = self.core.feed(data)
        except ProtocolError as exc:
            self.close()
            raise bad_bytes(exc) from None
        if goodbye is not None:  # the answers that came before it stay filed for their callers;
            self.error = goodbye  # whoever waits for more gets this error
            self.close()

    # -- closing

    def _time_out(self) -> None:
        self.timed_out = time.monotonic()
        self.close()

    def _lost(self, exc, handshake: bool = False) -> HoardError:
        self.close()
        return connection_lost(self.options.address, exc, handshake=handshake,
                               tls_hint="it may expect TLS (leave out insecure=True)"
                               if self.options.insecure else None)

    def shutdown(self) -> None:
        """Stop the socket both ways, from any thread: a call blocked on it wakes up and fails.
        (The socket itself is closed by that call, or by :meth:`close`.)"""
        try:
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)  # the plain socket's: leaves TLS state alone
        except OSError:
            pass

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass
        # The busy poller holds an fd of its own once it has polled (its thread's /proc
        # schedstat): it goes with the socket, not with this object, which may be kept long
        # after (by a stream's generator; by the client, when closed by another thread mid-call).
        self.poller = None
        self.core.close()


class RemoteExecutor:
    """RemoteExecutor runs operation documents on a server: ``execute(request) -> answer``, ``close()``.

    Thread-safe: calls from several threads take turns on the one connection (use one
    client per thread for parallelism). A call's wait for its turn counts toward its
    timeout, and when a call times out, those queued behind it fail with it, unsent
    (see :meth:`_take_turn`). The connection is opened at construction, so a wrong address or
    password fails at once, and reopened by the next call after it is lost. ``close()``
    may come from any thread: a call waiting for its answer then raises ClosedError at once.
    """

    def __init__(self, options: ConnectOptions, *, connect: bool = True):
        self.options = options
        self._lock = threading.RLock()
        self._conn: Connection | None = None
        self._closed = False
        #: When a call last timed out (time.monotonic()): the calls queued before it fail with it.
        self._timed_out = -1.0
        #: Against a cluster: the map, and which node each keyed request goes to (client/router.py)
        self.router = Router(options)
        #: The connections to other nodes of a cluster, by node id (keyed requests sent to their owner)
        self._peers: dict[str, Connection] = {}
        if connect:
            self._connection()

    def _connection(self) -> Connection:
        if self._closed:
            raise ClosedError("this client is closed; connect again with hoarddb.connect(...)", outcome_unknown=False)
        conn = self._conn
        if conn is None or not conn.alive():  # closed by the server while idle: nothing of ours was in it
            try:
                conn = self._conn = Connection(self.options)
            except (ConnectionError_, HoardTimeoutError) as e:
                if isinstance(e, HoardTimeoutError):
                    self._timed_out = time.monotonic()
                raise nothing_sent(e) from None
            self.router.connected(conn.server_info)
        return conn

    def _take_turn(self, what: str) -> None:
        """Take the connection for one call (``what``, for errors), after the calls of other threads
        ahead of it; :meth:`_end_turn` gives it back. Waiting for its turn is waiting for the server
        too, so it counts toward the call's timeout: the call fails with HoardTimeoutError, unsent
        (``outcome_unknown = False``), when a call ahead of it timed out meanwhile (the server fell
        silent: without this, each call queued would send on a new connection and wait a whole
        timeout of its own, one after another), or when nothing moved on the connection for
        ``timeout`` while it waited (another call holds it without using it: an upload whose
        file reads slowly)."""
        queued = time.monotonic()
        if not self._lock.acquire(blocking=False):
            self._wait_for_turn(queued, what)
        if self._timed_out > queued:
            self._lock.release()
            raise HoardTimeoutError(f"another call on this client got no answer from the server at "
                                f"{self.options.address} in time (timeout) while this {what} waited for its "
                                "turn behind it; it was not sent; the next call reconnects", outcome_unknown=False)

    def _end_turn(self) -> None:
        self._note_timeout(self._conn)
        self._lock.release()

    def _note_timeout(self, conn: Connection | None) -> None:
        """Remember when ``conn`` timed out, if it did (with the lock held): for :meth:`_take_turn`."""
        if conn is not None and conn.timed_out is not None and conn.timed_out > self._timed_out:
            self._timed_out = conn.timed_out

    def _wait_for_turn(self, queued: float, what: str) -> None:
        timeout = self.options.timeout
        wait: float
        while True:
            conn = self._conn
            if timeout is None:
                wait = -1
            elif conn is None or conn.closed:
                wait = timeout  # being opened by the call ahead: connect_timeout bounds that
            else:
                wait = timeout - (time.monotonic() - max(queued, conn.moved))
                if wait <= 0:
                    raise HoardTimeoutError(f"this {what} waited {timeout:g} s for its turn behind another call on this "
                                        f"client while nothing moved on the connection to {self.options.address} "
                                        "(timeout); it was not sent", outcome_unknown=False)
            if self._lock.acquire(timeout=wait):
                return

    @property
    def server_info(self) -> dict:
        """What the server said in its hello: version, protocol, limits."""
        with self._lock:
            return self._connection().server_info

    def execute(self, request: dict) -> dict:
        """Run one operation on the server; its answer, or its error raised as the engine would."""
        if type(request) is not dict or type(request.get("op")) is not str:
            check_request(request)
        self._take_turn(request["op"])
        try:
            if self.router.on:
                answer = self._execute_at_owner(request)
                if answer is not None:
                    return answer
            conn = self._connection()
            fresh = not conn.used
            try:
                return self._execute(conn, request)
            except (ConnectionError_, HoardTimeoutError) as e:
                if not may_resend(e, fresh, request["op"]):
                    raise
            return self._execute(self._connection(), request)  # a read on a connection that died: once more
        finally:
            self._end_turn()

    def _execute_at_owner(self, request: dict) -> dict | None:
        """A keyed request's answer from its partition's owner over that node's connection, or None when it
        goes on the URL's connection: the owner is the URL's node or unknown, its connection cannot be
        opened, or it failed on a request that may be sent again (a read, or one a node refused as moved)."""
        router = self.router
        target = router.route(request)
        if target is None:
            return None
        if target is READ_MAP:
            self._read_map(request["db"])
            target = router.route(request, fresh=False)
        if not isinstance(target, Owner):
            return None
        node, _address, options = target
        conn = self._peers.get(node)
        if conn is None or not conn.alive() or (conn.options is not options
                                               and conn.options.address != options.address):
            if conn is not None:
                conn.close()  # (closed by its node, or the node moved to another address)
            try:
                conn = self._peers[node] = Connection(options)
            except (ConnectionError_, HoardTimeoutError):
                self._peers.pop(node, None)
                router.cannot_reach(node, request["db"])
                return None  # nothing was sent: the URL's node forwards it (or says the owner is down)
        try:
            return self._execute(conn, request)
        except (ConnectionError_, HoardTimeoutError, PartitionUnavailableError) as e:
            if not isinstance(e, PartitionUnavailableError):  # (the owner's connection is done with)
                conn.close()
                self._peers.pop(node, None)
            if router.falls_back(request, e):
                return None  # once more, on the URL's connection
            raise

    def _read_map(self, db: str) -> None:
        """Read the cluster's map of ``db`` on the URL's connection (client/router.py)."""
        try:
            answer = self._execute(self._connection(), self.router.map_request(db))
        except (ConnectionError_, HoardTimeoutError):
            return  # the request goes on the URL's connection, which says what became of it
        except UnknownVerbError:  # a server older than the map: its requests go as before
            self.router.unreadable(db)
            return
        self.router.learn(db, answer.get("result"))

    def _execute(self, conn: Connection, request: Mapping) -> dict:
        op = request["op"]
        upload = upload_source(request) if op in UPLOADS else None
        try:
            if upload is not None:
                answer = self._upload(conn, *upload)
            else:
                request_id = conn.send(dict(request))
                try:
                    answer = conn.answer(request_id, op not in STREAMS)
                except BaseException as e:
                    if not isinstance(e, HoardError):  # interrupted (Ctrl-C): the answer may still come
                        conn.finish(request_id)
                    raise
                if op in STREAMS:
                    stream = stream_of(request, answer)
                    if stream is None:
                        conn.finish(request_id)
                    else:
                        chunks = self._chunks(conn, request_id, answer, stream)
                        next(chunks)  # into its try: dropped unread, it still finishes the stream (see _chunks)
                        return {"ok": 1, "result": chunks}
        except (ConnectionError_, HoardTimeoutError) as e:
            raise self._unanswered(e, op, not retryable(op)) from None
        return result(answer)

    def _unanswered(self, error: HoardError, what: str, write: bool) -> HoardError:
        return unanswered(error, what, write, closed=self._closed)

    def _upload(self, conn: Connection, request: dict, source) -> dict:
        request_id = conn.send({**request, "upload": True})
        try:
            for data in conn.core.upload(request_id, source, lambda: conn.has_message(request_id)):
                conn._send(data)
        except HoardError:
            if not conn.closed:
                conn.send_chunk(request_id, b"", end=True, abort=True)
                conn.receive(request_id)
            raise
        except BaseException:  # the source failed, or Ctrl-C: abort the upload, drop its answer
            if not conn.closed:
                try:
                    conn.send_chunk(request_id, b"", end=True, abort=True)
                    conn.finish(request_id)
                except HoardError:
                    pass
            raise
        try:
            return conn.receive(request_id)
        except BaseException as e:
            if not isinstance(e, HoardError):
                conn.finish(request_id)
            raise

    def _chunks(self, conn: Connection, request_id: int, first: dict, stream: Stream) -> Iterator[bytes]:
        try:
            # _execute takes this first yield: a generator never started runs no finally, so a
            # stream dropped unread would keep its spool, and every chunk still to come, for
            # the connection's life. Started, it is finished when read, closed or collected.
            yield b""
            message = first
            while True:
                pieces, ended = stream.step(message)  # an error answer raises: the stream is over too
                yield from pieces
                if ended:
                    return
                with self._lock:
                    if self._closed:
                        raise stream_closed()
                    try:
                        message = conn.receive(request_id, False)
                    except (ConnectionError_, HoardTimeoutError) as e:
                        self._note_timeout(conn)
                        raise self._unanswered(e, "stream", False) from None
        finally:
            with self._lock:
                conn.finish(request_id)  # chunks still to come are dropped as they arrive

    def pipeline(self, requests: list[dict]) -> list:
        """Send every request before reading any answer; the answers in order (an error answer
        as its exception object, not raised). One round trip for the lot. When the connection
        is lost midway, the error raised holds the answers that came in ``answers``."""
        self._take_turn("pipeline")
        try:
            conn = self._connection()
            ids: Sequence[int] = ()
            out: list = []
            try:
                ids = conn.send_many(requests)
                next_message, receive = conn.core.next, conn.receive
                for request_id in ids:  # (inline: a pipeline's hundred answers come here)
                    answer = next_message(request_id, True) or receive(request_id)
                    del answer["id"]
                    out.append(answer if answer.get("ok") == 1 else error_from_answer(answer))
            except (ConnectionError_, HoardTimeoutError) as e:
                write = any(not isinstance(r, Mapping) or not retryable(r.get("op")) for r in requests[len(out):])
                error = self._unanswered(e, f"pipeline (from its {ordinal(len(out) + 1)} request on)", write)
                error.answers = out  # those that came: what became of the requests before the loss
                raise error from None
            except BaseException as e:
                if not isinstance(e, HoardError) and not conn.closed:
                    for request_id in ids[len(out):]:
                        conn.finish(request_id)
                raise
            return out
        finally:
            self._end_turn()

    def reconnect(self) -> None:
        """Drop the connection (and those to other nodes of a cluster) and open a new one."""
        with self._lock:
            for conn in [self._conn, *self._peers.values()]:
                if conn is not None:
                    conn.close()
            self._conn = None
            self._peers.clear()
            self.router.forget()
            self._connection()

    def close(self) -> None:
        """Close the connection; later calls raise ClosedError, and so does a call of another
        thread waiting for its answer now (which does not wait for it to finish)."""
        self._closed = True
        peers = list(self._peers.values())
        for conn in [self._conn, *peers]:
            if conn is not None:
                conn.shutdown()  # wakes a call blocked on the socket; that call closes it
        if self._lock.acquire(blocking=False):
            try:
                for conn in [self._conn, *peers]:
                    if conn is not None:
                        conn.close()
                self._conn = None
                self._peers.clear()
            finally:
                self._lock.release()
