"""Embedded single 1 KB inserts with two indexes, hoardDB against SQLite, in blocks interleaved in one process.

    python bench/embedded_insert.py durable          # sync=True against WAL + synchronous=FULL
    python bench/embedded_insert.py relaxed          # sync=False against synchronous=NORMAL
    python bench/embedded_insert.py durable --time-fsync   # also: how long hoardDB's log fdatasyncs took
    python bench/embedded_insert.py durable --no-fsync     # hoardDB's log and data.mdb never flushed (not durable!)

The rows of bench/peers.py's SQLite section nearest their bar, measured alone and
so with less noise: both sides load ``--docs`` documents (in batches, not timed), then
insert ``--blocks`` blocks of ``--size`` documents one per transaction, alternating which
side goes first; the medians of the blocks' µs per insert are printed with the ratio of
their rates. A hoardDB block ends when its last checkpoint's background flush has (left
to run on into SQLite's block, it would flatter hoardDB). ``--time-fsync`` times hoardDB's log fdatasyncs (``wal._datasync``) and
``--no-fsync`` turns them and the checkpoints' flushes of data.mdb (``kv_recovery._datasync``) into
nothing, to split a durable insert into its flushes and the rest (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import hoarddb  # noqa: E402
import hoarddb.storage.kv as kv  # noqa: E402
import hoarddb.storage.kv_recovery as kv_recovery  # noqa: E402
import hoarddb.storage.wal as wal  # noqa: E402
from peers_work import user_doc  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("durable", "relaxed"))
    ap.add_argument("--docs", type=int, default=100_000, help="documents loaded first (default 100,000)")
    ap.add_argument("--blocks", type=int, default=6, help="blocks per side (default 6)")
    ap.add_argument("--size", type=int, default=5000, help="inserts per block (default 5,000)")
    flush = ap.add_mutually_exclusive_group()
    flush.add_argument("--time-fsync", action="store_true", help="time hoardDB's fdatasyncs")
    flush.add_argument("--no-fsync", action="store_true", help="hoardDB flushes nothing (a decomposition, not durable)")
    args = ap.parse_args()
    durable, n, companies = args.mode == "durable", args.docs, max(1, args.docs // 10)

    synced: list[float] = []
    if args.no_fsync:
        wal._datasync = kv_recovery._datasync = lambda fd: None
    elif args.time_fsync:
        datasync = wal._datasync

        def timed(fd: int) -> None:
            started = time.perf_counter()
            datasync(fd)
            synced.append(time.perf_counter() - started)
        wal._datasync = timed

    tmp = Path(tempfile.mkdtemp(prefix="hoarddb-embedded-insert-"))
    try:
        with hoarddb.open(tmp / "hoard", sync=False) as client:  # loading is setup
            bucket = client["bench"].create_bucket(
                "Docs", type="hash", indices=[{"field": "Email", "unique": True}, "CompanyID"])
            for start in range(0, n, 1000):
                bucket.batch_insert([user_doc(i, companies) for i in range(start, min(n, start + 1000))])
        lite = sqlite3.connect(tmp / "sqlite.db", isolation_level=None)
        lite.execute("PRAGMA journal_mode=WAL")
        lite.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        lite.execute("CREATE TABLE docs (id TEXT PRIMARY KEY, doc TEXT NOT NULL)")
        lite.execute("CREATE UNIQUE INDEX docs_email ON docs (json_extract(doc, '$.Email'))")
        lite.execute("CREATE INDEX docs_company ON docs (json_extract(doc, '$.CompanyID'))")
        lite.execute("BEGIN")
        lite.executemany("INSERT INTO docs VALUES (?, ?)",
                         ((d["_id_"], json.dumps(d)) for d in (user_doc(i, companies) for i in range(n))))
        lite.execute("COMMIT")
        client = hoarddb.open(tmp / "hoard", sync=durable)
        bucket = client["bench"].Docs
        synced.clear()

        def hoard(first: int) -> float:
            started = time.perf_counter()
            for i in range(first, first + args.size):
                bucket.insert(user_doc(i, companies))
            # A checkpoint's flush of data.mdb runs in the background: counted here, not
            # left to run (and slow the disk) during SQLite's block.
            kv._CHECKPOINTS.submit(lambda: None).result()
            return (time.perf_counter() - started) / args.size * 1e6

        def sqlite(first: int) -> float:
            started = time.perf_counter()
            for i in range(first, first + args.size):
                d = user_doc(i, companies)
                lite.execute("INSERT INTO docs VALUES (?, ?)", (d["_id_"], json.dumps(d)))
            return (time.perf_counter() - started) / args.size * 1e6

        times: dict[str, list[float]] = {"hoardDB": [], "SQLite": []}
        for block in range(args.blocks):
            first = 10_000_000 + block * args.size
            sides = (("SQLite", sqlite), ("hoardDB", hoard)) if block % 2 else (("hoardDB", hoard), ("SQLite", sqlite))
            for name, side in sides:
                times[name].append(side(first))
        client.close()
        lite.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    h, s = statistics.median(times["hoardDB"]), statistics.median(times["SQLite"])
    print(f"{args.mode}{' (hoardDB flushing nothing)' if args.no_fsync else ''}: hoardDB {h:.0f} µs, "
          f"SQLite {s:.0f} µs per insert (medians of {args.blocks} blocks of {args.size}); "
          f"hoardDB / SQLite ops/s {s / h:.2f}")
    for name, values in times.items():
        print(f"  {name:8} blocks: {', '.join(f'{v:.0f}' for v in values)}")
    if synced:
        ordered = sorted(synced)
        print(f"  hoardDB fdatasync: {len(ordered)} calls, median {ordered[len(ordered) // 2] * 1e6:.0f} µs, "
              f"mean {statistics.fmean(ordered) * 1e6:.0f}, p90 {ordered[int(len(ordered) * 0.9)] * 1e6:.0f}")


if __name__ == "__main__":
    main()
