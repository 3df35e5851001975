"""hoardDB over the wire against the embedded engine and against a bare echo of the same messages.

    python bench/server.py              # 1 and 16 clients, durable inserts and gets
    python bench/server.py --n 500      # quicker

Workloads, each with 1 client and with 16 concurrent clients (separate processes,
one connection each; the embedded engine runs 16 threads on one open database, as
one process at a time may open a data directory):

    insert   hash inserts of a ~150-byte document, each durable before it is answered
    get      gets of those documents by key

Targets:

    server   ``hoarddb server --insecure`` in a child process (group commit on)
    tls      the same with TLS and SCRAM login
    embedded ``hoarddb.open(path)`` (sync=True: one fsync per write)
    echo     an asyncio server that answers each framed BSON request at once with a
             small answer, through the same blocking client: the floor the protocol
             and a Python client reach before any database work

Prints ops/s per row and, for the server, operations per fsync. Record results in
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import platform
import re
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hoarddb  # noqa: E402
from hoarddb.testing import ServerProcess  # noqa: E402

DOC = {"Name": "Jane Doe", "Email": "jane@example.com", "Age": 42, "Tags": ["a", "b"], "Pad": "x" * 64}


# ---- the echo server ----------------------------------------------------------------------------

def echo_server(port_queue) -> None:
    from hoarddb.values.codec import decode, encode
    from hoarddb.wire.framing import FrameReader

    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            self.t, self.r = transport, FrameReader()

        def data_received(self, data):
            self.r.feed(data)
            out = []
            while (frame := self.r.next_frame()) is not None:
                doc = decode(frame)
                if doc.get("op") == "hello":
                    out.append(encode({"id": doc["id"], "ok": 1, "result": {"protocol": 1, "auth": []}}))
                else:
                    out.append(encode({"id": doc["id"], "ok": 1, "result": None}))
            self.t.write(b"".join(out))

    async def main():
        server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0)
        port_queue.put(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    asyncio.run(main())


# ---- one client's work --------------------------------------------------------------------------

def client_work(url, workload, client_no, n, start_at, results) -> None:
    client = hoarddb.connect(url)
    bucket = client["bench"]["Users"]
    keys = [f"c{client_no:02}-{i:07}" for i in range(n)]
    while time.time() < start_at:
        time.sleep(0.001)
    t0 = time.perf_counter()
    if workload == "insert":
        for k in keys:
            bucket.insert({"_id_": k, **DOC})
    else:
        for k in keys:
            bucket.get(k)
    results.put(time.perf_counter() - t0)
    client.close()


def run_remote(url, workload, clients, n) -> float:
    results = mp.Queue()
    start_at = time.time() + 1.0
    procs = [mp.Process(target=client_work, args=(url, workload, c, n, start_at, results)) for c in range(clients)]
    for p in procs:
        p.start()
    times = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    return clients * n / max(times)


def run_embedded(path, workload, clients, n) -> float:
    with hoarddb.open(path) as client:
        if workload == "insert":
            client["bench"].create_bucket("Users", type="hash")
        bucket = client["bench"]["Users"]
        barrier = threading.Barrier(clients + 1)
        times = []

        def work(c):
            keys = [f"c{c:02}-{i:07}" for i in range(n)]
            barrier.wait()
            t0 = time.perf_counter()
            for k in keys:
                bucket.insert({"_id_": k, **DOC}) if workload == "insert" else bucket.get(k)
            times.append(time.perf_counter() - t0)

        threads = [threading.Thread(target=work, args=(c,)) for c in range(clients)]
        for t in threads:
            t.start()
        barrier.wait()
        for t in threads:
            t.join()
    return clients * n / max(times)


def fsync_stats(metrics_port) -> tuple[float, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    fsyncs = float(re.search(r"^hoarddb_server_fsyncs_total (\S+)", text, re.M).group(1))
    ops = float(re.search(r"^hoarddb_server_ops_per_fsync_sum (\S+)", text, re.M).group(1))
    return fsyncs, ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="operations per client with 1 client")
    parser.add_argument("--n16", type=int, default=400, help="operations per client with 16 clients")
    parser.add_argument("--targets", default="echo,server,tls,embedded")
    args = parser.parse_args()
    targets = args.targets.split(",")
    print(f"# {platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs")
    print(f"{'target':<9} {'workload':<7} {'clients':>7} {'ops/s':>9} {'ops/fsync':>9}")
    root = Path(tempfile.mkdtemp(prefix="hoarddb-bench-"))
    try:
        for clients, n in ((1, args.n), (16, args.n16)):
            if "echo" in targets:
                q = mp.Queue()
                echo = mp.Process(target=echo_server, args=(q,), daemon=True)
                echo.start()
                url = f"hoarddb://127.0.0.1:{q.get(timeout=30)}/?insecure=true"
                for workload in ("insert", "get"):
                    print(f"{'echo':<9} {workload:<7} {clients:>7} {run_remote(url, workload, clients, n):>9.0f} {'':>9}",
                          flush=True)
                echo.terminate()
            for target in ("server", "tls"):
                if target not in targets:
                    continue
                data = root / f"{target}-{clients}" / "data"
                if target == "tls":
                    from hoarddb.server.users import UserStore
                    UserStore(data).add("bench", "bench-pw", ["readWrite:bench", "dbAdmin:bench"], iterations=4096)
                with ServerProcess(data, insecure=(target == "server")) as server:
                    url = server.url("bench", "bench-pw") if target == "tls" else server.url()
                    with hoarddb.connect(url) as c:
                        c["bench"].create_bucket("Users", type="hash")
                    for workload in ("insert", "get"):
                        f0, o0 = fsync_stats(server.metrics_port)
                        rate = run_remote(url, workload, clients, n)
                        f1, o1 = fsync_stats(server.metrics_port)
                        per = f"{(o1 - o0) / (f1 - f0):.1f}" if f1 > f0 else "-"
                        print(f"{target:<9} {workload:<7} {clients:>7} {rate:>9.0f} {per:>9}", flush=True)
            if "embedded" in targets:
                path = root / f"embedded-{clients}"
                for workload in ("insert", "get"):
                    print(f"{'embedded':<9} {workload:<7} {clients:>7} "
                          f"{run_embedded(path, workload, clients, n):>9.0f} {'1.0' if workload == 'insert' else '':>9}",
                          flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
