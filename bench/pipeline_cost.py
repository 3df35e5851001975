"""What the server's own Python costs per pipelined request: Python calls, and user-space instructions.

    python bench/pipeline_cost.py                # cProfile's calls per request, pushes and pops
    python bench/pipeline_cost.py --valgrind     # also instructions per request (valgrind's callgrind)
    python bench/pipeline_cost.py --depth 1 --pipelines 2000    # a lone client's requests, one at a time

The pipelines of bench/peers.py's "pipelined push" and "pipelined pop" rows:
a client sends 100 requests in one write, ``push`` of a ~190-byte document or ``pop``,
to one fifo bucket. Here a server :class:`Connection` is fed each pipeline's bytes as
one ``data_received``, through a transport that keeps the answers (and checks them),
on the event loop the server runs (uvloop's unless it is missing), with the server's
own garbage-collector settings (``collect_less``). The group commit is the real one:
with one connection its flush runs inline on the loop, in the turn after the
requests were read (one ``await asyncio.sleep(0)`` per pipeline here). No socket, so
no system call but the flush's fsyncs (stubbed out under valgrind). Everything the
event loop's thread does for a pipeline is counted: parsing, dispatch, the group's
run in the engine and the fifo's segment log, the answers' encoding and metrics.

- **calls** is cProfile's count of function calls (Python functions and C functions
  called from Python) over ``--pipelines`` pipelines, less the same number of empty
  turns of the loop, divided by the requests.
- **instructions** (``--valgrind``) runs this script under ``valgrind --tool=callgrind``
  three times after the same setup: with the pipelines of pushes, with those of pops,
  and with as many empty turns of the loop (PYTHONHASHSEED=0 in each); the difference
  over the requests. Python,
  the interpreter, BSON and the loop alike, the kernel not counted (~2 minutes).

Both are counts, not times: they do not move with the machine's load. A/B a change by
running this script from two checkouts.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import os
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import hoarddb  # noqa: E402
from hoarddb.server.config import ServerConfig  # noqa: E402
from hoarddb.server.connection import Connection  # noqa: E402
from hoarddb.server.server import Server  # noqa: E402
from hoarddb.values.codec import decode_all  # noqa: E402
from hoarddb.wire.framing import encode_message  # noqa: E402
from peers_work import small_doc  # noqa: E402

DEPTH = 100
PIPELINES = 100
WARM = 20


class Transport:
    """A transport that keeps the answers' bytes (C callables where the server calls it per write)."""

    def __init__(self):
        self.out: list[bytes] = []
        self.write = self.out.append
        self.is_closing = bool  # bool() is False

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default

    def set_write_buffer_limits(self, high=None) -> None:
        pass

    pause_reading = resume_reading = close = abort = lambda self: None

    def answers(self) -> list[dict]:
        out = decode_all(b"".join(self.out))
        self.out.clear()
        return out


def pipelines(op: str, count: int, first_id: int, depth: int) -> list[bytes]:
    """``count`` pipelines' bytes, as ClientProtocol.requests makes them (ids counting up)."""
    out, rid = [], first_id
    for p in range(count):
        if op == "push":
            docs = [{"op": "push", "db": "bench", "bucket": "Q", "args": {"doc": small_doc(p * depth + k)}}
                    for k in range(depth)]
        else:
            docs = [{"op": "pop", "db": "bench", "bucket": "P", "args": {}}] * depth
        out.append(b"".join(encode_message({"id": rid + k, **doc}) for k, doc in enumerate(docs)))
        rid += depth
    return out


async def session(modes: list[str], count: int, depth: int, profile: bool) -> dict[str, float]:
    """Set up a server and one connection, warm up, then run each mode; calls per request if ``profile``."""
    from hoarddb.server import server as server_module
    if hasattr(server_module, "collect_less"):
        server_module.collect_less()  # as a server's process runs (server.run)
    data = tempfile.mkdtemp(prefix="hoarddb-pipeline-cost-")
    # Under valgrind every request takes ~50 times as long, past the slow log's threshold: a
    # threshold no request reaches keeps the slow log's path out of the count, as at full speed.
    slow = {"slow_ms": 1e9} if "slow_ms" in getattr(ServerConfig, "__dataclass_fields__", {}) else {}
    srv = Server(ServerConfig(data=data, port=0, metrics_port=-1, insecure=True, **slow).check())
    try:
        await srv.start()
        e = srv.engine
        e.execute({"op": "create_database", "db": "bench"})
        for name in ("P", "Q"):
            e.execute({"op": "create_bucket", "db": "bench", "bucket": name, "options": {"type": "fifo"}})
        for start in range(0, (count + 2 * WARM) * depth, 1000):
            e.execute({"op": "batch_push", "db": "bench", "bucket": "P",
                       "args": {"docs": [small_doc(i) for i in range(start, start + 1000)]}})
        e.sync()
        transport = Transport()
        conn = Connection(srv)
        conn.connection_made(transport)
        conn.data_received(encode_message({"id": 0, "op": "hello", "protocol": 1}))
        assert transport.answers()[0]["ok"] == 1
        rid = 1
        work = {}
        for op in ("push", "pop"):
            work[op] = pipelines(op, WARM + count, rid, depth)
            rid += (WARM + count) * depth

        async def run(frames: list[bytes]) -> None:
            for frame in frames:
                conn.data_received(frame)
                await asyncio.sleep(0)  # the turn the group commit's flush runs in

        async def idle(n: int) -> None:
            for _ in range(n):
                await asyncio.sleep(0)

        for op in ("push", "pop"):  # caches filled, the buckets open, the code paths taken once
            inline = srv.committer.inline
            await run(work[op][:WARM])
            assert srv.committer.inline - inline == WARM, "the flushes did not run inline, one per pipeline"
            answers = transport.answers()
            assert len(answers) == WARM * depth and all(a["ok"] == 1 for a in answers), answers[:3]
            assert op == "push" or all(a["result"]["Author"] == "Bob" for a in answers)
        assert conn.busy == 0 and not conn.queue
        out = {}
        for mode in modes:
            profiler = cProfile.Profile() if profile else None
            if profiler:
                profiler.enable()
            if mode == "idle":
                await idle(count)
            else:
                await run(work[mode][WARM:])
            if profiler:
                profiler.disable()
                out[mode] = pstats.Stats(profiler).total_calls
            if mode != "idle":
                answers = transport.answers()
                assert len(answers) == count * depth and all(a["ok"] == 1 for a in answers), answers[:3]
                assert conn.busy == 0
        await srv.stop()
        return out
    finally:
        gc.unfreeze() if hasattr(gc, "unfreeze") else None
        shutil.rmtree(data, ignore_errors=True)


def run(modes: list[str], count: int, depth: int, profile: bool) -> dict[str, float]:
    loop_factory = ServerConfig(data=".", insecure=True).loop_factory()
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(session(modes, count, depth, profile))


def instructions(count: int, depth: int) -> dict[str, int]:
    """User-space instructions per request: runs under callgrind with each mode, less the idle run."""
    def collected(mode: str) -> int:
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__,
                   "--mode", mode, "--pipelines", str(count), "--depth", str(depth)]
        env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same dict and set layouts every run
        out = subprocess.run(command, capture_output=True, text=True, check=True, env=env).stderr
        return int(re.search(r"Collected : (\d+)", out).group(1))

    idle = collected("idle")
    return {op: (collected(op) - idle) // (count * depth) for op in ("push", "pop")}


def _stub_syncs() -> None:
    """No fsync under valgrind: the kernel's time is not counted, and would only slow the run."""
    import hoarddb.storage.kv_recovery as kv_recovery
    import hoarddb.storage.segment_format as segment_format
    import hoarddb.storage.wal as wal
    kv_recovery._datasync = segment_format.datasync = wal._datasync = lambda fd: None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipelines", type=int, default=PIPELINES, help=f"pipelines per kind (default {PIPELINES})")
    ap.add_argument("--depth", type=int, default=DEPTH, help=f"requests per pipeline (default {DEPTH})")
    ap.add_argument("--valgrind", action="store_true", help="also count instructions per request (valgrind)")
    ap.add_argument("--mode", choices=("idle", "push", "pop"), help=argparse.SUPPRESS)  # one run under valgrind
    args = ap.parse_args()
    if args.mode is not None:
        _stub_syncs()
        run([args.mode], args.pipelines, args.depth, profile=False)
        return
    print(f"hoarddb from {Path(hoarddb.__file__).parent}")
    calls = run(["idle", "push", "pop"], args.pipelines, args.depth, profile=True)
    requests = args.pipelines * args.depth
    for op in ("push", "pop"):
        print(f"{op}, {args.depth} deep: {(calls[op] - calls['idle']) / requests:.1f} calls per request "
              f"(cProfile, {args.pipelines} pipelines of {args.depth})")
    if args.valgrind:
        if shutil.which("valgrind") is None:
            sys.exit("valgrind is not installed (apt-get install valgrind)")
        for op, n in instructions(args.pipelines, args.depth).items():
            print(f"{op}, {args.depth} deep: {n:,} instructions per request (callgrind, {args.pipelines} pipelines of {args.depth})")


if __name__ == "__main__":
    main()
