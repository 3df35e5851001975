"""The client's core without I/O, under both the blocking and the asyncio client: requests, answers, errors, retries.

Both clients are thin adapters over :class:`ClientCore`, as asyncpg layers its event-loop
protocol over a core protocol: the adapter owns the socket (or the asyncio transport),
the waiting and the timeouts; the core owns everything else, the same for both:

    request ids, encoding     ClientCore.request / requests / chunk (a hoarddb.wire
                              ClientProtocol, which also drives the handshake)
    answer decoding, filing   ClientCore.feed: bytes in, each answer filed under its
                              request's id (``next`` takes it); an answer nobody waits for
                              any more is dropped; the server's goodbye (``id: null``)
                              becomes the error the adapter closes the connection with
    error mapping             result (an answer, or its error raised), unanswered,
                              nothing_sent, stream_closed, connection_lost
    the retry rule            may_resend and retryable, from _RETRYABLE (hoarddb.operations' table)
    streams and uploads       Stream (a blob stream's chunks re-cut to ``chunk_size``),
                              upload_source (whether a put's data goes in chunks),
                              ClientCore.upload (the chunk messages of an upload)

One request's life, whichever adapter runs it::

    check_request(request)                       refuses what is not an operation
    upload_source(request)                       a put of big data: it goes in chunks (upload)
    request_id, data = core.request(doc)         the adapter writes ``data``
    core.feed(bytes read)   ...until             the adapter reads
    answer = core.next(request_id, last=True)    not None
    result(answer)                               the answer, or its error raised

A request's answers wait in memory; past ``IN_MEMORY`` of them (a blob stream nobody
reads yet, while other requests use the connection) the rest wait in a temporary file,
so memory stays bounded.
"""

from __future__ import annotations

import io
import tempfile
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any, Callable

from .. import operations
from ..chunks import chunks
from ..errors import BadValueError, ClosedError, ConnectionError_, HoardError, InvalidArgumentError, error_from_answer
from ..values.codec import encode
from ..wire.framing import decode_frame, decode_frames, encode_message, split_frames
from ..wire.messages import CHUNK_SIZE, INLINE_BLOB_MAX
from ..wire.protocol import ClientProtocol, State
from .options import in_callers_words

#: Chunk size a stream yields when the request does not name one (the engine's default).
STREAM_CHUNK = 1024 * 1024
#: Operations safe to send again on a fresh connection when the old one turned out dead.
_RETRYABLE = operations.names(retry=True)


def retryable(op: Any) -> bool:
    """Whether a request of ``op`` may be sent again after its connection was lost (it writes nothing)."""
    return op in _RETRYABLE


class Spool:
    """Spool keeps the frames of a request nobody is reading yet, on disk past a few MiB, in order."""

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


class ClientCore(ClientProtocol):
    """ClientCore is one connection's client side without I/O: ids, encoding, and the answers filed by id.

    The handshake is :class:`hoarddb.wire.ClientProtocol`'s: write :meth:`start`, then
    feed what the server sends to :meth:`handshake` and write what it returns, until
    :attr:`ready`. Then each request is opened by :meth:`request` (or :meth:`requests`,
    a pipeline), and its messages wait under its id from :meth:`feed` until :meth:`next`
    takes them; :meth:`finish` drops the request and whatever still comes for it.

    :param arrived: called with a request's id when a message for it was filed (the
        asyncio adapter wakes the task waiting for it); None when nobody needs telling.
    """

    #: Messages a request keeps in memory before the rest go to a temporary file.
    IN_MEMORY = 8

    def __init__(self, user: str | None = None, password: str | None = None, *,
                 client_name: str = "hoarddb-python", arrived: Callable[[Any], None] | None = None):
        super().__init__(user, password, client_name=client_name)
        self.arrived = arrived
        #: The requests waiting, by id: the messages that came for each and are not taken yet.
        self.answers: dict[Any, deque] = {}
        #: The requests whose messages go to a file (past IN_MEMORY in memory), by id.
        self.spools: dict[Any, Spool] = {}

    # -- the handshake

    def handshake(self, data: bytes) -> bytes:
        """Feed bytes of the handshake; the bytes to send back (empty when none). Raises
        ProtocolError when the peer does not speak hoardDB, and the server's error
        (AUTH_FAILED...) when it refuses the login."""
        for answer in self.receive_data(data):  # what came with the last handshake message
            self._file(answer)
        return self.data_to_send()

    @property
    def ready(self) -> bool:
        """Whether the handshake is done: requests may go."""
        return self.state is State.READY

    # -- requests

    def request(self, doc: Mapping) -> tuple[int, bytes]:
        """A new id and the bytes of ``doc`` sent under it (BadValueError, DocumentTooLargeError);
        its messages are filed from now on."""
        if self.state is not State.READY:
            raise ConnectionError_(f"the connection is {self.state.value}, not ready for requests")
        request_id = self._next_id = self._next_id + 1
        data = encode_message({"id": request_id, **doc}, self.max_message_size)
        self.answers[request_id] = deque()
        return request_id, data

    def requests(self, docs) -> tuple[range, bytes]:
        """New ids for many requests, and the bytes of them all, in order (a pipeline)."""
        ids, data = super().requests(docs)
        answers = self.answers
        for request_id in ids:
            answers[request_id] = deque()
        return ids, data

    def upload(self, request_id: int, source, refused: Callable[[], bool]) -> Iterator[bytes]:
        """The messages of an upload of ``source`` (bytes or a binary file) for the put sent as
        ``request_id``, each to write before the next is made (the file is read as they go):
        1 MiB chunks, then the end. After each chunk ``refused()`` is asked whether the answer
        came already (no such bucket...): then the upload ends there, aborted."""
        chunk = self.chunk
        for data in chunks(source, CHUNK_SIZE):
            yield chunk(request_id, data)
            if refused():
                yield chunk(request_id, b"", end=True, abort=True)
                return
        yield chunk(request_id, b"", end=True)

    # -- answers

    def feed(self, data: bytes) -> HoardError | None:
        """Feed bytes from the server (once ready): each message is filed under its id.
        Returns the server's goodbye (``id: null``) as its error when one came: the messages
        before it are filed, nothing after it is read, and the adapter closes the connection.
        Raises ProtocolError when the bytes are not hoardDB messages."""
        reader = self._reader  # (the handshake's: what came after it is read on)
        reader.feed(data)
        while True:
            frames = reader.next_frames()
            if not frames:
                return None
            if self.spools:  # some go to a file: one by one, those undecoded
                for frame in split_frames(frames):
                    goodbye = self._route(frame)
                    if goodbye is not None:
                        return goodbye
                continue
            for doc in decode_frames(frames):  # all of them in one call
                if doc.get("id") is None:
                    return self._goodbye(doc)
                self._file(doc)

    def _goodbye(self, doc: dict) -> HoardError:
        error = error_from_answer(doc)
        error.server_closed = True
        return error

    def _file(self, doc: dict) -> None:
        request_id = doc.get("id")
        queue = self.answers.get(request_id)
        if queue is None:
            return  # nobody waits for it any more (finished, abandoned): dropped
        if len(queue) >= self.IN_MEMORY or request_id in self.spools:
            spool = self.spools.get(request_id)
            if spool is None:
                spool = self.spools[request_id] = Spool()
            spool.put(encode(doc))
        else:
            queue.append(doc)
        if self.arrived is not None:
            self.arrived(request_id)

    def _route(self, frame: bytes) -> HoardError | None:
        """File or spool one frame, peeking at its id (a chunk to spool is not decoded)."""
        doc = None
        request_id = _peek_id(frame)
        if request_id is _NO_ID:
            doc = decode_frame(frame)
            request_id = doc.get("id")
        if request_id is None:
            return self._goodbye(doc or decode_frame(frame))
        queue = self.answers.get(request_id)
        if queue is None:
            return None  # dropped, as in _file
        spool = self.spools.get(request_id)
        if spool is None and len(queue) >= self.IN_MEMORY:
            spool = self.spools[request_id] = Spool()
        if spool is not None:
            spool.put(frame)
        else:
            queue.append(doc or decode_frame(frame))
        if self.arrived is not None:
            self.arrived(request_id)
        return None

    def next(self, request_id, last: bool = False) -> dict | None:
        """The next message for ``request_id``, or None until one comes; ``last``: it is the
        last one the request gets (its answer), so the request is finished once it is taken."""
        queue = self.answers.get(request_id)
        if queue:
            message = queue.popleft()
            if last and not self.spools:  # (finish, without its calls: every answer comes here)
                del self.answers[request_id]
                return message
        else:
            spool = self.spools.get(request_id)
            if spool is None or not spool.count:
                return None
            message = decode_frame(spool.take())
        if last:
            self.finish(request_id)
        return message

    def has_message(self, request_id) -> bool:
        """Whether a message for ``request_id`` is waiting."""
        if self.answers.get(request_id):
            return True
        spool = self.spools.get(request_id)
        return spool is not None and spool.count > 0

    def finish(self, request_id) -> None:
        """Nobody waits for ``request_id`` any more: what came for it and what still comes is dropped."""
        self.answers.pop(request_id, None)
        spool = self.spools.pop(request_id, None)
        if spool is not None:
            spool.close()

    def close(self) -> None:
        """The connection is closed: its files are let go (the messages in memory stay for their callers)."""
        for spool in self.spools.values():
            spool.close()
        self.spools.clear()


_NO_ID = object()


def _peek_id(frame: bytes):
    """The id of an answer frame when it is its first element (as servers send it), else _NO_ID."""
    if len(frame) > 8 and frame[4:8] == b"\x10id\x00":  # int32 "id"
        return int.from_bytes(frame[8:12], "little", signed=True)
    if len(frame) > 8 and frame[4:8] == b"\x12id\x00":  # int64 "id"
        return int.from_bytes(frame[8:16], "little", signed=True)
    return _NO_ID


# ---- requests and answers -----------------------------------------------------------------------

def check_request(request) -> None:
    """Refuse what is not an operation document, as the engine says it. (Adapters call it only
    when ``request`` is not a plain dict with a string op: those pass without a call.)"""
    if not isinstance(request, Mapping) or not isinstance(request.get("op"), str):
        raise InvalidArgumentError(operations.REQUEST_SHAPE)


def result(answer: dict) -> dict:
    """The answer to a request, without its id; its error raised when it is one."""
    answer.pop("id", None)
    if answer.get("ok") != 1:
        raise error_from_answer(answer)
    return answer


def may_resend(error: HoardError, fresh: bool, op: Any) -> bool:
    """The retry rule: a request whose connection failed is sent once more, on a new connection,
    when it writes nothing (:func:`retryable`), the connection was lost (not a timeout: a server
    that fell silent is not asked again) and it was not a fresh one (a read that fails on a new
    connection fails: the server is down, not restarted)."""
    lost = isinstance(error, ConnectionError_) or getattr(error, "server_closed", False)
    return lost and not fresh and op in _RETRYABLE


# ---- streams and uploads ------------------------------------------------------------------------

class Stream:
    """Stream is a blob stream being read: the server's chunks, handed out as pieces of ``chunk_size``."""

    def __init__(self, chunk_size: int):
        self.chunk_size = chunk_size
        self._buffer = bytearray()

    def step(self, message: dict) -> tuple[list[bytes], bool]:
        """One message of the stream: the pieces it completes (the rest waits for the next
        message; the last message gives it too) and whether it was the last. An error answer
        raises."""
        if message.get("ok") != 1:
            raise error_from_answer(message)
        buffer = self._buffer
        if message.get("end"):
            return ([bytes(buffer)] if buffer else []), True
        buffer += message.get("chunk") or b""
        size = self.chunk_size
        pieces = []
        while len(buffer) >= size:
            pieces.append(bytes(buffer[:size]))
            del buffer[:size]
        return pieces, False


def stream_of(request: Mapping, answer: dict) -> Stream | None:
    """A Stream when ``answer`` is the first message of a blob stream ``request`` asked for, else None."""
    if request["op"] not in STREAMS or answer.get("ok") != 1 or not ("chunk" in answer or answer.get("end")):
        return None
    args = request.get("args") or {}
    size = args.get("chunk_size") if isinstance(args, Mapping) else None
    return Stream(size or STREAM_CHUNK)


#: The operations whose data may go in chunks (see upload_source): no other op need ask it.
UPLOADS = frozenset(operations.UPLOADS)
#: The operations whose answer is a stream of chunks (the table's ``streams``).
STREAMS = operations.names(streams=True)


def upload_source(request: Mapping):
    """``(request without the data, data)`` when a put's data (or a one-blob load's, as restore
    sends) must be uploaded in chunks, else None."""
    op = request.get("op")
    args = request.get("args")
    where = operations.OPERATIONS[op].upload if op in UPLOADS else None  # the argument holding the data
    if where == "docs" and isinstance(args, Mapping) and isinstance(args.get("docs"), list) \
            and len(args["docs"]) == 1 and isinstance(args["docs"][0], Mapping) and "data" in args["docs"][0]:
        data = args["docs"][0]["data"]
        if isinstance(data, bytes) and len(data) <= INLINE_BLOB_MAX:
            return None
        if not isinstance(data, (bytes, bytearray, memoryview)) and not callable(getattr(data, "read", None)):
            return None
        rest = {**args, "docs": [{k: v for k, v in args["docs"][0].items() if k != "data"}]}
        return {**request, "args": rest}, data
    if where != "doc" or not isinstance(args, Mapping):
        return None
    # A bucket's put carries its data in doc; a blob store field's put(data) in key (the
    # field verb's first parameter). The server puts the upload back where it was taken from.
    slot = "doc" if "doc" in args else "key" if "field" in request and "key" in args else None
    if slot is None:
        return None
    doc = args[slot]
    holder = doc if isinstance(doc, Mapping) else None
    data = holder.get("data") if holder is not None else doc
    if isinstance(data, bytes):
        if len(data) <= INLINE_BLOB_MAX:
            return None
    elif isinstance(data, (bytearray, memoryview)):
        pass  # not a BSON value (only bytes are): always uploaded, whatever its size
    elif not callable(getattr(data, "read", None)):
        return None
    elif isinstance(data, io.TextIOBase):
        raise BadValueError("put data is a file opened in text mode; open it in binary mode ('rb')")
    rest = dict(args)
    if holder is not None:
        rest[slot] = {k: v for k, v in holder.items() if k != "data"}
    else:
        del rest[slot]
    return {**request, "args": rest}, data


# ---- errors -------------------------------------------------------------------------------------

def stream_closed() -> ClosedError:
    """What reading a stream on a client closed meanwhile raises."""
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
    error_class: type[HoardError]
    if closed:
        error_class, message = ClosedError, f"this client was closed while the {what} waited for its answer"
    else:
        error_class, message = type(error), error.message
    out = error_class(f"{message}; {tail}", outcome_unknown=write)
    out.server_closed = getattr(error, "server_closed", False)
    return out


def connection_lost(address: str, exc, *, handshake: bool = False, tls_hint: str | None = None) -> ConnectionError_:
    """The error for a connection the server (or the network) closed: during the handshake
    (``tls_hint`` said when the client runs without TLS: the server may expect it), or after."""
    why = f" ({exc})" if exc else ""
    if handshake:
        hint = in_callers_words(tls_hint) if tls_hint else "it may have refused the connection (see its log)"
        return ConnectionError_(f"the server at {address} closed the connection during the handshake{why}: {hint}",
                                outcome_unknown=False)
    return ConnectionError_(f"the connection to {address} was lost{why}: the server closed it, stopped or "
                            "restarted, or the network failed; the next call reconnects")


def not_hoarddb(address: str, error: HoardError) -> ConnectionError_:
    """The error for a peer whose handshake answer is not hoardDB's."""
    return ConnectionError_(f"{address} did not answer as a hoardDB server: {error.message}", outcome_unknown=False)


def bad_bytes(error: HoardError) -> ConnectionError_:
    """The error for bytes from the server that are not hoardDB messages (the connection is closed)."""
    return ConnectionError_(f"the server sent bytes that are not a hoardDB message: {error.message}")


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"
