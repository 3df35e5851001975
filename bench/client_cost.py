"""What the client's own Python costs per request: Python calls and the calling thread's CPU, both clients.

    python bench/client_cost.py                  # 3,000 requests of each kind
    python bench/client_cost.py -n 10000
    python bench/client_cost.py --valgrind -n 500    # instructions per get, both clients

The server runs in a child process (``hoarddb.testing.ServerProcess``, no TLS), so what
is counted here is the client's side only: building the operation, encoding, the
socket calls, reading and decoding the answer, mapping it to a result or an error.

- **calls** is cProfile's count of function calls (Python functions and C functions
  called from Python) per request, in this process: a count, it does not move with the
  machine's load. A/B a change by running this script from two checkouts.
- **cpu** is ``time.thread_time()`` per request on the calling thread (the loop's
  thread for asyncio): user and system time, so it includes the socket calls; it moves
  with the machine's load.
- **instructions** (``--valgrind``) runs this script under ``valgrind --tool=callgrind``
  with ``-n`` gets and with none after the same setup: the client process's user-space
  instructions per get (Python, the interpreter, BSON; the server is not traced), a
  count that does not move with the load (~2 minutes with ``-n 500``).

Workloads: a hash ``get`` of a ~190-byte document, a fifo ``push``, a ``search`` of
an empty filter on a two-document bucket, and pipelines of 100 ``length`` requests
(blocking client only, per request).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

import hoarddb  # noqa: E402
import hoarddb.aio  # noqa: E402
from hoarddb.client import pipeline  # noqa: E402
from hoarddb.testing import ServerProcess  # noqa: E402


def calls_of(fn, n: int) -> int:
    profile = cProfile.Profile()
    profile.enable()
    fn(n)
    profile.disable()
    return sum(row[1] for row in pstats.Stats(profile).stats.values())  # primitive call counts


def measure(name: str, fn, n: int, per: int = 1) -> None:
    fn(max(1, n // 10))  # warm up
    started = time.thread_time()
    fn(n)
    cpu = (time.thread_time() - started) / (n * per)
    calls = calls_of(fn, n) / (n * per)
    print(f"{name:28} {calls:8.1f} calls  {cpu * 1e6:8.1f} us cpu  per request")


def instructions(name: str, n: int) -> int:
    """User-space instructions of this process per request of ``name``: this script under
    callgrind with ``n`` requests and with none (the same setup), the difference over ``n``."""
    def collected(count: int) -> int:
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__,
                   "--only", name, "-n", str(count)]
        env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same dict and set layouts every run
        out = subprocess.run(command, capture_output=True, text=True, check=True, env=env).stderr
        return int(re.search(r"Collected : (\d+)", out).group(1))

    return (collected(n) - collected(0)) // n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=3000, help="requests of each kind (default 3,000)")
    ap.add_argument("--valgrind", action="store_true",
                    help="instead, instructions per blocking and asyncio get (valgrind's callgrind; -n 500 will do)")
    ap.add_argument("--only", help=argparse.SUPPRESS)  # one workload, n times, nothing printed (for --valgrind)
    args = ap.parse_args()
    n = args.n
    if args.valgrind:
        for name in ("blocking get", "asyncio get"):
            print(f"{name:28} {instructions(name, n):10,} instructions per request (callgrind, {n} requests)")
        return
    tmp = Path(tempfile.mkdtemp(prefix="hoarddb-client-cost-"))
    server = ServerProcess(tmp / "data").start()
    loop = asyncio.new_event_loop()
    try:
        with hoarddb.connect(server.url() + "&busy_poll=0") as client:  # counts that do not spin
            db = client["b"]
            kv = db.create_bucket("KV", type="hash")
            q = db.create_bucket("Q", type="fifo")
            s = db.create_bucket("S", type="hash")
            kv.put({"_id_": "k", "pad": "x" * 150})
            s.put({"_id_": "a", "n": 1})
            s.put({"_id_": "b", "n": 2})
            aclient = loop.run_until_complete(hoarddb.aio.connect(server.url()))
            akv, aq, a_s = aclient["b"].KV, aclient["b"].Q, aclient["b"].S
            doc = {"pad": "x" * 150}
            lengths = [{"op": "length", "db": "b", "bucket": "Q", "args": {}}] * 100

            def repeat(call):
                def many(m):
                    for _ in range(m):
                        call()
                return many

            def aio(make):
                async def many(m):
                    for _ in range(m):
                        await make()
                return lambda m: loop.run_until_complete(many(m))

            workloads = [
                ("blocking get", repeat(lambda: kv.get("k")), 1),
                ("blocking push", repeat(lambda: q.push(doc)), 1),
                ("blocking search", repeat(lambda: s.search({})), 1),
                ("blocking pipeline of 100", repeat(lambda: pipeline(client, lengths)), 100),
                ("asyncio get", aio(lambda: akv.get("k")), 1),
                ("asyncio push", aio(lambda: aq.push(doc)), 1),
                ("asyncio search", aio(lambda: a_s.search({})), 1),
            ]
            if args.only:
                fn = next(fn for name, fn, per in workloads if name == args.only)
                fn(50)  # warm up, in both runs
                fn(n)
            else:
                for name, fn, per in workloads:
                    measure(name, fn, n if per == 1 else max(1, n // per), per)
            loop.run_until_complete(aclient.close())
    finally:
        loop.close()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
