"""The server's own Python per request, without sockets: a Connection fed request bytes, a transport that drops answers.

    python bench/request_cost.py

What a request costs the event loop's thread before any system call (no recv, send or
epoll): parsing, dispatch, the engine, the answer and its metrics. Over the wire each
request also pays the kernel's loopback TCP (a send is ~50 us on our machines) on both
sides; this isolates the part that is hoardDB's. Prints microseconds per request for a
hash get, a search a unique index answers, and a fifo length, three times each.
"""

import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hoarddb.server.config import ServerConfig  # noqa: E402
from hoarddb.server.connection import Connection  # noqa: E402
from hoarddb.server.server import Server  # noqa: E402
from hoarddb.wire.framing import encode_message  # noqa: E402



class FakeTransport:
    """A transport that takes answers and drops them."""

    def __init__(self):
        self.out = 0

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default

    def write(self, data) -> None:
        self.out += len(data)

    def is_closing(self) -> bool:
        return False

    def set_write_buffer_limits(self, high=None) -> None:
        pass

    pause_reading = resume_reading = close = lambda self: None


async def main() -> None:
    data = tempfile.mkdtemp(prefix="hoarddb-cost-")
    srv = Server(ServerConfig(data=data, port=0, metrics_port=-1, insecure=True).check())
    await srv.start()
    e = srv.engine
    e.execute({"op": "create_bucket", "db": "b", "bucket": "KV",
               "options": {"type": "hash", "indices": [{"field": "email", "unique": True}]}})
    e.execute({"op": "create_bucket", "db": "b", "bucket": "Q", "options": {"type": "fifo"}})
    for i in range(100):
        e.execute({"op": "insert", "db": "b", "bucket": "KV",
                   "args": {"doc": {"_id_": f"k{i}", "email": f"e{i}", "pad": "x" * 150}}})
    conn = Connection(srv)
    conn.connection_made(FakeTransport())
    conn.data_received(encode_message({"id": 0, "op": "hello", "protocol": 1}))
    workloads = [
        ("get", lambda i: {"op": "get", "db": "b", "bucket": "KV", "args": {"key": f"k{i % 100}"}}),
        ("search", lambda i: {"op": "search", "db": "b", "bucket": "KV", "args": {"filter": {"email": f"e{i % 100}"}}}),
        ("length", lambda i: {"op": "length", "db": "b", "bucket": "Q", "args": {}}),
    ]
    for name, make in workloads:
        frames = [encode_message({"id": i + 1, **make(i)}) for i in range(20000)]
        for _ in range(3):
            started = time.perf_counter()
            for frame in frames:
                conn.data_received(frame)
            per = (time.perf_counter() - started) / len(frames)
            print(f"{name}: {per * 1e6:.2f} us per request (server Python, no syscalls)")
    await srv.stop()
    shutil.rmtree(data, ignore_errors=True)
if __name__ == "__main__":
    asyncio.run(main())
