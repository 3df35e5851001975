"""The shapes of hoardDB's messages, and the protocol's constants.

Every message is one BSON document. A client sends requests ``{id, op, ...}``; the
server answers each with the same ``id``: ``{id, ok: 1, result, ...}`` or
``{id, ok: 0, code, codeName, message}``. Operations are the engine's own documents
(:mod:`hoarddb.operations`); the protocol adds only these:

    {id, op: "hello", protocol: 1, client: "..."}          first message, always
    {id, op: "auth_start", mechanism: "SCRAM-SHA-256", payload: "n,,n=..."}
    {id, op: "auth_continue", payload: "c=biws,r=...,p=..."}
    {id, op: "chunk", data: <binary>, end?: true, abort?: true}   a blob upload's bytes

and two kinds of answer besides the plain one: the chunks of a ``stream``
(``{id, ok: 1, chunk: <binary>}`` ..., then ``{id, ok: 1, end: true}``) and a notice
the server sends before it closes a connection on its own (``id: null``).
"""

from __future__ import annotations

from typing import Any

from ..errors import HoardError
from ..values.codec import MAX_DOCUMENT_SIZE

#: The version of the protocol this code speaks; ``hello`` names it.
PROTOCOL_VERSION = 1
#: The port a server listens on unless told otherwise.
DEFAULT_PORT = 7070
#: The port of /metrics and /healthz unless told otherwise.
DEFAULT_METRICS_PORT = 7071
#: The largest message: a document at the 16 MiB limit plus room for its request around it.
MAX_MESSAGE_SIZE = MAX_DOCUMENT_SIZE + 64 * 1024
#: The largest message a server reads before the connection is READY (hello and the SCRAM
#: messages are a few hundred bytes): a client that has not logged in cannot make the
#: server hold a 16 MiB message for it.
HANDSHAKE_MAX_MESSAGE = 16 * 1024
#: Bytes of blob data in one chunk message, both ways.
CHUNK_SIZE = 1024 * 1024
#: Blob data up to this size travels inside its ``put`` request; more is uploaded in chunks.
INLINE_BLOB_MAX = 4 * 1024 * 1024
#: The one authentication mechanism.
SCRAM_SHA_256 = "SCRAM-SHA-256"

HELLO, AUTH_START, AUTH_CONTINUE, CHUNK = "hello", "auth_start", "auth_continue", "chunk"
#: Operations a connection may send before it is authenticated.
HANDSHAKE_OPS = frozenset({HELLO, AUTH_START, AUTH_CONTINUE})


def error_answer(request_id: Any, error: HoardError) -> dict:
    """``{id, ok: 0, code, codeName, message}`` for an error."""
    return {"id": request_id, **error.to_answer()}


def with_id(request_id: Any, answer: dict) -> dict:
    """The engine's answer with the request's id first."""
    return {"id": request_id, **answer}


def valid_id(value: Any) -> bool:
    """Request ids are integers or strings, chosen by the client and echoed back."""
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str)
