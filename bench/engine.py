"""Embedded hoardDB against the raw ``lmdb`` package doing the same work, in one run.

    python bench/engine.py            # 100k elements per workload
    python bench/engine.py --n 20000  # quicker

Each workload runs on hoardDB (through the public API) and on a bare LMDB environment
with the same durability (sync on), encoding and decoding the same BSON, and prints
ops/s for both and their ratio hoardDB / raw. Record results in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time

import bson
import lmdb

import hoarddb

DOC = {"Name": "Jane Doe", "Email": "jane@example.com", "Age": 42, "Tags": ["a", "b"], "Pad": "x" * 100}


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


class Raw:
    """A bare LMDB environment doing each workload the simplest way."""

    def __init__(self, path):
        self.env = lmdb.open(path, map_size=8 << 30, sync=True, metasync=True, readahead=False)

    def insert_batches(self, n, batch):
        for start in range(0, n, batch):
            with self.env.begin(write=True) as txn:
                for i in range(start, min(n, start + batch)):
                    key = f"user{i:08}".encode()
                    txn.put(key, bson.encode({"_id_": f"user{i:08}", **DOC}), overwrite=False)

    def insert_single(self, n, offset):
        for i in range(offset, offset + n):
            with self.env.begin(write=True) as txn:
                txn.put(f"user{i:08}".encode(), bson.encode({"_id_": f"user{i:08}", **DOC}), overwrite=False)

    def gets(self, n):
        for i in range(n):  # one read transaction per get, as each get of a client is
            with self.env.begin() as txn:
                bson.decode(txn.get(f"user{i:08}".encode()))

    def queue(self, n, batch, prefix=b"q"):
        seq = 0
        for start in range(0, n, batch):
            with self.env.begin(write=True) as txn:
                for _ in range(min(batch, n - start)):
                    seq += 1
                    txn.put(prefix + seq.to_bytes(8, "big"), bson.encode(DOC))
        for start in range(0, n, batch):
            with self.env.begin(write=True) as txn:
                cur = txn.cursor()
                cur.set_range(prefix)
                for _ in range(min(batch, n - start)):
                    bson.decode(cur.value())
                    cur.delete()

    def heap(self, n, batch, priorities):
        """A priority queue by hand: key = inverted priority + counter, popped from the first key."""
        seq = 0
        for start in range(0, n, batch):
            with self.env.begin(write=True) as txn:
                for i in range(start, min(n, start + batch)):
                    seq += 1
                    key = b"p" + (255 - priorities[i]).to_bytes(1, "big") + seq.to_bytes(8, "big")
                    txn.put(key, bson.encode(dict(DOC, priority=priorities[i])))
        for start in range(0, n, batch):
            with self.env.begin(write=True) as txn:
                cur = txn.cursor()
                cur.set_range(b"p")
                for _ in range(min(batch, n - start)):
                    bson.decode(cur.value())
                    cur.delete()

    def scan(self, prefix=b"user"):
        with self.env.begin() as txn:
            cur = txn.cursor()
            cur.set_range(prefix)
            out = []  # a range returns its documents: keep them, as hoardDB must
            for k, v in cur:
                if not k.startswith(prefix):
                    break
                out.append(bson.decode(v))
            return out


def run(n: int, single: int, batch: int) -> list[tuple[str, int, float, float]]:
    rows = []
    base = tempfile.mkdtemp(prefix="hoarddb-bench-")
    try:
        raw = Raw(os.path.join(base, "raw"))
        client = hoarddb.open(os.path.join(base, "hoard"))
        db = client["bench"]
        users = db.create_bucket("Users", type="hash")
        docs = [{"_id_": f"user{i:08}", **DOC} for i in range(n)]

        t_h = timed(lambda: [users.batch_insert(docs[s:s + 1000]) for s in range(0, n, 1000)])
        t_r = timed(lambda: raw.insert_batches(n, 1000))
        rows.append(("hash insert, batches of 1000", n, n / t_h, n / t_r))

        extra = [{"_id_": f"user{i:08}", **DOC} for i in range(n, n + single)]
        t_h = timed(lambda: [users.insert(d) for d in extra])
        t_r = timed(lambda: raw.insert_single(single, n))
        rows.append(("hash insert, one durable write each", single, single / t_h, single / t_r))

        keys = [f"user{i:08}" for i in range(n)]
        def gets():  # each result dropped, as the raw side drops its decoded document
            for k in keys:
                users.get(k)
        t_h = timed(gets)
        t_r = timed(lambda: raw.gets(n))
        rows.append(("hash get by key", n, n / t_h, n / t_r))

        q = db.create_bucket("Queue", type="fifo")
        elems = [dict(DOC, n=i) for i in range(n)]

        def fifo():
            for s in range(0, n, batch):
                q.batch_push(elems[s:s + batch])
            for _ in range(0, n, batch):
                q.pop(batch)
        t_h = timed(fifo)
        t_r = timed(lambda: raw.queue(n, batch))
        rows.append((f"fifo push then pop, batches of {batch}", 2 * n, 2 * n / t_h, 2 * n / t_r))

        h = db.create_bucket("Heap", type="heap")
        pels = [dict(DOC, priority=i % 97, n=i) for i in range(n)]

        def heap():
            for s in range(0, n, batch):
                h.batch_push(pels[s:s + batch])
            for _ in range(0, n, batch):
                h.pop(batch)
        t_h = timed(heap)
        t_r = timed(lambda: raw.heap(n, batch, [i % 97 for i in range(n)]))
        rows.append((f"heap push then pop, batches of {batch}", 2 * n, 2 * n / t_h, 2 * n / t_r))

        bt = db.create_bucket("Board", type="btree", key="Score")
        for s in range(0, n, 1000):
            bt.batch_insert([dict(DOC, Score=i) for i in range(s, min(n, s + 1000))])
        t_h = timed(lambda: bt.range({"Score": {"$gte": 0}}))
        t_r = timed(lambda: raw.scan())
        rows.append(("btree range scan (all entries)", n, n / t_h, n / t_r))

        client.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--single", type=int, default=2_000, help="durable single writes (one fsync each)")
    parser.add_argument("--batch", type=int, default=100, help="queue batch size (pop's limit is at most 100)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the table shows medians")
    args = parser.parse_args()
    rounds = [run(args.n, args.single, args.batch) for _ in range(args.rounds)]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"lmdb {'.'.join(map(str, lmdb.version()))}; median of {args.rounds} rounds")
    print("| workload | n | hoardDB ops/s | raw lmdb ops/s | ratio (median of rounds) |")
    print("|---|---:|---:|---:|---:|")
    for i, (name, count, _, _) in enumerate(rounds[0]):
        h = statistics.median(r[i][2] for r in rounds)
        raw = statistics.median(r[i][3] for r in rounds)
        ratio = statistics.median(r[i][2] / r[i][3] for r in rounds)
        print(f"| {name} | {count} | {h:,.0f} | {raw:,.0f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
