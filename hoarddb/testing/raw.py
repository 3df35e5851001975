"""RawConnection: a socket (plaintext, or TLS without verification) that sends whatever bytes a test wants and reads BSON back.

For protocol tests (out-of-turn messages, fuzzing) where a real client would refuse
to misbehave.
"""

from __future__ import annotations

import socket
import ssl

from ..values.codec import decode, encode
from ..wire.framing import FrameReader


class RawConnection:
    def __init__(self, host: str, port: int, timeout: float = 5.0, tls: bool = False):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            self.sock = ctx.wrap_socket(self.sock, server_hostname=host)
        self._reader = FrameReader()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_doc(self, doc: dict) -> None:
        self.send(encode(doc))

    def recv_doc(self) -> dict | None:
        """The next document, or None when the server closed the connection (socket.timeout if silent)."""
        while True:
            frame = self._reader.next_frame()
            if frame is not None:
                return decode(frame)
            try:
                data = self.sock.recv(65536)
            except (ConnectionResetError, ssl.SSLError):
                return None
            if not data:
                return None
            self._reader.feed(data)

    def hello(self) -> dict:
        self.send_doc({"id": 0, "op": "hello", "protocol": 1})
        return self.recv_doc()

    def closed_by_peer(self) -> bool:
        """True when the server has closed (reads EOF), skipping what it sent before."""
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
