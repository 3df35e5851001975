"""What the client's own Python costs per request: Python calls and the calling thread's CPU, both clients.

    python bench/client_cost.py                  # 3,000 requests of each kind
    python bench/client_cost.py -n 10000

The server runs in a child process (``hoarddb.testing.ServerProcess``, no TLS), so what
is counted here is the client's side only: building the operation, encoding, the
socket calls, reading and decoding the answer, mapping it to a result or an error.

- **calls** is cProfile's count of function calls (Python functions and C functions
  called from Python) per request, in this process: a count, it does not move with the
  machine's load. A/B a change by running this script from two checkouts.
- **cpu** is ``time.thread_time()`` per request on the calling thread (the loop's
  thread for asyncio): user and system time, so it includes the socket calls.

Workloads: a hash ``get`` of a ~190-byte document, a fifo ``push``, a ``search`` of
an empty filter on a two-document bucket, and pipelines of 100 ``length`` requests
(blocking client only, per request).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import shutil
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=3000, help="requests of each kind (default 3,000)")
    args = ap.parse_args()
    n = args.n
    tmp = Path(tempfile.mkdtemp(prefix="hoarddb-client-cost-"))
    server = ServerProcess(tmp / "data").start()
    try:
        with hoarddb.connect(server.url() + "&busy_poll=0") as client:  # counts that do not spin
            db = client["b"]
            kv = db.create_bucket("KV", type="hash")
            q = db.create_bucket("Q", type="fifo")
            s = db.create_bucket("S", type="hash")
            kv.put({"_id_": "k", "pad": "x" * 150})
            s.put({"_id_": "a", "n": 1})
            s.put({"_id_": "b", "n": 2})
            doc = {"pad": "x" * 150}
            lengths = [{"op": "length", "db": "b", "bucket": "Q", "args": {}}] * 100

            def get(m):
                for _ in range(m):
                    kv.get("k")

            def push(m):
                for _ in range(m):
                    q.push(doc)

            def search(m):
                for _ in range(m):
                    s.search({})

            def piped(m):
                for _ in range(m):
                    pipeline(client, lengths)

            measure("blocking get", get, n)
            measure("blocking push", push, n)
            measure("blocking search", search, n)
            measure("blocking pipeline of 100", piped, max(1, n // 100), per=100)

        loop = asyncio.new_event_loop()
        aclient = loop.run_until_complete(hoarddb.aio.connect(server.url()))
        akv, aq, a_s = aclient["b"].KV, aclient["b"].Q, aclient["b"].S

        def aio(make):
            async def many(m):
                for _ in range(m):
                    await make()
            return lambda m: loop.run_until_complete(many(m))

        measure("asyncio get", aio(lambda: akv.get("k")), n)
        measure("asyncio push", aio(lambda: aq.push(doc)), n)
        measure("asyncio search", aio(lambda: a_s.search({})), n)
        loop.run_until_complete(aclient.close())
        loop.close()
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
