"""The wire protocol without I/O: BSON framing, SCRAM, and the connection state machines.

Nothing in this package opens a socket or touches asyncio (as asyncpg keeps its core
protocol apart from its event loop): bytes go in through ``receive_data``, events and
bytes to send come out. :mod:`hoarddb.server` drives :class:`ServerProtocol` on asyncio;
:mod:`hoarddb.client` drives :class:`ClientProtocol` on a blocking socket and
:mod:`hoarddb.aio` on asyncio. docs/dev/protocol.md describes the bytes.

    framing.py    a BSON document carries its own length: cutting a stream into messages
    messages.py   the message shapes: hello, auth, chunk, answers; limits and constants
    scram.py      SCRAM-SHA-256 (RFC 5802, 7677), both sides, pure functions and two classes
    protocol.py   State, ServerProtocol and ClientProtocol: who may send what, when
"""

from .framing import FrameReader, encode_message
from .messages import CHUNK_SIZE, DEFAULT_PORT, MAX_MESSAGE_SIZE, PROTOCOL_VERSION
from .protocol import ClientProtocol, ServerProtocol, State

__all__ = ["FrameReader", "encode_message", "CHUNK_SIZE", "DEFAULT_PORT", "MAX_MESSAGE_SIZE",
           "PROTOCOL_VERSION", "ClientProtocol", "ServerProtocol", "State"]
