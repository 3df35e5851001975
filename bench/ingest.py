"""hoarddb ingest, dump and restore on a generated mongodump file of ~1 KB documents, embedded.

    python bench/ingest.py                 # ~200 MB dump (about 200,000 documents)
    python bench/ingest.py --size 1024     # ~1 GB, as the issue asks
    python bench/ingest.py --profile       # and where the time of the ingest goes (cProfile)

Each document looks like a user record of a mongodump: an ObjectId _id, strings, an
int64, a Decimal128, a date, a nested array and ~700 bytes of text, about 1 KB of BSON.
The file is ingested into a hash bucket (batch_put, 1000 documents per write, sync on),
then the bucket is dumped, then restored into another database. Prints documents/s
for each step; record the table in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import os
import platform
import pstats
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import bson
from bson import Decimal128, Int64, ObjectId

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hoarddb  # noqa: E402
from hoarddb.tools import dump, ingest, restore  # noqa: E402


def make_dump(path: Path, megabytes: int) -> tuple[int, int]:
    """Write ``path`` (~``megabytes`` MB of ~1 KB documents); (documents, bytes)."""
    rng = random.Random(7)
    words = ["lorem", "ipsum", "dolor", "sit", "amet", "property", "tenant", "lease", "invoice", "repair"]
    target = megabytes * 1024 * 1024
    written = n = 0
    base = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    with open(path, "wb") as fh:
        chunk = []
        while written < target:
            doc = {
                "_id": ObjectId(),
                "name": f"User {n}",
                "email": f"user{n}@example.com",
                "company": f"company-{n % 500}",
                "visits": Int64(rng.randrange(1 << 40)),
                "balance": Decimal128(f"{rng.randrange(10**6)}.{rng.randrange(100):02}"),
                "createdAt": base + datetime.timedelta(seconds=n),
                "tags": [rng.choice(words) for _ in range(5)],
                "history": [[rng.randrange(100), rng.randrange(100)] for _ in range(4)],
                "note": " ".join(rng.choice(words) for _ in range(110)),
            }
            data = bson.encode(doc)
            chunk.append(data)
            written += len(data)
            n += 1
            if len(chunk) >= 10_000:
                fh.write(b"".join(chunk))
                chunk.clear()
        fh.write(b"".join(chunk))
    return n, written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=200, help="megabytes of BSON to generate (default 200)")
    ap.add_argument("--dir", default=None, help="where to put the dump and the data directory (default: a temp dir)")
    ap.add_argument("--no-sync", action="store_true", help="open the database with sync=False")
    ap.add_argument("--profile", action="store_true", help="profile the ingest and print the top functions")
    ap.add_argument("--skip-dump", action="store_true", help="measure ingest only")
    args = ap.parse_args()

    work = Path(args.dir or tempfile.mkdtemp(prefix="hoarddb-bench-ingest-"))
    work.mkdir(parents=True, exist_ok=True)
    src = work / "mongodump" / "app"
    src.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    docs, size = make_dump(src / "users.bson", args.size)
    print(f"generated {docs:,} documents, {size / 1e6:,.0f} MB ({size / docs:,.0f} bytes each) "
          f"in {time.perf_counter() - t:.1f} s")
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cpu, "
          f"sync={'off' if args.no_sync else 'on'}")

    data = work / "data"
    shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(work / "out", ignore_errors=True)
    rows = []
    with hoarddb.open(data, sync=not args.no_sync, ttl_sweep_seconds=0) as client:
        prof = cProfile.Profile() if args.profile else None
        t = time.perf_counter()
        if prof:
            prof.enable()
        report = ingest(client, src, into_db="app")
        if prof:
            prof.disable()
        elapsed = time.perf_counter() - t
        assert report.ok, report.summary()
        rows.append(("ingest (.bson -> hash, batch_put)", report.documents, elapsed))
        if not args.skip_dump:
            t = time.perf_counter()
            report = dump(client, "app", work / "out")
            rows.append(("dump (export -> .bson)", report.documents, time.perf_counter() - t))
            t = time.perf_counter()
            report = restore(client, work / "out" / "app", db="app2")
            assert report.ok, report.summary()
            rows.append(("restore (.bson -> hash, load)", report.documents, time.perf_counter() - t))
    print()
    print("| step | documents | seconds | documents/s | MB/s |")
    print("|---|---:|---:|---:|---:|")
    for name, n, secs in rows:
        print(f"| {name} | {n:,} | {secs:.1f} | {n / secs:,.0f} | {size / 1e6 / secs:,.1f} |")
    if prof:
        print()
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
