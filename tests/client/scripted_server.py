"""ScriptedServer: a plaintext server that speaks just enough of the protocol (a hello without
login) and answers requests as a test says, to misbehave in ways a real server will not on cue."""

from __future__ import annotations

import socket
import threading

from hoarddb.values.codec import encode
from hoarddb.wire.framing import FrameReader, decode_frame


class ScriptedServer:
    """ScriptedServer listens on 127.0.0.1 (a free port); ``on_request(conn, doc)`` is called
    for each request after the hello, on the connection's own thread, and sends what it likes
    on ``conn`` (a socket)."""

    def __init__(self, on_request):
        self.on_request = on_request
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"hoarddb://127.0.0.1:{self.port}/?insecure=true"
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        reader = FrameReader()
        try:
            while data := conn.recv(65536):
                reader.feed(data)
                while (frame := reader.next_frame()) is not None:
                    doc = decode_frame(frame)
                    if doc.get("op") == "hello":
                        conn.sendall(encode({"id": doc["id"], "ok": 1,
                                             "result": {"server": "scripted", "protocol": 1, "auth": []}}))
                    else:
                        self.on_request(conn, doc)
        except OSError:
            pass

    def drop(self, farewell: bytes = b"") -> None:
        """Close every connection open now, from the server's side (after sending ``farewell``), as a
        restarted server or an idle timeout does: the client gets its end of file at once."""
        for conn in self._conns:
            try:
                conn.sendall(farewell)
                conn.shutdown(socket.SHUT_RDWR)  # wakes the thread reading it: close() alone would not
            except OSError:
                pass

    def close(self) -> None:
        self._listener.close()
        for conn in self._conns:
            try:
                conn.close()
            except OSError:
                pass

    def __enter__(self) -> "ScriptedServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def answer(request_id, result) -> bytes:
    """The bytes of a successful answer."""
    return encode({"id": request_id, "ok": 1, "result": result})


def goodbye(code: int = 30, name: str = "TIMEOUT", message: str = "closing: idle") -> bytes:
    """The bytes of the message a server sends before it closes a connection on its own."""
    return encode({"id": None, "ok": 0, "code": code, "codeName": name, "message": message})
