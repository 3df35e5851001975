"""The connection state machines, both sides, as asyncpg's CoreProtocol: bytes in, events out.

A connection goes through these states, and in each accepts only some messages:

    HANDSHAKE ──hello──▶ AUTHENTICATING ──auth_start, auth_continue──▶ READY ──▶ CLOSED
        │                       ▲ (skipped when the server runs without authentication)
        └── anything else: PROTOCOL_ERROR, closed

    state            server accepts                     anything else is answered
    HANDSHAKE        hello                              PROTOCOL_ERROR, then closed
    AUTHENTICATING   auth_start, auth_continue          UNAUTHORIZED (connection kept)
    READY            operations, chunk                  hello/auth again: PROTOCOL_ERROR
    CLOSED           nothing

:class:`ServerProtocol` answers hello and authentication itself and hands every
READY-state request up as a :class:`Request` (or a :class:`Chunk` of an upload);
what to do with it is the server's business. :class:`ClientProtocol` drives the
handshake from the other side and hands up answers. Neither does any I/O: the
adapter feeds ``receive_data`` and writes the bytes the events and methods return.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field
from typing import Any

from ..errors import (AuthFailedError, ConnectionError_, HoardError, ProtocolError, UnauthorizedError,
                      error_from_answer)
from . import scram
from .framing import FrameReader, decode_frame, decode_frames, encode_message, split_frames
from .messages import (AUTH_CONTINUE, AUTH_START, CHUNK, HANDSHAKE_MAX_MESSAGE, HELLO, MAX_MESSAGE_SIZE,
                       PROTOCOL_VERSION, SCRAM_SHA_256, error_answer, valid_id)


#: Ops a READY connection's message may have that are not operations to hand up.
_NOT_REQUESTS = frozenset({HELLO, AUTH_START, AUTH_CONTINUE, CHUNK})


class State(enum.Enum):
    """State is where a connection is in its life; see the module's table."""

    HANDSHAKE = "handshake"
    AUTHENTICATING = "authenticating"
    READY = "ready"
    CLOSED = "closed"


# ---- events the server side hands up -------------------------------------------------------

@dataclass
class Send:
    """Send is bytes to write, after ``delay`` seconds (a failed login is answered late)."""

    data: bytes
    delay: float = 0.0


@dataclass
class Request:
    """Request is one operation from an authenticated connection, to execute."""

    id: Any
    doc: dict
    #: The server's notes: how it runs the request, and why it is refused (if it is).
    how: str | None = None
    refusal: Exception | None = None


@dataclass
class Chunk:
    """Chunk is part of a blob upload: ``data`` for the put whose request had this ``id``."""

    id: Any
    data: bytes
    end: bool = False
    abort: bool = False
    #: Why the upload fails (a PROTOCOL_ERROR's message), for a chunk the protocol refused: its
    #: put is answered with it, once
    refusal: str | None = None


@dataclass
class Close:
    """Close says: write what was sent before it, then close the connection."""

    reason: str


@dataclass
class LoginFailed:
    """LoginFailed is a refused login, for the server's log, metric and lockouts.

    ``reason`` is one of ``unknown_user``, ``wrong_password``, ``locked_user``,
    ``locked_address`` (a lockout refused it before the password was looked at) or
    ``bad_message`` (an exchange that was not SCRAM); ``user`` is None when the client
    never named one.
    """

    user: str | None
    reason: str
    detail: str = ""


@dataclass
class LoggedIn:
    """LoggedIn is a login that worked: the connection is READY as ``user``."""

    user: str


@dataclass
class Principal:
    """Principal is who a connection is: a user and its roles (None for an unauthenticated server).

    ``key`` is the SCRAM stored key the user logged in with: the server compares it with
    the user's keys of now to tell that the password changed since.
    """

    user: str | None
    roles: list = field(default_factory=list)
    key: bytes | None = None

    @functools.cached_property
    def admin(self) -> bool:
        """Whether one of the roles is the cluster-wide admin (looked up once: every request asks,
        and after the first it is an attribute of the instance, read without a call)."""
        return any(r.get("role") == "admin" for r in self.roles)


class ServerProtocol:
    """ServerProtocol is the server's side of one connection, without I/O.

    :param authenticator: None to run without authentication (``--insecure``), or an
        object with ``lookup(user) -> credentials | None``, ``decoy(user) ->
        credentials`` and ``principal(user) -> Principal``.
    :param server_info: what ``hello`` answers (server version, limits).
    :param auth_failure_delay: seconds before a failed login is answered.
    :param max_auth_attempts: failed logins after which the connection is closed.

    The authenticator may also have ``refusal(user, address) -> (reason, message) | None``:
    a login it refuses is failed before its password is looked at (the server's lockouts,
    :mod:`hoarddb.server.logins`). ``address`` is the client's address, which the adapter
    sets once it knows it. Each failed login is handed up as a :class:`LoginFailed`, each
    login that works as a :class:`LoggedIn`; ``auth_failures`` counts this connection's
    failures, for ``max_auth_attempts`` only (the server counts its metric from the events).
    """

    def __init__(self, *, authenticator=None, server_info: dict | None = None,
                 max_message_size: int = MAX_MESSAGE_SIZE, auth_failure_delay: float = 1.0,
                 max_auth_attempts: int = 3):
        self.state = State.HANDSHAKE
        self.authenticator = authenticator
        self.server_info = dict(server_info or {})
        self.max_message_size = max_message_size
        self.auth_failure_delay = auth_failure_delay
        self.max_auth_attempts = max_auth_attempts
        self.principal: Principal | None = None
        self.auth_failures = 0
        self.address = ""
        # until the connection is READY its messages are small: a peer that has not logged in
        # cannot make the server buffer a 16 MiB message (see _ready)
        self._reader = FrameReader(min(HANDSHAKE_MAX_MESSAGE, max_message_size),
                                   " before the connection has logged in (hello, auth_start and auth_continue are small)")
        self._scram: scram.ScramServer | None = None

    # -- input

    @property
    def reader(self) -> FrameReader:
        """The frame reader, one for the connection's life (logging in only raises its limit):
        how much of a message is in, for the server's sweep of slow senders."""
        return self._reader

    def receive_data(self, data: bytes) -> list:
        """Feed bytes from the peer; the events they make, in order.

        The whole messages among the bytes are decoded in one call (a pipeline's hundred
        requests come in one read), and a READY connection's plain requests are made
        into :class:`Request` events without :meth:`_message`'s steps (what they would
        find is checked in one expression; anything else takes them). Should one of the
        messages not be BSON, they are decoded one by one again: those before it are
        handled, it is refused and the connection closed, as one by one.
        """
        if self.state is State.CLOSED:
            return []
        events: list = []
        reader = self._reader
        reader.feed(data)
        while self.state is not State.CLOSED:
            try:
                frames = reader.next_frames()
            except ProtocolError as e:  # a length no message may have
                self._fail(events, None, e)
                break
            if not frames:
                break
            try:
                docs = decode_frames(frames)
            except ProtocolError:
                self._one_by_one(frames, events)
                continue
            self._messages(docs, events)
        return events

    def _messages(self, docs: list, events: list) -> None:
        append = events.append
        for doc in docs:
            state = self.state
            if state is State.READY:  # (nothing a READY connection's message does changes its state)
                request_id, op = doc.get("id"), doc.get("op")
                if (type(request_id) is int or type(request_id) is str) and type(op) is str \
                        and op not in _NOT_REQUESTS:
                    append(Request(request_id, doc))  # what _message and _in_ready would do
                    continue
            elif state is State.CLOSED:  # (the messages after it are dropped, as they would be unread)
                return
            self._message(doc, events)

    def _one_by_one(self, frames: bytes, events: list) -> None:
        """The messages of ``frames``, one of which is not BSON: those before it are handled,
        then it is refused and the connection closed."""
        for frame in split_frames(frames):
            if self.state is State.CLOSED:
                return
            try:
                doc = decode_frame(frame)
            except ProtocolError as e:
                self._fail(events, None, e)
                return
            self._message(doc, events)

    def _message(self, doc: dict, events: list) -> None:
        request_id = doc.get("id")
        op = doc.get("op")
        if not valid_id(request_id):
            self._answer_error(events, None, ProtocolError(
                "every request needs an 'id' (an integer or a string) that its answer carries back; "
                f"got {_kind(request_id)}"))
            if self.state is State.HANDSHAKE:
                self._close(events, "no id in the first message")
            return
        if not isinstance(op, str):
            self._answer_error(events, request_id, ProtocolError(
                f"a request needs a string 'op' (such as \"hello\" or \"insert\"); got {_kind(op)}"))
            if self.state is State.HANDSHAKE:
                self._close(events, "no op in the first message")
            return
        if self.state is State.READY:
            self._in_ready(request_id, op, doc, events)
        else:
            getattr(self, "_in_" + self.state.value)(request_id, op, doc, events)

    def _in_handshake(self, request_id, op, doc, events) -> None:
        if op != HELLO:
            self._fail(events, request_id, ProtocolError(
                f"the first message must be {{op: \"hello\", protocol: {PROTOCOL_VERSION}}}; got op {op!r:.40}"))
            return
        version = doc.get("protocol")
        if version != PROTOCOL_VERSION:
            self._fail(events, request_id, ProtocolError(
                f"this server speaks hoardDB protocol {PROTOCOL_VERSION}; the client asked for {version!r:.20}"))
            return
        mechanisms = [SCRAM_SHA_256] if self.authenticator is not None else []
        result = {**self.server_info, "protocol": PROTOCOL_VERSION, "auth": mechanisms,
                  "maxMessageSize": self.max_message_size}
        events.append(Send(self.encode({"id": request_id, "ok": 1, "result": result})))
        if self.authenticator is None:
            self.principal = Principal(None, [{"role": "admin"}])
            self._ready()
        else:
            self.state = State.AUTHENTICATING

    def _in_authenticating(self, request_id, op, doc, events) -> None:
        if op not in (AUTH_START, AUTH_CONTINUE):
            self._answer_error(events, request_id, UnauthorizedError(
                f"authenticate before {op!r:.40}: this connection may only send auth_start and auth_continue "
                f"({SCRAM_SHA_256}) until it has logged in"))
            return
        payload = doc.get("payload")
        locked = None  # (reason, message) of a lockout
        refusal = getattr(self.authenticator, "refusal", None)
        try:
            if not isinstance(payload, str):
                raise ProtocolError(f"{op} needs a string 'payload'")
            if op == AUTH_START:
                if doc.get("mechanism") != SCRAM_SHA_256:
                    raise ProtocolError(f"the only mechanism is {SCRAM_SHA_256}; got {doc.get('mechanism')!r:.40}")
                self._scram = scram.ScramServer(self.authenticator.lookup, self.authenticator.decoy)
                answer = {"payload": self._scram.first(payload), "done": False}
                locked = refusal(self._scram.user, self.address) if refusal is not None else None
                if locked is not None:
                    raise AuthFailedError(f"authentication failed: {locked[1]}")
            else:
                if self._scram is None:
                    raise ProtocolError("auth_continue before auth_start")
                # looked at again: a lockout may have come since auth_start (guesses sent in parallel)
                locked = refusal(self._scram.user, self.address) if refusal is not None else None
                if locked is not None:
                    raise AuthFailedError(f"authentication failed: {locked[1]}")
                final = self._scram.final(payload)
                principal = self.authenticator.principal(self._scram.user)
                if principal.key != self._scram.stored_key:
                    # the password changed (or the user went) between auth_start and now
                    raise AuthFailedError("authentication failed: the password changed during the login")
                principal.key = self._scram.stored_key
                self.principal = principal
                self._ready()
                answer = {"payload": final, "done": True, "user": self.principal.user,
                          "roles": self.principal.roles}
                events.append(LoggedIn(self.principal.user))
                self._scram = None
        except HoardError as e:
            exchange, self._scram = self._scram, None
            self.auth_failures += 1
            user = exchange.user if exchange is not None else None
            if isinstance(e, ProtocolError):
                reason, detail = "bad_message", e.message
            elif locked is not None:
                reason, detail = locked
            else:
                reason = "wrong_password" if exchange is not None and exchange.known else "unknown_user"
                detail = ""
                e = AuthFailedError("authentication failed: unknown user or wrong password")
            events.append(LoginFailed(user, reason, detail))
            events.append(Send(self.encode(error_answer(request_id, e)), delay=self.auth_failure_delay))
            if self.auth_failures >= self.max_auth_attempts:
                self._close(events, f"{self.auth_failures} failed logins")
            return
        events.append(Send(self.encode({"id": request_id, "ok": 1, "result": answer})))

    def _in_ready(self, request_id, op, doc, events) -> None:
        if op in (HELLO, AUTH_START, AUTH_CONTINUE):
            self._answer_error(events, request_id, ProtocolError(
                f"{op} is part of the handshake, which this connection has done; open a new connection to log in again"))
        elif op == CHUNK:
            data = doc.get("data", b"")
            if not isinstance(data, bytes):  # the upload fails with it: its put is answered, and only once
                events.append(Chunk(request_id, b"", abort=True, refusal=(
                    f"a chunk's 'data' must be binary, got {type(data).__name__}; nothing of the upload was stored")))
                return
            events.append(Chunk(request_id, data, bool(doc.get("end")), bool(doc.get("abort"))))
        else:
            events.append(Request(request_id, doc))

    def _ready(self) -> None:
        self.state = State.READY
        self._reader.max_size = self.max_message_size
        self._reader.limit_note = ""

    # -- output

    def encode(self, answer: dict) -> bytes:
        """The bytes of an answer; an answer over the limit becomes its error answer."""
        try:
            return encode_message(answer, self.max_message_size)
        except HoardError as e:
            try:
                return encode_message(error_answer(answer.get("id"), e), self.max_message_size)
            except HoardError:  # the id alone is (nearly) the whole limit: the error cannot carry it
                return encode_message(error_answer(None, e))

    def notice(self, error: HoardError) -> bytes:
        """The bytes of a message the server sends on its own (``id: null``) before closing."""
        return encode_message(error_answer(None, error))

    def close(self) -> None:
        self.state = State.CLOSED

    # -- helpers

    def _answer_error(self, events, request_id, error: HoardError) -> None:
        events.append(Send(encode_message(error_answer(request_id, error))))

    def _fail(self, events, request_id, error: HoardError) -> None:
        self._answer_error(events, request_id, error)
        self._close(events, error.message)

    def _close(self, events, reason: str) -> None:
        self.state = State.CLOSED
        events.append(Close(reason))


class ClientProtocol:
    """ClientProtocol is the client's side of one connection, without I/O.

    ``start()`` gives the hello to send; then feed what the server sends to
    ``receive_data`` and write ``data_to_send()`` after each call, until ``state`` is
    READY. From then on ``request(doc)`` gives an id and the bytes of a request, and
    ``receive_data`` returns the answers. A refused handshake raises its error
    (AUTH_FAILED, PROTOCOL_ERROR...), after which the connection is useless.
    """

    def __init__(self, user: str | None = None, password: str | None = None, *,
                 client_name: str = "hoarddb-python", max_message_size: int = MAX_MESSAGE_SIZE):
        self.user = user
        self.password = password
        self.client_name = client_name
        self.state = State.HANDSHAKE
        self.server_info: dict = {}
        self.roles: list = []
        self.max_message_size = max_message_size
        self._reader = FrameReader(max_message_size)
        self._next_id = 0
        self._out = bytearray()
        self._scram: scram.ScramClient | None = None
        self._pending_handshake: Any = None

    def _id(self) -> int:
        self._next_id += 1
        return self._next_id

    def start(self) -> bytes:
        """The hello message (the first bytes a client sends)."""
        self._pending_handshake = self._id()
        return encode_message({"id": self._pending_handshake, "op": HELLO, "protocol": PROTOCOL_VERSION,
                               "client": self.client_name})

    def data_to_send(self) -> bytes:
        """Handshake bytes the last ``receive_data`` produced (empty when none)."""
        out, self._out = bytes(self._out), bytearray()
        return out

    def request(self, doc: dict) -> tuple[int, bytes]:
        """A new id, and the bytes of ``doc`` sent under it (BadValueError, DocumentTooLargeError)."""
        if self.state is not State.READY:
            raise ConnectionError_(f"the connection is {self.state.value}, not ready for requests")
        request_id = self._id()
        return request_id, encode_message({"id": request_id, **doc}, self.max_message_size)

    def requests(self, docs) -> tuple[range, bytes]:
        """New ids for many requests, and the bytes of them all, in order (a pipeline)."""
        if self.state is not State.READY:
            raise ConnectionError_(f"the connection is {self.state.value}, not ready for requests")
        first = self._next_id + 1
        limit = self.max_message_size
        out = []
        for request_id, doc in enumerate(docs, first):
            out.append(encode_message({"id": request_id, **doc}, limit))
        self._next_id = first + len(out) - 1
        return range(first, first + len(out)), b"".join(out)

    def chunk(self, request_id: int, data: bytes, *, end: bool = False, abort: bool = False) -> bytes:
        """The bytes of one upload chunk for the put sent as ``request_id``."""
        doc: dict = {"id": request_id, "op": CHUNK, "data": bytes(data)}
        if end:
            doc["end"] = True
        if abort:
            doc["abort"] = True
        return encode_message(doc, self.max_message_size)

    def receive_data(self, data: bytes) -> list[dict]:
        """Feed bytes from the server; the answers (READY state) they complete, in order."""
        self._reader.feed(data)
        answers = []
        while True:
            frame = self._reader.next_frame()
            if frame is None:
                return answers
            doc = decode_frame(frame)
            if doc.get("id") is None and doc.get("ok") == 0:  # the server closes on us: say why
                self.state = State.CLOSED
                raise error_from_answer(doc)
            if self.state is State.READY:
                answers.append(doc)
            else:
                self._handshake(doc)

    def _handshake(self, doc: dict) -> None:
        if doc.get("id") != self._pending_handshake:
            raise ProtocolError(f"unexpected message during the handshake: {str(doc)[:80]}")
        if doc.get("ok") != 1:
            self.state = State.CLOSED
            raise error_from_answer(doc)
        result = doc.get("result") or {}
        if self.state is State.HANDSHAKE:
            self.server_info = result
            mechanisms = result.get("auth") or []
            if not mechanisms:
                self.state = State.READY
                return
            if SCRAM_SHA_256 not in mechanisms:
                raise ProtocolError(f"the server offers {mechanisms}, not {SCRAM_SHA_256}")
            if not self.user or self.password is None:
                self.state = State.CLOSED
                raise AuthFailedError(
                    "the server requires authentication: give a user and password "
                    "(hoarddb://user:password@host, or --user with --password or HOARDDB_PASSWORD)")
            self._scram = scram.ScramClient(self.user, self.password)
            self.state = State.AUTHENTICATING
            self._send_handshake({"op": AUTH_START, "mechanism": SCRAM_SHA_256, "payload": self._scram.first()})
        elif not result.get("done"):
            self._send_handshake({"op": AUTH_CONTINUE, "payload": self._scram.final(result.get("payload", ""))})
        else:
            self._scram.verify(result.get("payload", ""))
            self.roles = result.get("roles") or []
            self.state = State.READY

    def _send_handshake(self, doc: dict) -> None:
        self._pending_handshake = self._id()
        self._out += encode_message({"id": self._pending_handshake, **doc})


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r:.40}"
