"""The Go client against the Python client on one server: ops/s, sequential and 16 at once.

    python bench/go_client.py              # needs go, and Debian's golang-mongodb-mongo-driver-dev
    python bench/go_client.py -n 20000

One insecure server of this checkout, on loopback, in its own process. Operations: ``get``
of a hash document by key (a point read) and ``push`` to a fifo (a write, durable before
its answer). Sequential is one caller; concurrent is 16 goroutines sharing one Go client
(its default pool of 4 connections, pipelined), and 16 Python threads with a blocking
client each (one connection each: a Python client serves its threads one call at a time).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
GO = REPO / "clients" / "go"


def python_client(url: str, op: str, n: int, workers: int) -> float:
    import hoarddb

    clients = [hoarddb.connect(url) for _ in range(workers)]
    counter = iter(range(n))
    lock = threading.Lock()
    doc = {"Author": "Bob", "Text": "Nice photo!", "N": 1}

    def work(client):
        bucket = client["bench"].Hash if op == "get" else client["bench"].Queue
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            if op == "get":
                bucket.get(f"k{i % 1000}")
            else:
                bucket.push(doc)

    threads = [threading.Thread(target=work, args=(c,)) for c in clients]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    for c in clients:
        c.close()
    return n / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=10000, help="operations of each kind (default 10,000)")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    import hoarddb
    from hoarddb.testing.server import ServerProcess

    env = dict(os.environ, GOPROXY="off", GOFLAGS="-mod=readonly")
    binary = Path(tempfile.mkdtemp()) / "hoarddb-gobench"
    subprocess.run(["go", "build", "-o", str(binary), "./cmd/hoarddb-gobench"], cwd=GO, env=env, check=True)
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(Path(tmp) / "data", insecure=True) as server:
        url = server.url()
        with hoarddb.connect(url) as c:
            c["bench"].create_bucket("Hash", type="hash")
            c["bench"].Hash.batch_insert([{"_id_": f"k{i}", "Author": "Bob", "Text": "x" * 100} for i in range(1000)])
            c["bench"].create_bucket("Queue", type="fifo")
        rows = []
        for op in ("get", "push"):
            for workers in (1, 16):
                out = subprocess.run([str(binary), "-url", url, "-op", op, "-n", str(args.n), "-workers", str(workers)],
                                     capture_output=True, text=True, check=True)
                go = json.loads(out.stdout)["ops_per_s"]
                py = python_client(url, op, args.n, workers)
                rows.append((op, "sequential" if workers == 1 else f"{workers} at once", go, py))
    print(f"{'operation':10} {'callers':12} {'Go ops/s':>10} {'Python ops/s':>13} {'Go/Python':>9}")
    for op, callers, go, py in rows:
        print(f"{op:10} {callers:12} {go:10,.0f} {py:13,.0f} {go / py:9.2f}")


if __name__ == "__main__":
    main()
