"""One client over the wire, one operation at a time: microseconds per operation and the server's CPU per operation.

    python bench/lone_client.py                          # a server of this checkout, defaults
    python bench/lone_client.py -- --busy-poll 0         # server flags after --
    python bench/lone_client.py --repo /tmp/other -n 3000
    python bench/lone_client.py --client busy_poll=0     # the client's connection options
    python bench/lone_client.py --against busy_poll=0    # both, alternating blocks on one server

For A/Bs of what a lone client pays (busy polling, a held LMDB commit): run it for each
side in turn, alternating, several times. The server runs in a process of its own
(``bench/peers_procs.HoardServer`` of ``--repo``, uvloop when installed); its CPU per
operation is utime + stime from ``/proc`` (Linux), busy polling included. Operations:
fifo push and pop (~190 B), heap push, hash insert and get, 1 KB insert with a unique
and a plain index, search by the unique field.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, default=HERE.parent, help="checkout whose server runs (default: this one)")
    ap.add_argument("-n", type=int, default=3000, help="operations of each kind (default 3,000)")
    ap.add_argument("--client", default="", metavar="QUERY",
                    help="connection options of the client, as in a URL (busy_poll=0)")
    ap.add_argument("--against", metavar="QUERY",
                    help="alternate with a client of these options on the same server (busy_poll=0), medians")
    ap.add_argument("server_flags", nargs="*", help="flags for `hoarddb server`, after --")
    args = ap.parse_args()
    sys.path[:0] = [str(args.repo), str(args.repo / "bench")]
    import hoarddb
    from cpu_per_insert import process_cpu
    from peers_procs import HoardServer
    from peers_work import small_doc, user_doc

    n = args.n
    tmp = Path(tempfile.mkdtemp(prefix="hoarddb-lone-"))
    server = HoardServer(tmp / "data", tmp / "server.log", tuple(args.server_flags))

    def server_cpu() -> float:
        return process_cpu(server.pid)

    def connect(query: str):
        return hoarddb.connect(server.url + (f"&{query}" if query else ""))

    def operations(db) -> list:
        q, heap, kv, docs = db["Q"], db["H"], db["KV"], db["D"]
        return [
            ("fifo push", lambda i: q.push(small_doc(i))),
            ("fifo pop", lambda i: q.pop()),
            ("heap push", lambda i: heap.push({"priority": i % 100, **small_doc(i)})),
            ("hash insert", lambda i: kv.insert({"_id_": f"k{i}", **small_doc(i)})),
            ("hash get", lambda i: kv.get(f"k{i}")),
            ("1 KB insert, two indexes", lambda i: docs.insert(user_doc(i, 1000))),
            ("search by Email", lambda i: docs.search({"Email": f"user{i}@example.com"})),
        ]

    try:
        with connect("") as client:
            db = client["bench"]
            for name, kind in (("Q", "fifo"), ("H", "heap"), ("KV", "hash")):
                db.create_bucket(name, type=kind)
            db.create_bucket("D", type="hash", indices=[{"field": "Email", "unique": True}, "CompanyID"])
        if args.against is None:
            with connect(args.client) as client:
                print(f"{'operation':26} {'µs/op':>7} {'server CPU µs/op':>17}")
                for name, op in operations(client["bench"]):
                    cpu, started = server_cpu(), time.perf_counter()
                    for i in range(n):
                        op(i)
                    wall = (time.perf_counter() - started) / n * 1e6
                    print(f"{name:26} {wall:7.0f} {(server_cpu() - cpu) / n * 1e6:17.0f}", flush=True)
            return
        # --against: blocks of each operation, alternating between the two sets of options on
        # one server (a new connection each block), medians of the blocks' µs per operation
        sides, blocks, size = (args.client, args.against), 8, max(1, n // 8)
        times: dict = {}
        done = 0
        for block in range(blocks):
            for k, side in ((1, sides[1]), (0, sides[0])) if block % 2 else enumerate(sides):
                base = done + k * 10_000_000  # each side its own keys and emails
                with connect(side) as client:
                    for name, op in operations(client["bench"]):
                        started = time.perf_counter()
                        for i in range(base, base + size):
                            op(i)
                        times.setdefault((name, side), []).append((time.perf_counter() - started) / size * 1e6)
            done += size
        label = [s or "defaults" for s in sides]
        print(f"{'operation':26} {label[0]:>16} {label[1]:>16}   µs/op, medians of {blocks} blocks of {size}")
        for name in dict.fromkeys(name for name, _ in times):
            a, b = (statistics.median(times[(name, side)]) for side in sides)
            print(f"{name:26} {a:16.0f} {b:16.0f}   {b / a:.2f}×", flush=True)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
