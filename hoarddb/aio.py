"""hoardDB for asyncio: the same Client, Database, Bucket and store-field verbs, awaitable.

    import hoarddb.aio

    async def main():
        client = await hoarddb.aio.connect("hoarddb://app:secret@127.0.0.1:7070/?tls_ca=server.crt")
        db = client["app"]
        await db.Comments.push({"Text": "hi"})
        async for chunk in await db.Photos.stream(blob_id):
            ...
        await client.close()

Every verb of :mod:`hoarddb.operations` is a coroutine method here too; errors are the
same classes as the blocking client's. Requests from concurrent tasks share the one
connection and are pipelined: each is sent at once and its answer matched by id.
The connection is asyncio's own (an :class:`asyncio.Protocol` over the sans-IO
:class:`hoarddb.wire.ClientProtocol`); it reconnects on the next call after a loss.
A lost connection fails every request waiting on it at once: a read is sent again on a
new connection, a write raises with ``outcome_unknown = True`` (never resent). Before a
call sends, the loop reads what already arrived, so a connection the server closed while
the loop was busy elsewhere (a restart, an idle timeout) is found dead then and the
request goes on a new one, as with the blocking client. A call
waits at most ``timeout`` seconds of silence from the server; ``close()`` fails the
calls in flight with ClosedError.
"""

from __future__ import annotations

import asyncio
import select
import socket
from collections import deque
from collections.abc import Mapping
from typing import Any, AsyncIterator

from . import operations
from .chunks import chunks
from .api import BucketsByName, Found, StoreFieldsByName
from .client.connection import (_RETRYABLE, STREAM_CHUNK, _Spool, _upload_source, nothing_sent, stream_closed,
                                stream_step, unanswered)
from .client.options import ConnectOptions
from .errors import (ClosedError, ConnectionError_, HoardError, InvalidArgumentError, ProtocolError,
                     TimeoutError_, UnknownVerbError, error_from_answer)
from .values.codec import decode, encode
from .wire.framing import FrameReader, decode_frame
from .wire.messages import CHUNK_SIZE
from .wire.protocol import ClientProtocol, State

__all__ = ["connect", "Client", "Database", "Bucket", "AsyncExecutor"]


class _Answers:
    """_Answers holds the messages for one request id until its task takes them.

    A stream nobody reads yet (its task awaits something else) would pile chunks up
    here: past a few in memory they go to a temporary file instead, in order.
    """

    IN_MEMORY = 8

    def __init__(self):
        self._queue: deque = deque()
        self._spool: _Spool | None = None
        self._error: HoardError | None = None
        self._event = asyncio.Event()

    def put(self, item) -> None:
        if isinstance(item, HoardError):
            self._error = self._error or item
        elif self._spool is not None or len(self._queue) >= self.IN_MEMORY:
            if self._spool is None:
                self._spool = _Spool()
            self._spool.put(encode(item))
        else:
            self._queue.append(item)
        self._event.set()

    def empty(self) -> bool:
        return not self._queue and not (self._spool and self._spool.count) and self._error is None

    async def get(self):
        while True:
            if self._queue:
                return self._queue.popleft()
            if self._spool is not None and self._spool.count:
                return decode(self._spool.take())
            if self._error is not None:
                return self._error
            self._event.clear()
            await self._event.wait()

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()


class _Protocol(asyncio.Protocol):
    """_Protocol is one connection on the event loop: it feeds the core and resolves waiters by id."""

    def __init__(self, options: ConnectOptions):
        self.options = options
        self.core = ClientProtocol(options.user, options.password, client_name="hoarddb-python-aio")
        self.loop = asyncio.get_running_loop()
        self.ready: asyncio.Future = self.loop.create_future()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.error: HoardError | None = None
        self._waiters: dict[Any, _Answers] = {}
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._reader = FrameReader()  # once ready: answers are read here, in order (see data_received)
        #: The loop's time when the server last sent something: a call times out only after
        #: ``timeout`` seconds in which nothing came (a long pipeline that keeps answering does not).
        self.last_heard = self.loop.time()
        self._fd: int | None = None  # the socket's, to see whether something arrived the loop has not read
        self._poll = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._fd = sock.fileno()
            if hasattr(select, "poll"):
                self._poll = select.poll()
                self._poll.register(self._fd, select.POLLIN)
        transport.write(self.core.start())

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
        if self.ready.done():
            self._answers_received(data)
            return
        try:
            answers = self.core.receive_data(data)
        except ProtocolError as e:
            self._fail(ConnectionError_(f"{self.options.address} did not answer as a hoardDB server: {e.message}",
                                        outcome_unknown=False))
            return
        except HoardError as e:  # a refused login, or a notice before the server closes
            e.server_closed = True
            self._fail(e)
            return
        out = self.core.data_to_send()
        if out:
            self.transport.write(out)
        if self.core.state is State.READY and not self.ready.done():
            self.ready.set_result(True)
        for answer in answers:
            self._deliver(answer)

    def _answers_received(self, data: bytes) -> None:
        """Answers, once ready: each goes to its waiter as it is read, so the answers that came
        before a goodbye of the server (``id: null``, then it closes) still reach theirs."""
        self._reader.feed(data)
        try:
            while (frame := self._reader.next_frame()) is not None:
                answer = decode_frame(frame)
                if answer.get("id") is None and answer.get("ok") == 0:
                    error = error_from_answer(answer)
                    error.server_closed = True
                    self._fail(error)
                    return
                self._deliver(answer)
        except ProtocolError as e:
            self._fail(ConnectionError_(f"the server sent bytes that are not a hoardDB message: {e.message}"))

    def _deliver(self, answer: dict) -> None:
        queue = self._waiters.get(answer.get("id"))
        if queue is not None:  # else its caller gave up (cancelled, timed out): dropped
            queue.put(answer)

    def connection_lost(self, exc) -> None:
        why = f" ({exc})" if exc else ""
        if not self.ready.done():
            hint = "it may expect TLS (leave out insecure=true)" if self.options.insecure else \
                "it may have refused the connection (see its log)"
            self._fail(ConnectionError_(f"the server at {self.options.address} closed the connection during the "
                                        f"handshake{why}: {hint}", outcome_unknown=False))
        else:
            self._fail(ConnectionError_(f"the connection to {self.options.address} was lost{why}: the server closed "
                                        "it, stopped or restarted, or the network failed; the next call reconnects"))

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
        for queue in self._waiters.values():
            queue.put(self.error)
        self._can_write.set()
        if self.transport is not None:
            if not self.transport.is_closing() and self.transport.get_write_buffer_size():  # (closed: TLS has none)
                self.transport.abort()  # requests not yet sent must not go out after their callers were failed
            else:
                self.transport.close()

    # -- requests

    def open(self, doc: dict) -> tuple[int, _Answers]:
        if self.closed:
            raise self.error or ConnectionError_("the connection is closed")
        request_id, data = self.core.request(doc)
        queue = _Answers()
        self._waiters[request_id] = queue
        self.transport.write(data)
        return request_id, queue

    async def next(self, request_id, queue: _Answers) -> dict:
        """The next message for ``request_id``; TimeoutError_ (the connection failed) when the
        server sent nothing for ``timeout`` seconds meanwhile."""
        timeout = self.options.timeout
        if timeout is None:
            item = await queue.get()
        else:
            started = self.loop.time()
            while True:
                silent = self.loop.time() - max(started, self.last_heard)
                if silent >= timeout:
                    self._fail(TimeoutError_(f"the server at {self.options.address} sent nothing for {timeout:g} s "
                                             "while an answer was due (timeout); the connection is closed"))
                    item = self.error
                    break
                try:
                    item = await asyncio.wait_for(queue.get(), timeout - silent)
                    break
                except asyncio.TimeoutError:
                    continue  # others' answers may have come meanwhile: the server is not silent
        if isinstance(item, HoardError):
            raise item
        return item

    def finish(self, request_id) -> None:
        queue = self._waiters.pop(request_id, None)
        if queue is not None:
            queue.close()

    async def send_chunk(self, request_id, data, *, end=False, abort=False) -> None:
        """Write one upload chunk once the transport has room (at most ``timeout`` seconds of waiting)."""
        if not self._can_write.is_set():
            try:
                await asyncio.wait_for(self._can_write.wait(), self.options.timeout)
            except asyncio.TimeoutError:
                self._fail(TimeoutError_(f"the server at {self.options.address} took none of our upload for "
                                         f"{self.options.timeout:g} s (timeout); the connection is closed"))
        if self.closed:
            raise self.error
        self.transport.write(self.core.chunk(request_id, data, end=end, abort=abort))

    def abort_upload(self, request_id) -> None:
        """Tell the server to drop an upload, without waiting: when the transport has no room
        for even that, the connection is closed instead (the server drops it then)."""
        if self.closed:
            return
        if self._can_write.is_set():
            self.transport.write(self.core.chunk(request_id, b"", end=True, abort=True))
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
        return self._proto

    async def _open(self) -> _Protocol:
        try:
            return await self._open_connection()
        except (ConnectionError_, TimeoutError_) as e:
            raise nothing_sent(e) from None
        finally:
            self._opening = None

    async def _open_connection(self) -> _Protocol:
        o = self.options
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
            raise TimeoutError_(f"no answer from {o.address} within {o.connect_timeout:g} s (connect_timeout)",
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
            raise TimeoutError_(f"no handshake answer from {o.address} within {o.connect_timeout:g} s; is it a "
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
        if not isinstance(request, Mapping) or not isinstance(request.get("op"), str):
            raise InvalidArgumentError(operations.REQUEST_SHAPE)  # as the engine says it
        if self._proto is not None:
            await self._proto.settle()  # a connection closed while the loop was busy: found dead now
        fresh = self._proto is None or self._proto.closed
        try:
            return await self._execute(request)
        except (ConnectionError_, TimeoutError_) as e:
            lost = isinstance(e, ConnectionError_) or getattr(e, "server_closed", False)
            if fresh or not lost or request.get("op") not in _RETRYABLE:
                raise
        return await self._execute(request)

    async def _execute(self, request: Mapping) -> dict:
        proto = await self.connect()
        op = request["op"]
        upload = _upload_source(request)
        try:
            if upload is not None:
                answer = await self._upload(proto, *upload)
            else:
                request_id, queue = proto.open(dict(request))
                try:
                    answer = await proto.next(request_id, queue)
                except BaseException:
                    proto.finish(request_id)
                    raise
                if op == "stream" and answer.get("ok") == 1 and ("chunk" in answer or answer.get("end")):
                    args = request.get("args") or {}
                    size = args.get("chunk_size") if isinstance(args, Mapping) else None
                    stream = self._chunks(proto, request_id, queue, answer, size or STREAM_CHUNK)
                    await stream.__anext__()  # into its try: dropped unread, it still finishes (see _chunks)
                    return {"ok": 1, "result": stream}
                proto.finish(request_id)
        except (ConnectionError_, TimeoutError_, ClosedError) as e:
            if isinstance(e, ClosedError) and not self._closed:
                raise
            raise unanswered(e, op, op not in _RETRYABLE, closed=self._closed) from None
        answer.pop("id", None)
        if answer.get("ok") != 1:
            raise error_from_answer(answer)
        return answer

    async def _upload(self, proto: _Protocol, request: dict, source) -> dict:
        request_id, queue = proto.open({**request, "upload": True})
        try:
            try:
                for chunk in chunks(source, CHUNK_SIZE):
                    await proto.send_chunk(request_id, chunk)
                    if not queue.empty():  # refused early: stop sending
                        await proto.send_chunk(request_id, b"", end=True, abort=True)
                        break
                else:
                    await proto.send_chunk(request_id, b"", end=True)
            except BaseException:
                proto.abort_upload(request_id)  # at once: a cancelled task must not wait again
                raise
            return await proto.next(request_id, queue)
        finally:
            proto.finish(request_id)

    async def _chunks(self, proto: _Protocol, request_id, queue, first: dict, chunk_size: int) -> AsyncIterator[bytes]:
        try:
            # _execute takes this first yield: a generator never started runs no finally (and
            # the loop's finalizer only closes those started), so a stream dropped unread would
            # keep its waiter, and every chunk still to come, for the connection's life.
            yield b""
            message = first
            buffer = bytearray()
            while True:
                pieces, ended = stream_step(message, buffer, chunk_size)
                for piece in pieces:
                    yield piece
                if ended:
                    return
                if self._closed:
                    raise stream_closed()
                try:
                    message = await proto.next(request_id, queue)
                except (ConnectionError_, TimeoutError_, ClosedError) as e:
                    if self._closed:
                        raise stream_closed() from None
                    raise unanswered(e, "stream", False) from None
        finally:
            proto.finish(request_id)  # chunks still arriving for it are dropped

    async def close(self) -> None:
        """Close the connection; the calls waiting for answers raise ClosedError now, later ones too."""
        self._closed = True
        for proto in (self._proto, self._opening):
            if proto is not None:
                proto.close()
        self._proto = None


# ---- the public objects, as hoarddb.api's, awaitable ----------------------------------------------

class Client:
    """Client is a connection to a server: ``client["app"]`` is a database; ``await client.close()``."""

    def __init__(self, executor: AsyncExecutor):
        self._executor = executor

    async def execute(self, request: dict) -> dict:
        """Run one operation document and return its whole answer."""
        return await self._executor.execute(request)

    async def _result(self, request: dict) -> Any:
        return (await self._executor.execute(request)).get("result")

    def __getitem__(self, name: str) -> "Database":
        return Database(self, name)

    async def databases(self) -> list[str]:
        return await self._result({"op": "list_databases"})

    async def create_database(self, name: str) -> "Database":
        await self._result({"op": "create_database", "db": name})
        return Database(self, name)

    async def drop_database(self, name: str) -> dict:
        return await self._result({"op": "drop_database", "db": name})

    async def metrics(self) -> dict:
        return await self._result({"op": "metrics"})

    async def sweep_ttl(self) -> dict:
        return await self._result({"op": "sweep_ttl"})

    async def close(self) -> None:
        await self._executor.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


class Database(BucketsByName):
    """Database is a named group of buckets; ``db.Name`` and ``db["Name"]`` are its buckets."""

    async def create_bucket(self, name: str, type: str = "hash", **options) -> "Bucket":
        answer = await self._client.execute(
            {"op": "create_bucket", "db": self.name, "bucket": name, "options": {"type": type, **options}})
        bucket = Bucket(self, name)
        bucket.warnings = answer.get("warnings", [])
        return bucket

    async def drop_bucket(self, name: str) -> dict:
        return await self._client._result({"op": "drop_bucket", "db": self.name, "bucket": name})

    async def buckets(self) -> list[str]:
        return await self._client._result({"op": "list_buckets", "db": self.name})


class Bucket:
    """Bucket's methods are the verbs of :mod:`hoarddb.operations`, as coroutines."""

    warnings: list[str] = []

    def __init__(self, database: Database, name: str):
        self._database = database
        self.name = name

    async def _call(self, op: operations.Operation, args: tuple, kwargs: dict) -> Any:
        bound = operations.bind(op, args, kwargs)
        answer = await self._database._client.execute(
            {"op": op.name, "db": self._database.name, "bucket": self.name, "args": bound})
        if "index_used" in answer:
            return Found(answer["result"], answer["index_used"], answer.get("explain"))
        return answer.get("result")

    async def stats(self) -> dict:
        return await self._database._client._result({"op": "stats", "db": self._database.name, "bucket": self.name})

    async def describe(self) -> dict:
        return await self._database._client._result(
            {"op": "describe_bucket", "db": self._database.name, "bucket": self.name})

    def __getitem__(self, key: Any) -> "Document":
        return Document(self, key)

    def doc(self, key: Any) -> "Document":
        return Document(self, key)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise _UnknownVerb(
            f"unknown verb {name!r}; verbs: {', '.join(sorted({op.name for op in operations.VERBS.values()}))}")


class Document(StoreFieldsByName):
    """Document is a document's address in a bucket; its attributes are its store fields."""


class StoreField:
    """StoreField is one store a document owns; its verbs are coroutines."""

    def __init__(self, document: Document, name: str):
        self._document = document
        self.name = name

    async def _send(self, name: str, args: dict) -> Any:
        bucket = self._document._bucket
        answer = await bucket._database._client.execute({
            "op": name, "db": bucket._database.name, "bucket": bucket.name,
            "key": self._document.key, "field": self.name, "args": args})
        return answer.get("result")

    def __getattr__(self, name: str):
        """Any other name is sent as it is, as the blocking StoreField does: the engine refuses
        it saying what to use instead (``update`` on a store field, say)."""
        if name.startswith("_"):
            raise AttributeError(name)

        async def verb(*args, **kwargs):
            return await self._send(name, {})
        return verb


class _UnknownVerb(UnknownVerbError, AttributeError):
    """An unknown verb is both UnknownVerbError and AttributeError (so hasattr works)."""


def _make_verb(op: operations.Operation, name: str):
    async def verb(self, *args, **kwargs):
        return await self._call(op, args, kwargs)

    verb.__name__ = name
    verb.__qualname__ = f"Bucket.{name}"
    verb.__doc__ = f"{op.summary}\n\nAnswers {op.answer}. Example: {op.example}"
    return verb


def _make_field_verb(op: operations.Operation, name: str):
    async def verb(self, *args, **kwargs):
        return await self._send(op.name, operations.bind(op, args, kwargs))

    verb.__name__ = name
    verb.__qualname__ = f"StoreField.{name}"
    return verb


Database.bucket_class = Bucket
Document.field_class = StoreField
for _name, _op in operations.VERBS.items():
    setattr(Bucket, _name, _make_verb(_op, _name))
for _name, _op in operations.FIELD_VERBS.items():
    setattr(StoreField, _name, _make_field_verb(_op, _name))


async def connect(url: str | None = None, **options) -> Client:
    """A connected asyncio client of the server at ``url``; the options of :func:`hoarddb.connect`
    (``busy_poll`` is taken and does nothing here: the event loop waits for many things at once)."""
    executor = AsyncExecutor(ConnectOptions.from_url(url, **options))
    await executor.connect()
    return Client(executor)
