"""FaultProxy: a TCP proxy between a client and a server that can cut, stall or slow the connection.

    with FaultProxy("127.0.0.1", server.port) as proxy:
        client = hoarddb.connect(f"hoarddb://127.0.0.1:{proxy.port}/?insecure=true")
        proxy.stall()             # bytes stop flowing both ways (a dead network, not a closed socket)
        proxy.stall("answers")    # only the server's bytes stop: requests arrive, answers do not
        proxy.resume()
        proxy.delay = 0.05        # every forwarded read waits this long (a slow link)
        proxy.cut()               # every connection closed at once (connectivity loss)
        proxy.cut_after(3 << 20, "answers")  # cut once 3 MiB more of answers went through (mid-message)

Threads and blocking sockets only: it works whatever loop the code under test runs.
"""

from __future__ import annotations

import select
import socket
import threading
import time

#: The two directions of a proxied connection.
DIRECTIONS = ("requests", "answers")


class FaultProxy:
    """FaultProxy listens on 127.0.0.1 (a free port) and forwards each connection to ``target``."""

    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self.delay = 0.0
        self._flowing = {d: threading.Event() for d in DIRECTIONS}
        for event in self._flowing.values():
            event.set()
        self._budget: dict[str, int | None] = {d: None for d in DIRECTIONS}  # bytes left before a cut
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._closed = False
        self._accepter = threading.Thread(target=self._accept, daemon=True, name="fault-proxy")
        self._accepter.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream, "requests"), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, "answers"), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, direction: str) -> None:
        flowing = self._flowing[direction]
        try:
            while not self._closed and src.fileno() != -1:
                flowing.wait()  # stalled: read nothing either, so the sender's buffers fill up
                ready, _, _ = select.select([src], [], [], 0.05)
                if not ready:
                    continue
                flowing.wait()
                data = src.recv(65536)
                if not data:
                    break
                if self.delay:
                    time.sleep(self.delay)
                flowing.wait()
                with self._lock:
                    budget = self._budget[direction]
                    if budget is not None:
                        data = data[:budget]
                        budget -= len(data)
                        self._budget[direction] = budget if budget > 0 else None
                if data:
                    dst.sendall(data)
                if budget is not None and budget <= 0:
                    self.cut()
                    return
        except (OSError, ValueError):
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    @property
    def connections(self) -> int:
        with self._lock:
            return sum(1 for c, _ in self._pairs if c.fileno() != -1)

    def stall(self, direction: str | None = None) -> None:
        """Stop forwarding bytes without closing anything: both ways, or only ``"requests"``
        (client to server) or ``"answers"`` (server to client)."""
        for d in self._directions(direction):
            self._flowing[d].clear()

    def resume(self, direction: str | None = None) -> None:
        for d in self._directions(direction):
            self._flowing[d].set()

    def cut_after(self, nbytes: int, direction: str = "answers") -> None:
        """Forward ``nbytes`` more bytes in ``direction``, then cut every connection: a
        connection lost in the middle of a message."""
        self._directions(direction)
        with self._lock:
            self._budget[direction] = nbytes

    def cut(self) -> None:
        """Close every proxied connection now (both sides see a reset or EOF)."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in pair:
                try:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    s.close()
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        self.resume()
        self._listener.close()
        self.cut()

    @staticmethod
    def _directions(direction: str | None) -> tuple[str, ...]:
        if direction is None:
            return DIRECTIONS
        if direction not in DIRECTIONS:
            raise ValueError(f"direction is 'requests' or 'answers', got {direction!r}")
        return (direction,)

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
