"""One client connection on asyncio: the adapter between a socket and :class:`hoarddb.wire.ServerProtocol`.

The protocol object turns bytes into events; this class does the I/O and the
ordering around them:

- requests of one connection run in the order they came (as they would in an embedded
  client), while other connections run alongside. Cheap requests are handled as soon as
  they are read (:meth:`_pump`): one-key reads on the loop, writes handed to the group
  commit; a write's answer waits for its group's fsync but the next request does not,
  and a read waits only until this connection's earlier writes have run. Anything else
  (scans, blobs, administration) runs in a thread pool, and the connection's later
  requests wait for it;
- backpressure both ways: past ``max_pipeline`` queued requests, or a blob upload
  that the engine has not caught up with, the connection stops reading from the
  socket; while its unsent answers pass ``write_buffer`` bytes, it stops running
  requests. A client that stops reading holds a bounded amount of memory and no
  other client's work;
- blob uploads: a ``put`` with ``upload: true`` gets an :class:`UploadReader` at once,
  and its chunks are fed to it as they arrive, while the engine reads it in a thread;
- the clocks the server's sweep reads: ``last_activity`` (bytes either way) for
  ``idle_timeout``, and ``message_started`` (the first byte of the message being received)
  for a message that does not arrive whole (Server._sweep_connections).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections import deque
from time import perf_counter_ns
from typing import Any

from .. import operations
from ..errors import ConnectionError_, HoardError, ProtocolError, HoardTimeoutError
from ..wire.messages import error_answer
from ..wire.protocol import Chunk, Close, LoggedIn, LoginFailed, Request, Send, ServerProtocol, State

log = logging.getLogger("hoarddb.server")

#: Bytes of answers held for one send (cork) before they are written anyway.
CORK_MAX = 64 * 1024
#: Upload chunks buffered per upload before the connection stops reading.
UPLOAD_BUFFER_CHUNKS = 4
#: Upload bytes buffered per connection (all its uploads together) before it stops reading:
#: a client that pipelines many uploads, or sends big chunks, holds no more than this
#: (plus the one message being read).
UPLOAD_BUFFER_BYTES = 4 * 1024 * 1024
#: Seconds a closing connection has to take what is buffered for it before it is cut.
CLOSE_GRACE = 5.0


class UploadReader:
    """UploadReader is a blob upload as the engine sees it: a blocking binary file with ``read(n)``.

    The event loop feeds it chunks; the engine's thread reads them. It holds at most a
    few chunks: past that the connection stops reading the socket until the engine
    has taken some (``on_drain`` is called from the reading thread).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, on_drain, timeout: float):
        self._loop = loop
        self._on_drain = on_drain
        self._timeout = timeout or None
        self._cv = threading.Condition()
        self._chunks: deque[bytes] = deque()
        self._ended = False
        self._error: HoardError | None = None
        self.received = 0
        self.buffered = 0  # bytes fed and not read yet

    # -- event loop side

    def feed(self, data: bytes, end: bool) -> None:
        with self._cv:
            if data:
                self._chunks.append(data)
                self.received += len(data)
                self.buffered += len(data)
            self._ended = self._ended or end
            self._cv.notify_all()

    def fail(self, error: HoardError) -> None:
        """The upload will not complete (the connection closed, the client aborted): the
        engine's next read raises ``error``, and the chunks buffered are dropped now."""
        with self._cv:
            self._error = error
            self._chunks.clear()  # never read: read() raises first
            self.buffered = 0
            self._cv.notify_all()

    @property
    def full(self) -> bool:
        return len(self._chunks) >= UPLOAD_BUFFER_CHUNKS or self.buffered >= UPLOAD_BUFFER_BYTES

    @property
    def ended(self) -> bool:
        return self._ended

    # -- engine thread side

    def read(self, n: int = -1) -> bytes:
        with self._cv:
            if not self._cv.wait_for(lambda: self._chunks or self._ended or self._error, self._timeout):
                raise HoardTimeoutError(f"a blob upload received no data for {self._timeout:g} s; nothing was stored")
            if self._error is not None:
                # A fresh error each time: raising the one kept would tie its traceback, whose
                # frames hold this reader (and through it the connection), to the reader, a
                # cycle only a full collection frees, with every chunk the reader still held.
                raise type(self._error)(self._error.message, **self._error.details)
            if not self._chunks:
                return b""
            chunk = self._chunks.popleft()
            if 0 < n < len(chunk):
                self._chunks.appendleft(chunk[n:])
                chunk = chunk[:n]
            self.buffered -= len(chunk)
        # the connection may have stopped reading for this upload's bytes, or for its
        # uploads' together (Connection._uploads_full): let it look again (one call per chunk)
        self._loop.call_soon_threadsafe(self._on_drain)
        return chunk

    def readable(self) -> bool:
        return True


class Connection(asyncio.Protocol):
    """Connection is one client: its protocol state, its queue of requests, its uploads."""

    def __init__(self, server):
        self.server = server
        self.config = server.config
        self.loop = server.loop
        self.core = ServerProtocol(authenticator=server.authenticator, server_info=server.info,
                                   auth_failure_delay=self.config.auth_failure_delay)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.queue: deque[tuple[Request, int]] = deque()  # with its arrival, perf_counter_ns
        self.uploads: dict[Any, UploadReader] = {}
        #: The ids of the cursors this connection opened (only it may read them; closed with it).
        self.cursors: set = set()
        self.discarding: set = set()
        self.busy = 0  # requests queued, running, or waiting for their fsync
        self.closed = False
        self.draining = False  # stopping: read no more requests
        self.opened = self.last_activity = self.loop.time()
        #: When the first byte of the message being received came (meaningful while ``pending``);
        #: the sweep also moves it on while a request is in flight, which stops its clock.
        self.message_started = self.opened
        self._frames = self.core.reader  # how much of a message is in
        self.unexecuted = 0  # writes submitted to the group commit that have not run yet
        self.writable = asyncio.Event()
        self.writable.set()
        self.write_paused_at = 0.0  # when the client last stopped reading (its answers backed up)
        self._reading_paused = False
        self._worker: asyncio.Task | None = None  # the request running in a pool, if any
        self._pending_sends = 0
        self._corked: list[bytes] | None = None  # answers held to leave in one send (cork)
        self._corked_bytes = 0
        self.poller = None  # a BusyPoll, if the server busy-polls a lone connection
        self._grace: asyncio.TimerHandle | None = None  # cuts a closing connection that reads nothing
        self.over_limit = False  # accepted past max_connections: shakes hands only to be told so
        self._held = 0  # bytes of an unfinished message counted in server.receiving
        #: Why the server ends this connection once what it read is answered (end_after_answers).
        self.goodbye: HoardError | None = None
        #: ``(reason, error)`` once its user was removed or its password changed: each request
        #: from then on is refused with ``error``, then the connection is closed (Server.users_changed).
        self.revoked: tuple[str, HoardError] | None = None

    # -- asyncio.Protocol

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.server.handshake_ended(self)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.core.address = str(peer[0]) if isinstance(peer, tuple) else str(peer)  # lockouts count per address
        transport.set_write_buffer_limits(high=self.config.write_buffer)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.poller = self.server.busy_poller(sock)
        self.server.connection_opened(self)

    def data_received(self, data: bytes) -> None:
        self.server.metrics.received += len(data)
        self.last_activity = now = self.loop.time()
        arrived = perf_counter_ns()  # the requests' arrival, for their latency (the loop's clock is ms under uvloop)
        try:
            events = self.core.receive_data(data)
        except Exception:  # the state machine must never take the server down
            log.exception("connection %s: protocol failure", self.peer)
            self.abort_with(ProtocolError("the server could not read this connection's messages"))
            return
        # A message is being received from ``now`` on if one ended in these bytes (what is left
        # is the next one's beginning), or if nothing was held before them. Otherwise these
        # bytes continue a message begun earlier, whose clock runs on.
        held = self._frames.buffered
        if events or held == len(data):
            self.message_started = now
        if held != self._held:  # the server-wide budget of unfinished messages (receive_budget)
            server = self.server
            if held > self._held and server.receiving + held - self._held > self.config.receive_budget \
                    and self.goodbye is None and self.core.state is not State.CLOSED:
                server.over_budget(self, held)
            else:
                server.receiving += held - self._held
                self._held = held
        corked = self.cork()  # the answers of what runs now leave in one send
        try:
            queued = 0  # requests queued since the last look at whether to stop reading
            for event in events:
                if type(event) is Request:
                    if event.doc.get("upload") and event.doc.get("op") in operations.UPLOADS:
                        self.uploads[event.id] = UploadReader(self.loop, self._maybe_resume, self.config.idle_timeout)
                    self.queue.append((event, arrived))
                    queued += 1
                    continue
                if queued:
                    self._queued(queued)
                    queued = 0
                self._event(event, now)
            if queued:
                self._queued(queued)
            self._pump()
        finally:
            if corked:
                self.uncork()

    def eof_received(self):
        return False  # close our side too

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self._held:
            self.server.receiving -= self._held
            self._held = 0
        if self._grace is not None:  # closed in time: the timer would only keep this object 5 s more
            self._grace.cancel()
            self._grace = None
        self.core.close()
        for upload in self.uploads.values():
            upload.fail(ConnectionError_("the connection closed during a blob upload; nothing was stored"))
        self.busy -= len(self.queue)
        self.queue.clear()
        self.writable.set()
        self.server.connection_closed(self)

    def pause_writing(self) -> None:
        self.writable.clear()
        self.write_paused_at = self.loop.time()
        self._maybe_pause()

    def resume_writing(self) -> None:
        self.writable.set()
        self._pump()
        self._maybe_resume()

    # -- events from the protocol

    def _queued(self, n: int) -> None:
        """``n`` requests were queued: stop reading if they make too many. Looked at once for
        a run of requests read together (a pipeline's hundred): between them only more
        requests were queued, and a reading paused once stays paused."""
        self.busy += n
        self._maybe_pause()

    def _event(self, event, now: float) -> None:
        """An event other than a Request (data_received queues those itself)."""
        if isinstance(event, Send):
            if event.delay > 0:
                self._pending_sends += 1
                self.loop.call_later(event.delay, self._delayed_send, event.data)
            else:
                self.write(event.data)
        elif isinstance(event, Chunk):
            self._chunk(event)
        elif isinstance(event, LoginFailed):
            self.server.login_failed(self, event)
        elif isinstance(event, LoggedIn):
            self.server.logged_in(self, event)
        elif isinstance(event, Close):
            if "failed logins" not in event.reason:
                self.server.metrics.rejected.labels("protocol_error").inc()
            log.debug("connection %s: closing: %s", self.peer, event.reason)
            self.close_after_sends()

    def _chunk(self, event: Chunk) -> None:
        upload = self.uploads.get(event.id)
        if upload is not None:
            if event.refusal is not None:
                upload.fail(ProtocolError(event.refusal))
            elif event.abort:
                upload.fail(ConnectionError_("the client aborted the blob upload; nothing was stored"))
            else:
                upload.feed(event.data, event.end)
            self._maybe_pause()
        elif event.id in self.discarding:
            if event.end or event.abort:
                self.discarding.discard(event.id)
        else:
            self.write(self.core.encode(error_answer(event.id, ProtocolError(event.refusal or (
                f"a chunk for request {event.id!r:.40}, which is not a blob upload in progress "
                "(a put sent with upload: true)")))))

    def finish_upload(self, request_id) -> None:
        """The put of this upload is answered: drop its reader, and its chunks still on the way."""
        upload = self.uploads.pop(request_id, None)
        if upload is not None and not upload.ended:
            self.discarding.add(request_id)
        self._maybe_resume()

    # -- flow control

    def _uploads_full(self) -> bool:
        """Whether the uploads hold enough unread bytes (one of them, or all together)."""
        uploads = self.uploads
        if not uploads:
            return False
        return any(u.full for u in uploads.values()) or sum(u.buffered for u in uploads.values()) >= UPLOAD_BUFFER_BYTES

    def _must_wait(self) -> bool:
        """Whether to stop reading: requests queued past max_pipeline, uploads the engine has not
        caught up with, or answers the client has not read past write_buffer (refusals the
        protocol answers itself, such as a flood of hellos, would otherwise pile up unsent)."""
        return (len(self.queue) >= self.config.max_pipeline or self._uploads_full()
                or not self.writable.is_set())

    def _maybe_pause(self) -> None:
        if self._reading_paused or self.transport is None or self.closed:
            return
        if self._must_wait():
            self._reading_paused = True
            self.transport.pause_reading()

    def _maybe_resume(self) -> None:
        if not self._reading_paused or self.closed or self.draining:
            return
        if not self._must_wait():
            self._reading_paused = False
            self.transport.resume_reading()

    def stop_reading(self) -> None:
        """Stop taking requests (a graceful stop): what is queued still runs."""
        self.draining = True
        if self.transport is not None and not self._reading_paused and not self.closed:
            self._reading_paused = True
            self.transport.pause_reading()

    # -- running requests, in order

    def _pump(self) -> None:
        """Run the queued requests that can run now, in order; stop at one that must wait."""
        queue, server = self.queue, self.server
        while queue and self._worker is None and not self.closed:
            if not self.writable.is_set():
                return  # the client is not reading its answers: resume_writing pumps again
            request, arrived = queue[0]
            how = server.dispatch(self, request)
            if how != "write" and self.unexecuted:
                return  # after this connection's writes have run (write_ran pumps again)
            queue.popleft()
            if self._reading_paused:
                self._maybe_resume()
            if how == "write":
                self.unexecuted += 1
                server.submit_write(self, request, arrived)
            elif how == "inline":
                self.server.run_inline(self, request, arrived)
            elif how == "read":
                self._worker = self.server.run_read(self, request, arrived)  # None if already answered
            else:
                self._worker = self.loop.create_task(self._run(request, arrived))

    async def _run(self, request: Request, arrived: int, work=None) -> None:
        try:
            await (work if work is not None else self.server.run_request(self, request, arrived))
        except Exception:
            log.exception("connection %s: request %r failed", self.peer, request.id)
        finally:
            self._worker = None
        self._pump()

    def finish_later(self, request: Request, arrived: int, work) -> asyncio.Task:
        """The task that awaits ``work`` (a request's remaining part), then runs the requests after it."""
        return self.loop.create_task(self._run(request, arrived, work))

    def write_ran(self) -> None:
        """A write this connection submitted has run (its answer may still wait for the fsync)."""
        self.unexecuted -= 1
        if not self.unexecuted:
            self._pump()

    # -- output

    def write(self, data: bytes) -> None:
        if self.closed or self.transport is None or self.transport.is_closing():
            return
        self.transport.write(data)
        self.server.metrics.sent += len(data)
        self.last_activity = self.loop.time()

    def send(self, answer: dict | bytes) -> None:
        """Send an answer: a document, or the bytes of one already encoded (a read thread
        encodes a long answer, see Server.run_read)."""
        data = answer if type(answer) is bytes else self.core.encode(answer)
        if self._corked is not None:
            self._corked.append(data)
            self._corked_bytes += len(data)
            if self._corked_bytes > CORK_MAX:  # held enough: out it goes (and may pause us)
                self.uncork()
                self.cork()
        else:
            self.write(data)

    def cork(self) -> bool:
        """Hold answers until :meth:`uncork`, to write them with one send; False if already corked."""
        if self._corked is not None:
            return False
        self._corked, self._corked_bytes = [], 0
        return True

    def uncork(self) -> None:
        corked, self._corked = self._corked, None
        if corked:
            self.write(corked[0] if len(corked) == 1 else b"".join(corked))

    def done(self) -> None:
        """One request is fully answered."""
        self.busy -= 1
        if self.busy == 0:
            self.server.idle_changed()
            if self.goodbye is not None:
                self.abort_with(self.goodbye)
                return
            if self.poller is not None and len(self.server.connections) == 1 and self.poller.wanted():
                self.loop.call_soon(self._busy_poll)  # after the answer's send, and a held LMDB commit

    def _busy_poll(self) -> None:
        """Wait for this lone connection's next request awake, for a moment (busypoll.py)."""
        if not self.busy and not self.closed and len(self.server.connections) == 1:
            self.server.metrics.busy_polled(self.poller.run())

    def _delayed_send(self, data: bytes) -> None:
        self._pending_sends -= 1
        self.write(data)

    def close_after_sends(self) -> None:
        """Close once the delayed answers already scheduled are written."""
        if self._pending_sends:
            self.loop.call_later(self.config.auth_failure_delay + 0.01, self.close)
        else:
            self.close()

    def end_after_answers(self, error: HoardError) -> None:
        """Read no more requests; once those read are answered (writes once durable), send
        ``error`` as the server's goodbye (``id: null``) and close."""
        if self.goodbye is not None or self.closed:
            return
        self.goodbye = error
        self.stop_reading()
        if not self.busy:
            self.abort_with(error)

    def abort_with(self, error: HoardError) -> None:
        """Tell the client why (a message with ``id: null``), then close."""
        if self.transport is not None and not self.closed:
            self.uncork()  # the answers held for one send go first
            self.write(self.core.notice(error))
        self.close()

    def close(self) -> None:
        self.core.close()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
            # close() first sends what is buffered; a peer that reads nothing would keep the
            # connection, and its slot, for good: cut it after a grace period
            self._grace = self.loop.call_later(CLOSE_GRACE, self._abort_if_open)

    def _abort_if_open(self) -> None:
        if not self.closed and self.transport is not None:
            self.transport.abort()

    @property
    def ready(self) -> bool:
        return self.core.state is State.READY

    @property
    def pending(self) -> int:
        """Bytes received of a message not whole yet (0 between messages)."""
        return self._frames.buffered

    @property
    def pending_length(self) -> int | None:
        """The length the message being received declares, once its first 4 bytes are in."""
        return self._frames.pending_length()
