"""hoardDB for asyncio: the same Client, Database, Bucket and store-field verbs, awaitable.

    import hoarddb.aio

    async def main():
        client = await hoarddb.aio.connect("hoarddb://app:secret@127.0.0.1:7070/?tls_ca=server.crt")
        db = client["app"]
        await db.Comments.push({"Text": "hi"})
        async for chunk in await db.Photos.stream(blob_id):
            ...
        await client.close()

(``hoarddb.aio`` is this module's public name.) Every verb of :mod:`hoarddb.operations`
is a coroutine method here too, on the very objects of :mod:`hoarddb.api`: they build the
operation and hand it to this module's executor, whose answer they await. Errors are the
same classes as the blocking client's. Requests from concurrent tasks share the one
connection and are pipelined: each is sent at once and its answer matched by id.
The connection is asyncio's own: an :class:`asyncio.Protocol` over the client's core
without I/O (:class:`hoarddb.client.core.ClientCore`, the blocking client's too); it
reconnects on the next call after a loss.
A lost connection fails every request waiting on it at once: a read is sent again on a
new connection, a write raises with ``outcome_unknown = True`` (never resent). Before a
call sends, the loop reads what already arrived, so a connection the server closed while
the loop was busy elsewhere (a restart, an idle timeout) is found dead then and the
request goes on a new one, as with the blocking client. A call
waits at most ``timeout`` seconds of silence from the server; ``close()`` fails the
calls in flight with ClosedError. Against a cluster, each request for one document goes
to its partition's owner over a connection of its own to that node, as with the blocking
client (hoarddb/client/router.py).
"""

from __future__ import annotations

import asyncio
import select
import socket
from collections.abc import Mapping
from typing import Any, AsyncIterator, Callable

from .. import api, operations
from ..errors import (ClosedError, ConnectionError_, CursorNotFoundError, HoardError, HoardTimeoutError,
                      PartitionUnavailableError, ProtocolError, UnknownVerbError)
from .core import (STREAMS, UPLOADS, ClientCore, Stream, bad_bytes, check_request, connection_lost, may_resend,
                   not_hoarddb, nothing_sent, result, retryable, stream_closed, stream_of, unanswered,
                   upload_source)
from .options import ConnectOptions
from .router import READ_MAP, Owner, Router

__all__ = ["connect", "Client", "Database", "Bucket", "Document", "StoreField", "Element", "AsyncExecutor",
           "AsyncCursor"]


class _Protocol(asyncio.Protocol):
    """_Protocol is one connection on the event loop: it feeds the core and wakes the tasks whose answers came."""

    def __init__(self, options: ConnectOptions):
        self.options = options
        self.core = ClientCore(options.user, options.password, client_name="hoarddb-python-aio",
                               arrived=self._arrived)
        self.loop = asyncio.get_running_loop()
        self.ready: asyncio.Future = self.loop.create_future()
        #: the connection's transport, once made (a connection being opened may be failed before)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.error: HoardError | None = None
        #: The tasks waiting for a message, by request id: the future that wakes each.
        self._waiting: dict[Any, asyncio.Future] = {}
        self._can_write = asyncio.Event()
        self._can_write.set()
        #: The loop's time when the server last sent something: a call times out only after
        #: ``timeout`` seconds in which nothing came (a long pipeline that keeps answering does not).
        self.last_heard = self.loop.time()
        self._fd: int | None = None  # the socket's, to see whether something arrived the loop has not read
        self._poll: select.poll | None = None

    #: The transport's write, once the connection is made (requests go out only then).
    _write: Callable[[bytes], None]

    def connection_made(self, transport) -> None:
        self.transport = transport
        self._write = transport.write
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._fd = sock.fileno()
            if hasattr(select, "poll"):
                self._poll = select.poll()
                self._poll.register(self._fd, select.POLLIN)
        self._write(self.core.start())

    async def settle(self) -> None:
        """Let the loop read what already arrived before a request goes out. When the loop was
        busy elsewhere (a coroutine that blocked it) while the server closed the connection (a
        restart, an idle timeout), its goodbye or end of file waits unread in the socket, and a
        request written now would be lost with it; once read, the connection is known closed."""
        for _ in range(_SETTLE_ROUNDS):
            if self.closed or not self._unread():
                return
            await asyncio.sleep(0)  # one turn of the loop: it reads the socket, then reports the loss

    def _unread(self) -> bool:
        """Whether bytes (or the end of the stream) wait in the socket, not yet read by the loop."""
        if self._poll is not None:
            return bool(self._poll.poll(0))
        if self._fd is not None:
            return bool(select.select([self._fd], [], [], 0)[0])
        return False

    def data_received(self, data: bytes) -> None:
        self.last_heard = self.loop.time()
        core = self.core
        if self.ready.done():
            try:
                goodbye = core.feed(data)  # each answer is filed as it is read, so the answers
            except ProtocolError as e:  # that came before a goodbye still reach their callers
                self._fail(bad_bytes(e))
                return
            if goodbye is not None:
                self._fail(goodbye)
            return
        try:
            out = core.handshake(data)
        except ProtocolError as e:
            self._fail(not_hoarddb(self.options.address, e))
            return
        except HoardError as e:  # a refused login, or a notice before the server closes
            e.server_closed = True
            self._fail(e)
            return
        if out:
            self._write(out)
        if core.ready and not self.ready.done():
            self.ready.set_result(True)

    def _arrived(self, request_id) -> None:
        waiter = self._waiting.pop(request_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def connection_lost(self, exc) -> None:
        handshake = not self.ready.done()
        self._fail(connection_lost(self.options.address, exc, handshake=handshake,
                                   tls_hint="it may expect TLS (leave out insecure=True)"
                                   if self.options.insecure else None))

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    def _fail(self, error: HoardError) -> None:
        if self.error is None:
            self.error = error
        self.closed = True
        if not self.ready.done():
            self.ready.set_exception(error)
            self.ready.exception()  # retrieved: nobody may await it any more
        waiting, self._waiting = self._waiting, {}
        for waiter in waiting.values():  # each takes what came for it, then the error
            if not waiter.done():
                waiter.set_result(None)
        self._can_write.set()
        if self.transport is not None:
            if not self.transport.is_closing() and self.transport.get_write_buffer_size():  # (closed: TLS has none)
                self.transport.abort()  # requests not yet sent must not go out after their callers were failed
            else:
                self.transport.close()

    # -- requests

    def open(self, doc: dict) -> int:
        """Send one request; its id."""
        if self.closed:
            raise self.error or ConnectionError_("the connection is closed")
        request_id, data = self.core.request(doc)
        self._write(data)
        return request_id

    async def next(self, request_id, last: bool = True) -> dict:
        """The next message for ``request_id`` (``last``: its answer, after which the request is
        finished); HoardTimeoutError (the connection failed) when the server sent nothing for
        ``timeout`` seconds meanwhile."""
        core = self.core
        timeout = self.options.timeout
        started = self.loop.time()
        while True:
            message = core.next(request_id, last)
            if message is not None:
                return message
            if self.closed:
                raise self.error or ConnectionError_("the connection is closed")
            waiter = self._waiting[request_id] = self.loop.create_future()
            try:
                if timeout is None:
                    await waiter
                    continue
                silent = self.loop.time() - max(started, self.last_heard)
                if silent >= timeout:
                    self._fail(HoardTimeoutError(f"the server at {self.options.address} sent nothing for "
                                             f"{timeout:g} s while an answer was due (timeout); the connection "
                                             "is closed"))
                    continue
                try:
                    await asyncio.wait_for(waiter, timeout - silent)
                except asyncio.TimeoutError:
                    pass  # others' answers may have come meanwhile: the server is not silent
            finally:
                if self._waiting.get(request_id) is waiter:
                    del self._waiting[request_id]

    @property
    def _waiters(self) -> dict:
        """The requests under way (their messages not all taken yet), by id."""
        return self.core.answers

    def has_message(self, request_id) -> bool:
        """Whether a message for ``request_id`` came (or the connection failed)."""
        return self.closed or self.core.has_message(request_id)

    def finish(self, request_id) -> None:
        """Nobody waits for ``request_id`` any more: what still comes for it is dropped."""
        self.core.finish(request_id)
        self._waiting.pop(request_id, None)

    async def write(self, data: bytes) -> None:
        """Write one upload chunk once the transport has room (at most ``timeout`` seconds of waiting)."""
        if not self._can_write.is_set():
            try:
                await asyncio.wait_for(self._can_write.wait(), self.options.timeout)
            except asyncio.TimeoutError:
                self._fail(HoardTimeoutError(f"the server at {self.options.address} took none of our upload for "
                                         f"{self.options.timeout:g} s (timeout); the connection is closed"))
        if self.closed:
            raise self.error or ConnectionError_("the connection is closed")
        self._write(data)

    def abort_upload(self, request_id) -> None:
        """Tell the server to drop an upload, without waiting: when the transport has no room
        for even that, the connection is closed instead (the server drops it then)."""
        if self.closed:
            return
        if self._can_write.is_set():
            self._write(self.core.chunk(request_id, b"", end=True, abort=True))
        else:
            self._fail(ConnectionError_(f"an upload to {self.options.address} was abandoned while the server "
                                        "took nothing; the connection is closed"))

    def close(self, error: HoardError | None = None) -> None:
        """Close now: every request waiting fails with ``error`` (ClosedError by default)."""
        self._fail(error or _closed())


#: Turns of the loop a call gives it to read what already arrived (its end of file takes two or
#: three, through TLS a few more); answers that keep coming for other calls do not hold it longer.
_SETTLE_ROUNDS = 8


def _closed() -> ClosedError:
    return ClosedError("this client is closed; connect again with hoarddb.aio.connect(...)", outcome_unknown=False)


class AsyncExecutor:
    """AsyncExecutor runs operation documents on a server: ``await execute(request)``, ``await close()``."""

    def __init__(self, options: ConnectOptions):
        self.options = options
        self._proto: _Protocol | None = None
        self._opening: _Protocol | None = None  # a connection being opened: close() fails it too
        self._connecting: asyncio.Lock | None = None
        self._closed = False
        #: Against a cluster: the map, and which node each keyed request goes to (client/router.py)
        self.router = Router(options)
        #: The connections to other nodes of a cluster, by node id (keyed requests sent to their owner)
        self._peers: dict[str, _Protocol] = {}
        self._routing: asyncio.Lock | None = None  # one map read, one peer opened at a time

    async def connect(self) -> _Protocol:
        if self._closed:
            raise _closed()
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._closed:  # closed while this task waited for another's connecting
                raise _closed()
            if self._proto is None or self._proto.closed:
                proto = await self._open()
                if self._closed:  # closed while this connection was being opened
                    proto.close()
                    raise _closed()
                self._proto = proto
                self.router.connected(proto.core.server_info)
        return self._proto

    async def _open(self) -> _Protocol:
        try:
            return await self._open_connection()
        except (ConnectionError_, HoardTimeoutError) as e:
            raise nothing_sent(e) from None
        finally:
            self._opening = None

    async def _open_connection(self) -> _Protocol:
        """A connection to the first of the servers (``options.candidates()``) that can be reached."""
        *others, last = self.options.candidates()
        for o in others:
            try:
                return await self._open_one(o)
            except (ConnectionError_, HoardTimeoutError):
                pass  # the next one
        return await self._open_one(last)

    async def _open_one(self, o: ConnectOptions) -> _Protocol:
        loop = asyncio.get_running_loop()
        context = o.ssl_context()

        def protocol() -> _Protocol:
            self._opening = _Protocol(o)
            return self._opening
        try:
            transport, proto = await asyncio.wait_for(loop.create_connection(
                protocol, o.host, o.port, ssl=context, server_hostname=o.host if context else None),
                o.connect_timeout)
        except asyncio.TimeoutError:
            raise HoardTimeoutError(f"no answer from {o.address} within {o.connect_timeout:g} s (connect_timeout)",
                                outcome_unknown=False) from None
        except ConnectionRefusedError as exc:
            raise ConnectionError_(f"cannot connect to {o.address}: {exc.strerror or exc}; is the server running, "
                                   "on this host and port?", outcome_unknown=False) from None
        except (OSError, EOFError) as exc:
            import ssl
            if context is not None and isinstance(exc, (ssl.SSLError, ConnectionResetError, EOFError)):
                raise o.tls_advice(exc) from None
            raise ConnectionError_(f"cannot connect to {o.address}: {exc}", outcome_unknown=False) from None
        try:
            if context is not None:
                o.check_fingerprint(transport.get_extra_info("ssl_object").getpeercert(binary_form=True))
            await asyncio.wait_for(asyncio.shield(proto.ready), o.connect_timeout)
        except asyncio.TimeoutError:
            transport.abort()
            raise HoardTimeoutError(f"no handshake answer from {o.address} within {o.connect_timeout:g} s; is it a "
                                "hoardDB server?", outcome_unknown=False) from None
        except BaseException:
            transport.abort()
            raise
        return proto

    @property
    def server_info(self) -> dict:
        return self._proto.core.server_info if self._proto else {}

    async def execute(self, request: Mapping) -> dict:
        """Run one operation; its answer, or its error raised. A stream's result is an async iterator."""
        if type(request) is not dict or type(request.get("op")) is not str:
            check_request(request)
        if self._proto is not None:
            await self._proto.settle()  # a connection closed while the loop was busy: found dead now
        if self.router.on:
            answer = await self._execute_at_owner(request)
            if answer is not None:
                return answer
        fresh = self._proto is None or self._proto.closed
        try:
            return await self._execute(request)
        except (ConnectionError_, HoardTimeoutError) as e:
            if not may_resend(e, fresh, request.get("op")):
                raise
        return await self._execute(request)

    async def _execute_at_owner(self, request: Mapping) -> dict | None:
        """A keyed request's answer from its partition's owner over that node's connection, or None when it
        goes on the URL's connection: the owner is the URL's node or unknown, its connection cannot be
        opened, or it failed on a request that may be sent again (a read, or one a node refused as moved)."""
        router = self.router
        target = router.route(request)
        if target is None:
            return None
        if target is READ_MAP:
            if self._routing is None:
                self._routing = asyncio.Lock()
            async with self._routing:
                if router.route(request) is READ_MAP:  # (another task may have read it meanwhile)
                    await self._read_map(request["db"])
            target = router.route(request, fresh=False)
        if not isinstance(target, Owner):
            return None
        node, options = target.node, target.options
        proto = self._peers.get(node)
        if proto is not None and not proto.closed:
            await proto.settle()  # closed by the node while the loop was busy (a restart): found dead now
        if proto is None or proto.closed or (proto.options is not options
                                             and proto.options.address != options.address):
            proto = await self._open_peer(node, options, request["db"])
            if proto is None:
                return None  # nothing was sent: the URL's node forwards it (or says the owner is down)
        try:
            return await self._execute(request, proto)
        except (ConnectionError_, HoardTimeoutError, PartitionUnavailableError) as e:
            if not isinstance(e, PartitionUnavailableError):  # (the owner's connection is done with)
                proto.close()
                if self._peers.get(node) is proto:
                    del self._peers[node]
            if router.falls_back(request, e):
                return None  # once more, on the URL's connection
            raise

    async def _open_peer(self, node: str, options: ConnectOptions, db: str) -> _Protocol | None:
        """The connection to a cluster's node (opened once by concurrent tasks), or None when it cannot be opened."""
        if self._routing is None:
            self._routing = asyncio.Lock()
        async with self._routing:
            proto = self._peers.get(node)
            if proto is not None and not proto.closed and proto.options.address == options.address:
                return proto
            if proto is not None:
                proto.close()  # (the node moved to another address)
            try:
                proto = await self._open_one(options)
            except (ConnectionError_, HoardTimeoutError):
                self._peers.pop(node, None)
                self.router.cannot_reach(node, db)
                return None
            if self._closed:
                proto.close()
                raise _closed()
            self._peers[node] = proto
            return proto

    async def _read_map(self, db: str) -> None:
        """Read the cluster's map of ``db`` on the URL's connection (client/router.py)."""
        try:
            answer = await self._execute(self.router.map_request(db))
        except (ConnectionError_, HoardTimeoutError):
            return  # the request goes on the URL's connection, which says what became of it
        except UnknownVerbError:  # a server older than the map: its requests go as before
            self.router.unreadable(db)
            return
        self.router.learn(db, answer.get("result"))

    async def _execute(self, request: Mapping, proto: _Protocol | None = None) -> dict:
        proto = proto or await self.connect()
        op = request["op"]
        upload = upload_source(request) if op in UPLOADS else None
        try:
            if upload is not None:
                answer = await self._upload(proto, *upload)
            else:
                request_id = proto.open(dict(request))
                try:
                    answer = await proto.next(request_id, op not in STREAMS)
                except BaseException:
                    proto.finish(request_id)
                    raise
                if op in STREAMS:
                    stream = stream_of(request, answer)
                    if stream is None:
                        proto.finish(request_id)
                    else:
                        chunks = self._chunks(proto, request_id, answer, stream)
                        await chunks.__anext__()  # into its try: dropped unread, it still finishes (see _chunks)
                        return {"ok": 1, "result": chunks}
        except (ConnectionError_, HoardTimeoutError, ClosedError) as e:
            if isinstance(e, ClosedError) and not self._closed:
                raise
            raise unanswered(e, op, not retryable(op), closed=self._closed) from None
        return result(answer)

    async def _upload(self, proto: _Protocol, request: dict, source) -> dict:
        request_id = proto.open({**request, "upload": True})
        try:
            try:
                for data in proto.core.upload(request_id, source, lambda: proto.has_message(request_id)):
                    await proto.write(data)
            except BaseException:
                proto.abort_upload(request_id)  # at once: a cancelled task must not wait again
                raise
            return await proto.next(request_id)
        finally:
            proto.finish(request_id)

    async def _chunks(self, proto: _Protocol, request_id, first: dict, stream: Stream) -> AsyncIterator[bytes]:
        try:
            # _execute takes this first yield: a generator never started runs no finally (and
            # the loop's finalizer only closes those started), so a stream dropped unread would
            # keep its waiter, and every chunk still to come, for the connection's life.
            yield b""
            message = first
            while True:
                pieces, ended = stream.step(message)
                for piece in pieces:
                    yield piece
                if ended:
                    return
                if self._closed:
                    raise stream_closed()
                try:
                    message = await proto.next(request_id, False)
                except (ConnectionError_, HoardTimeoutError, ClosedError) as e:
                    if self._closed:
                        raise stream_closed() from None
                    raise unanswered(e, "stream", False) from None
        finally:
            proto.finish(request_id)  # chunks still arriving for it are dropped

    async def close(self) -> None:
        """Close the connection; the calls waiting for answers raise ClosedError now, later ones too."""
        self._closed = True
        for proto in (self._proto, self._opening, *self._peers.values()):
            if proto is not None:
                proto.close()
        self._proto = None
        self._peers.clear()


# ---- the public objects: hoarddb.api's, whose requests this client awaits ----------------------

class Client(api.BaseClient):
    """Client is a connection to a server: ``client["app"]`` is a database; ``await client.close()``.

    Its databases, buckets, documents and store fields are :mod:`hoarddb.api`'s objects:
    they build each operation as they do for the blocking client, and their methods
    return what this client's :meth:`_run` gives, a coroutine to await.
    """

    def __init__(self, executor: AsyncExecutor):
        super().__init__(executor)
        self._call = None  # no engine in this process: every request goes through _run

    async def _run(self, request: dict, shape=None) -> Any:
        answer = await self._executor.execute(request)
        return answer if shape is None else shape(answer)

    def _cursor(self, op, db: str, bucket: str, bound: dict) -> "AsyncCursor":
        return AsyncCursor(self, {"op": op.name, "db": db, "bucket": bucket, "args": bound})

    async def close(self) -> None:
        await self._executor.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


class AsyncCursor:
    """AsyncCursor is the answer of find, search, range, list and aggregate on the asyncio client.

    ``async for doc in bucket.find(f)`` reads the documents as it goes, a batch at a time
    (``batch_size``, 101 first by default; later batches up to ``batch_size`` or about 1 MiB), so a
    result of any size never sits whole in memory. ``await bucket.find(f)`` reads them all
    into a list (with ``index_used``), as before cursors; so does ``await cursor.to_list()``.
    Nothing is sent until it is awaited or iterated. ``await cursor.close()`` (or ``async
    with``) closes one left unfinished; the server closes it by itself at its end, after
    ``cursor_timeout`` unread, or with the connection.
    """

    def __init__(self, client: Client, request: dict):
        self._client = client
        self._request = request
        self._size = request["args"].get("batch_size")
        if self._size is None:
            request["args"] = {**request["args"],
                               "batch_size": api.first_batch(operations.VERBS[request["op"]], request["args"])}
        self._started = False
        self._batch: list = []
        self._at = 0
        self.id: int | None = None
        self.index_used: str | None = None
        self.explain: dict | None = None
        #: How many documents were handed out so far.
        self.read = 0

    async def _start(self) -> None:
        if not self._started:
            self._started = True
            answer = await self._client._run(self._request)
            self.index_used, self.explain = answer.get("index_used"), answer.get("explain")
            self._batch, self._at, self.id = list(answer.get("result") or []), 0, answer.get("cursor")

    async def next_batch(self) -> list:
        """The documents left of the batch at hand, or the next batch (an empty list at the end)."""
        await self._start()
        rest = self._batch[self._at:]
        if not rest and self.id:
            request = {"op": operations.MORE.name, "cursor": self.id}
            if self._size is not None:
                request["batch_size"] = self._size
            answer = await self._client._run(request)
            rest, self.id = list(answer.get("result") or []), answer.get("cursor")
        self._batch, self._at = [], 0
        self.read += len(rest)
        return rest

    def __aiter__(self) -> "AsyncCursor":
        if self.read and not self.id and self._at >= len(self._batch):
            raise CursorNotFoundError(
                f"this cursor was read to its end ({self.read} documents): a cursor is read once. Keep the "
                "documents with await cursor.to_list() to go over them again, or run the read again")
        return self

    async def __anext__(self) -> Any:
        await self._start()
        while self._at >= len(self._batch):
            if not self.id:
                raise StopAsyncIteration
            batch = await self.next_batch()
            self.read -= len(batch)
            self._batch, self._at = batch, 0
        doc = self._batch[self._at]
        self._at += 1
        self.read += 1
        return doc

    async def to_list(self) -> list:
        """Every document left, as a list (``index_used`` on it, for a find or search)."""
        docs: list = []
        while batch := await self.next_batch():
            docs.extend(batch)
        return api.Found(docs, self.index_used, self.explain) if self.index_used is not None else docs

    def __await__(self):
        return self.to_list().__await__()

    async def close(self) -> None:
        """Close the cursor on the server before its end (nothing to do once it is read to its end)."""
        cursor_id, self.id = self.id, None
        self._batch, self._at, self._started = [], 0, True
        if cursor_id:
            await self._client._run({"op": operations.CLOSE_CURSOR.name, "cursor": cursor_id})

    async def __aenter__(self) -> "AsyncCursor":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


Database = api.Database
Bucket = api.Bucket
Document = api.Document
StoreField = api.StoreField
Element = api.Element


async def connect(url: str | None = None, **options) -> Client:
    """A connected asyncio client of the server at ``url``; the options of :func:`hoarddb.connect`
    (``busy_poll`` is taken and does nothing here: the event loop waits for many things at once)."""
    executor = AsyncExecutor(ConnectOptions.from_url(url, **options))
    await executor.connect()
    return Client(executor)
