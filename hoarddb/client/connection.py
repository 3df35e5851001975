"""The blocking client: one socket to a server, and the executor that :class:`hoarddb.api.Client` runs on.

    client = hoarddb.api.Client(RemoteExecutor(ConnectOptions(host="127.0.0.1", insecure=True)))

is what ``hoarddb.connect("hoarddb://127.0.0.1/?insecure=true")`` returns: the same
Client as ``hoarddb.open(path)``, whose requests go over the wire. Errors come back as
the same classes (``error_from_answer``); a lost connection is ConnectionError_, a
late answer TimeoutError_, and the next call reconnects.

What a call does when the connection fails:

    found dead before sending (the server restarted,   a new connection carries the request:
    or closed it idle; its goodbye is read first)       nothing was sent on the old one
    lost after sending a read                          sent once more on a new connection
    lost after sending a write                         ConnectionError_ / TimeoutError_ with
                                                       ``outcome_unknown = True``: never resent
    the client closed by another thread meanwhile      ClosedError (``outcome_unknown`` as above)
    queued behind another thread's call that timed     TimeoutError_, ``outcome_unknown = False``:
    out, or waiting its turn ``timeout`` seconds       never sent (every caller hears within about
    while nothing moved on the connection              one timeout of the server falling silent)

Blobs: a ``put`` whose data is a file object or more than 4 MiB is uploaded in 1 MiB
chunks read as they are sent; ``stream`` gives an iterator that reads the server's
chunks as it is consumed. If another request needs the connection before a stream is
consumed, that stream's remaining chunks are spooled to a temporary file (memory
stays bounded) and the iterator reads them from there.
"""

from __future__ import annotations

import io
import select
import socket
import ssl
import tempfile
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any, Iterator

from .. import busypoll, operations
from ..chunks import chunks
from ..errors import (BadValueError, ClosedError, ConnectionError_, HoardError, InvalidArgumentError, ProtocolError,
                      TimeoutError_, error_from_answer)
from ..wire.framing import FrameReader, decode_frame, decode_frames, split_frames
from ..wire.messages import CHUNK_SIZE, INLINE_BLOB_MAX
from ..wire.protocol import ClientProtocol, State
from .options import ConnectOptions

#: Chunk size a stream yields when the request does not name one (the engine's default).
STREAM_CHUNK = 1024 * 1024
_RECV = 256 * 1024
#: Operations safe to send again on a fresh connection when the old one turned out dead.
_RETRYABLE = operations.names(retry=True)


class _Spool:
    """_Spool keeps the frames of a stream nobody is reading yet, on disk past a few MiB."""

    def __init__(self):
        self._file = tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024)
        self._read = 0
        self._write = 0
        self.count = 0

    def put(self, frame: bytes) -> None:
        self._file.seek(self._write)
        self._file.write(frame)
        self._write += len(frame)
        self.count += 1

    def take(self) -> bytes:
        self._file.seek(self._read)
        head = self._file.read(4)
        length = int.from_bytes(head, "little")
        frame = head + self._file.read(length - 4)
        self._read += length
        self.count -= 1
        return frame

    def close(self) -> None:
        self._file.close()


class Connection:
    """Connection is one open, logged-in socket to a server (blocking; not thread-safe by itself)."""

    def __init__(self, options: ConnectOptions):
        self.options = options
        self.closed = False
        #: Why the server closed the connection, when it said so (its goodbye message).
        self.error: HoardError | None = None
        #: Whether a request went out on it (a read that fails on a fresh connection is not resent).
        self.used = False
        self._answers: dict[Any, deque] = {}
        self._spools: dict[Any, _Spool] = {}
        self._discard: set = set()
        self._reader = FrameReader()
        self.core = ClientProtocol(options.user, options.password)
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
        self._tls = isinstance(self.sock, ssl.SSLSocket)
        self._readable_poll = None
        if hasattr(select, "poll"):
            self._readable_poll = select.poll()
            self._readable_poll.register(self.sock.fileno(), select.POLLIN)
        self.poller = (busypoll.BusyPoll([self.sock.fileno()], options.busy_poll / 1e6)
                       if options.busy_poll and busypoll.unavailable() is None else None)

    # -- opening

    def _open(self) -> socket.socket:
        o = self.options
        context = o.ssl_context()  # a CA file that cannot be read is refused before connecting
        try:
            sock = socket.create_connection((o.host, o.port), timeout=o.connect_timeout)
        except socket.timeout:
            raise TimeoutError_(f"no answer from {o.address} within {o.connect_timeout:g} s (connect_timeout)",
                                outcome_unknown=False) from None
        except OSError as exc:
            raise ConnectionError_(f"cannot connect to {o.address}: {exc.strerror or exc}; is the server running, "
                                   "on this host and port?", outcome_unknown=False) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if context is None:
            return sock
        try:
            tls = context.wrap_socket(sock, server_hostname=o.host)
        except socket.timeout:
            sock.close()
            raise TimeoutError_(f"TLS handshake with {o.address} took over {o.connect_timeout:g} s; "
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
        self._send(self.core.start())
        while self.core.state is not State.READY:
            try:
                data = self.sock.recv(_RECV)
            except socket.timeout:
                raise TimeoutError_(f"no handshake answer from {self.options.address} within "
                                    f"{self.options.connect_timeout:g} s; is it a hoardDB server?",
                                    outcome_unknown=False) from None
            except (ssl.SSLError, OSError) as exc:
                raise self._lost(exc, handshake=True) from None
            if not data:
                raise self._lost(None, handshake=True)
            try:
                answers = self.core.receive_data(data)
            except ProtocolError as exc:
                raise ConnectionError_(f"{self.options.address} did not answer as a hoardDB server: {exc.message}",
                                       outcome_unknown=False) from None
            for answer in answers:
                self._file(answer)
            out = self.core.data_to_send()
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
            raise TimeoutError_(f"the server at {self.options.address} took none of our request for "
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

    def send_chunk(self, request_id: int, data, *, end: bool = False, abort: bool = False) -> None:
        self._send(self.core.chunk(request_id, data, end=end, abort=abort))

    # -- receiving

    def receive(self, request_id) -> dict:
        """The next message for ``request_id``, reading (and filing others') until it comes."""
        spool = self._spools.get(request_id)
        if spool is not None and spool.count:
            return decode_frame(spool.take())
        queue = self._answers.get(request_id)
        while not queue:
            self._read_some()
            spool = self._spools.get(request_id)
            if spool is not None and spool.count:
                return decode_frame(spool.take())
            queue = self._answers.get(request_id)
        message = queue.popleft()
        if not queue:
            del self._answers[request_id]
        return message

    def has_message(self, request_id) -> bool:
        """Read what already arrived, without waiting; whether a message for ``request_id`` is there."""
        self._sent = None  # what this reads is no answer waited for: nothing for the busy poller to learn
        while not self.closed and self._readable():
            self._read_some()
        return bool(self._answers.get(request_id))

    def _readable(self) -> bool:
        """Whether a read would not wait: bytes (or an end of file) arrived, or TLS holds some."""
        if self._tls and self.sock.pending():
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

    def abandon(self, request_id) -> None:
        """Nobody waits for ``request_id`` any more (its call was interrupted): drop its answer."""
        if self._answers.pop(request_id, None) is None and not self.closed:
            self._discard.add(request_id)

    def _closed_error(self) -> HoardError:
        return self.error or ConnectionError_(f"the connection to {self.options.address} is closed")

    def _read_some(self) -> None:
        if self.closed:
            raise self._closed_error()
        poller, sent, self._sent = self.poller, self._sent, None  # sent: only with a poller
        if sent is not None and poller.wanted():
            if not (isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()):
                poller.run()  # a quick answer is awaited awake (hoarddb/busypoll.py)
            sent = None
        try:
            data = self.sock.recv(_RECV)
        except socket.timeout:
            self._time_out()
            raise TimeoutError_(f"the server at {self.options.address} sent nothing for {self.options.timeout:g} s "
                                "while an answer was due (timeout); the connection is closed") from None
        except (ssl.SSLError, OSError) as exc:
            raise self._lost(exc) from None
        if not data:
            raise self._lost(None)
        self.moved = time.monotonic()
        if sent is not None:  # a wait the poller let pass: how long the answer took tells it about the next
            poller.waited(time.monotonic() - sent)
        self._reader.feed(data)
        while True:
            try:
                frames = self._reader.next_frames()
            except ProtocolError as exc:
                self.close()
                raise ConnectionError_(f"the server sent bytes that are not a hoardDB message: {exc.message}") from None
            if not frames:
                return
            if self._spools or self._discard:  # a stream's chunks may be among them: one by one
                for frame in split_frames(frames):
                    if not self._route(frame):
                        return
                continue
            for doc in decode_frames(frames):  # answers: all of them in one call
                if doc.get("id") is None:  # the server closes the connection, and says why
                    self._goodbye(doc)
                    return
                self._file(doc)

    def _goodbye(self, doc: dict) -> None:
        """The server closes the connection and says why (``id: null``): the answers that came
        before it stay filed for their callers; whoever waits for more gets this error."""
        error = error_from_answer(doc)
        error.server_closed = True
        self.error = error
        self.close()

    def _route(self, frame: bytes) -> bool:
        """File or spool one frame; False when it was the server's goodbye (the connection is closed)."""
        # Peek at the id without decoding a whole chunk twice: spooled frames stay raw.
        doc = None
        request_id = _peek_id(frame)
        if request_id is _NO_ID:
            doc = decode_frame(frame)
            request_id = doc.get("id")
        if request_id is None:  # the server closes the connection, and says why
            self._goodbye(doc or decode_frame(frame))
            return False
        if request_id in self._discard:
            doc = doc or decode_frame(frame)
            if doc.get("end") or doc.get("ok") != 1 or "chunk" not in doc:
                self._discard.discard(request_id)
            return True
        spool = self._spools.get(request_id)
        if spool is not None:
            spool.put(frame)
            return True
        self._file(doc or decode_frame(frame))
        return True

    def _file(self, doc: dict) -> None:
        self._answers.setdefault(doc.get("id"), deque()).append(doc)

    # -- streams

    def stream_started(self, request_id) -> None:
        """From now on, chunks of this stream that arrive while reading for others are spooled."""
        self._spools[request_id] = _Spool()
        for doc in self._answers.pop(request_id, ()):  # already filed: move them in front
            from ..values.codec import encode
            self._spools[request_id].put(encode(doc))

    def stream_finished(self, request_id, complete: bool) -> None:
        spool = self._spools.pop(request_id, None)
        if spool is not None:
            spool.close()
        if not complete and not self.closed:
            self._discard.add(request_id)

    # -- closing

    def _time_out(self) -> None:
        self.timed_out = time.monotonic()
        self.close()

    def _lost(self, exc, handshake: bool = False) -> HoardError:
        self.close()
        o = self.options
        if handshake:
            hint = ("it may expect TLS (leave out -insecure / insecure=true)" if o.insecure else
                    "it may have refused the connection (see its log)")
            return ConnectionError_(f"the server at {o.address} closed the connection during the handshake"
                                    + (f" ({exc})" if exc else "") + f": {hint}", outcome_unknown=False)
        return ConnectionError_(f"the connection to {o.address} was lost" + (f" ({exc})" if exc else "")
                                + ": the server closed it, stopped or restarted, or the network failed; "
                                  "the next call reconnects")

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
        for spool in self._spools.values():
            spool.close()
        self._spools.clear()


_NO_ID = object()


def _peek_id(frame: bytes):
    """The id of an answer frame when it is its first element (as servers send it), else _NO_ID."""
    if len(frame) > 8 and frame[4:8] == b"\x10id\x00":  # int32 "id"
        return int.from_bytes(frame[8:12], "little", signed=True)
    if len(frame) > 8 and frame[4:8] == b"\x12id\x00":  # int64 "id"
        return int.from_bytes(frame[8:16], "little", signed=True)
    return _NO_ID


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
        if connect:
            self._connection()

    def _connection(self) -> Connection:
        if self._closed:
            raise ClosedError("this client is closed; connect again with hoarddb.connect(...)", outcome_unknown=False)
        conn = self._conn
        if conn is None or not conn.alive():  # closed by the server while idle: nothing of ours was in it
            try:
                conn = self._conn = Connection(self.options)
            except (ConnectionError_, TimeoutError_) as e:
                if isinstance(e, TimeoutError_):
                    self._timed_out = time.monotonic()
                raise nothing_sent(e) from None
        return conn

    def _take_turn(self, what: str) -> None:
        """Take the connection for one call (``what``, for errors), after the calls of other threads
        ahead of it; :meth:`_end_turn` gives it back. Waiting for its turn is waiting for the server
        too, so it counts toward the call's timeout: the call fails with TimeoutError_, unsent
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
            raise TimeoutError_(f"another call on this client got no answer from the server at "
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
        while True:
            conn = self._conn
            if timeout is None:
                wait = -1
            elif conn is None or conn.closed:
                wait = timeout  # being opened by the call ahead: connect_timeout bounds that
            else:
                wait = timeout - (time.monotonic() - max(queued, conn.moved))
                if wait <= 0:
                    raise TimeoutError_(f"this {what} waited {timeout:g} s for its turn behind another call on this "
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
        if not isinstance(request, Mapping) or not isinstance(request.get("op"), str):
            raise InvalidArgumentError(operations.REQUEST_SHAPE)  # as the engine says it
        self._take_turn(request["op"])
        try:
            conn = self._connection()
            fresh = not conn.used
            try:
                return self._execute(conn, request)
            except (ConnectionError_, TimeoutError_) as e:
                lost = isinstance(e, ConnectionError_) or getattr(e, "server_closed", False)
                if fresh or not lost or request["op"] not in _RETRYABLE:
                    raise
            return self._execute(self._connection(), request)  # a read on a connection that died: once more
        finally:
            self._end_turn()

    def _execute(self, conn: Connection, request: Mapping) -> dict:
        op = request["op"]
        upload = _upload_source(request)
        try:
            if upload is not None:
                answer = self._upload(conn, *upload)
            else:
                request_id = conn.send(dict(request))
                try:
                    answer = conn.receive(request_id)
                except BaseException as e:
                    if not isinstance(e, HoardError):  # interrupted (Ctrl-C): the answer may still come
                        conn.abandon(request_id)
                    raise
                if op == "stream" and answer.get("ok") == 1 and ("chunk" in answer or answer.get("end")):
                    args = request.get("args") or {}
                    size = args.get("chunk_size") if isinstance(args, Mapping) else None
                    conn.stream_started(request_id)
                    stream = self._chunks(conn, request_id, answer, size or STREAM_CHUNK)
                    next(stream)  # into its try: dropped unread, it still finishes the stream (see _chunks)
                    return {"ok": 1, "result": stream}
        except (ConnectionError_, TimeoutError_) as e:
            raise self._unanswered(e, op, op not in _RETRYABLE) from None
        answer.pop("id", None)
        if answer.get("ok") != 1:
            raise error_from_answer(answer)
        return answer

    def _unanswered(self, error: HoardError, what: str, write: bool) -> HoardError:
        return unanswered(error, what, write, closed=self._closed)

    def _upload(self, conn: Connection, request: dict, source) -> dict:
        request_id = conn.send({**request, "upload": True})
        try:
            for chunk in chunks(source, CHUNK_SIZE):
                conn.send_chunk(request_id, chunk)
                if conn.has_message(request_id):  # refused early (no such bucket...): stop sending
                    conn.send_chunk(request_id, b"", end=True, abort=True)
                    break
            else:
                conn.send_chunk(request_id, b"", end=True)
        except HoardError:
            if not conn.closed:
                conn.send_chunk(request_id, b"", end=True, abort=True)
                conn.receive(request_id)
            raise
        except BaseException:  # the source failed, or Ctrl-C: abort the upload, drop its answer
            if not conn.closed:
                try:
                    conn.send_chunk(request_id, b"", end=True, abort=True)
                    conn.abandon(request_id)
                except HoardError:
                    pass
            raise
        try:
            return conn.receive(request_id)
        except BaseException as e:
            if not isinstance(e, HoardError):
                conn.abandon(request_id)
            raise

    def _chunks(self, conn: Connection, request_id: int, first: dict, chunk_size: int) -> Iterator[bytes]:
        complete = False
        try:
            # _execute takes this first yield: a generator never started runs no finally, so a
            # stream dropped unread would keep its spool, and every chunk still to come, for
            # the connection's life. Started, it is finished when read, closed or collected.
            yield b""
            message = first
            buffer = bytearray()
            while True:
                try:
                    pieces, complete = stream_step(message, buffer, chunk_size)
                except HoardError:  # an error answer: the stream is over too
                    complete = True
                    raise
                yield from pieces
                if complete:
                    return
                with self._lock:
                    if self._closed:
                        raise stream_closed()
                    try:
                        message = conn.receive(request_id)
                    except (ConnectionError_, TimeoutError_) as e:
                        self._note_timeout(conn)
                        raise self._unanswered(e, "stream", False) from None
        finally:
            with self._lock:
                conn.stream_finished(request_id, complete)

    def pipeline(self, requests: list[dict]) -> list:
        """Send every request before reading any answer; the answers in order (an error answer
        as its exception object, not raised). One round trip for the lot. When the connection
        is lost midway, the error raised holds the answers that came in ``answers``."""
        self._take_turn("pipeline")
        try:
            conn = self._connection()
            ids, data = conn.core.requests(requests)
            out = []
            try:
                conn.used = True
                conn._send(data)  # one send: the server reads them together and runs them as one group
                receive = conn.receive
                for request_id in ids:
                    answer = receive(request_id)
                    del answer["id"]
                    out.append(answer if answer.get("ok") == 1 else error_from_answer(answer))
            except (ConnectionError_, TimeoutError_) as e:
                write = any(not isinstance(r, Mapping) or r.get("op") not in _RETRYABLE for r in requests[len(out):])
                error = self._unanswered(e, f"pipeline (from its {_ordinal(len(out) + 1)} request on)", write)
                error.answers = out  # those that came: what became of the requests before the loss
                raise error from None
            except BaseException as e:
                if not isinstance(e, HoardError) and not conn.closed:
                    for request_id in ids[len(out):]:
                        conn.abandon(request_id)
                raise
            return out
        finally:
            self._end_turn()

    def reconnect(self) -> None:
        """Drop the connection and open a new one."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            self._connection()

    def close(self) -> None:
        """Close the connection; later calls raise ClosedError, and so does a call of another
        thread waiting for its answer now (which does not wait for it to finish)."""
        self._closed = True
        conn = self._conn
        if conn is not None:
            conn.shutdown()  # wakes a call blocked on the socket; that call closes it
        if self._lock.acquire(blocking=False):
            try:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
            finally:
                self._lock.release()


def stream_step(message: dict, buffer: bytearray, chunk_size: int) -> tuple[list[bytes], bool]:
    """One message of a blob stream (both clients): the pieces of ``chunk_size`` bytes it
    completes (the rest stays in ``buffer``; the last message gives the rest too) and
    whether it was the last. An error answer raises."""
    if message.get("ok") != 1:
        raise error_from_answer(message)
    if message.get("end"):
        return ([bytes(buffer)] if buffer else []), True
    buffer += message.get("chunk") or b""
    pieces = []
    while len(buffer) >= chunk_size:
        pieces.append(bytes(buffer[:chunk_size]))
        del buffer[:chunk_size]
    return pieces, False


def stream_closed() -> ClosedError:
    """What reading a stream on a client closed meanwhile raises (both clients)."""
    return ClosedError("this client was closed before the stream was read to its end; "
                       "connect again and call stream again", outcome_unknown=False)


def nothing_sent(error: HoardError) -> HoardError:
    """``error``, of a call none of whose request reached the server: ``outcome_unknown`` False
    (the server's own goodbye during the login, say, does not carry it)."""
    if not hasattr(error, "outcome_unknown"):
        error.outcome_unknown = False
        error.details["outcome_unknown"] = False
    return error


def unanswered(error: HoardError, what: str, write: bool, *, closed: bool = False) -> HoardError:
    """The error for a request sent whose answer will not come: the connection's ``error`` (or
    ClosedError, when the client was ``closed`` meanwhile), saying whether ``what`` may have been
    applied. ``outcome_unknown`` is True for a write: it was not resent, and may or may not
    have been applied; a read changed nothing."""
    if write:
        tail = (f"the {what} may or may not have been applied: its answer was lost, and it was not sent again. "
                "Read back before trying again: a write that names its key (put with an _id_) is safe to "
                "repeat, one that does not (insert without _id_, push, a blob put) may be applied twice")
    else:
        tail = f"the {what} changed nothing; call it again"
    if closed:
        error_class, message = ClosedError, f"this client was closed while the {what} waited for its answer"
    else:
        error_class, message = type(error), error.message
    out = error_class(f"{message}; {tail}", outcome_unknown=write)
    out.server_closed = getattr(error, "server_closed", False)
    return out


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _upload_source(request: Mapping):
    """``(request without the data, data)`` when a put's data (or a one-blob load's, as restore
    sends) must be uploaded in chunks, else None."""
    op = request.get("op")
    args = request.get("args")
    if op == "load" and isinstance(args, Mapping) and isinstance(args.get("docs"), list) \
            and len(args["docs"]) == 1 and isinstance(args["docs"][0], Mapping) and "data" in args["docs"][0]:
        data = args["docs"][0]["data"]
        if isinstance(data, (bytes, bytearray, memoryview)) and memoryview(data).nbytes <= INLINE_BLOB_MAX:
            return None
        if not isinstance(data, (bytes, bytearray, memoryview)) and not callable(getattr(data, "read", None)):
            return None
        rest = {**args, "docs": [{k: v for k, v in args["docs"][0].items() if k != "data"}]}
        return {**request, "args": rest}, data
    if op != "put":
        return None
    if not isinstance(args, Mapping) or "doc" not in args:
        return None
    doc = args["doc"]
    holder = doc if isinstance(doc, Mapping) else None
    data = holder.get("data") if holder is not None else doc
    if isinstance(data, (bytes, bytearray, memoryview)):
        if memoryview(data).nbytes <= INLINE_BLOB_MAX:
            return None
    elif not callable(getattr(data, "read", None)):
        return None
    elif isinstance(data, io.TextIOBase):
        raise BadValueError("put data is a file opened in text mode; open it in binary mode ('rb')")
    rest = dict(args)
    if holder is not None:
        rest["doc"] = {k: v for k, v in holder.items() if k != "data"}
    else:
        del rest["doc"]
    return {**request, "args": rest}, data


