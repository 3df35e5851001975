"""How fast the TTL sweeper deletes expired documents, embedded, against the spec's one-node figure.

    python bench/ttl.py             # 200k expired documents
    python bench/ttl.py --n 50000

indexes.md quotes about 50,000 expired documents deleted a second on one node; this
prints ours, measured on this machine, and the ratio to that figure. Each document has
a unique index besides the TTL index, so each expiry also removes a unique entry.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import tempfile
import time

import hoarddb

SPEC_FIGURE = 50_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    args = parser.parse_args()
    path = tempfile.mkdtemp(prefix="hoarddb-ttl-")
    try:
        with hoarddb.open(path, ttl_sweep_seconds=0, ttl_sweep_budget_seconds=3600) as c:
            b = c["bench"].create_bucket("Sessions", type="hash", indices=[
                {"field": "CreatedAt", "expire_after_seconds": 60}, {"field": "Token", "unique": True}])
            old = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
            for s in range(0, args.n, 1000):
                b.batch_insert([{"_id_": f"s{i:08}", "CreatedAt": old, "Token": f"t{i}", "User": "u" * 40}
                                for i in range(s, min(args.n, s + 1000))])
            start = time.perf_counter()
            got = c.sweep_ttl()
            seconds = time.perf_counter() - start
            assert got["expired"] == args.n and b.count() == 0, got
    finally:
        shutil.rmtree(path, ignore_errors=True)
    rate = args.n / seconds
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print("| workload | n | seconds | expired docs/s | ratio to 50,000/s |")
    print("|---|---:|---:|---:|---:|")
    print(f"| TTL sweep, embedded, one pass | {args.n} | {seconds:.2f} | {rate:,.0f} | {rate / SPEC_FIGURE:.2f} |")


if __name__ == "__main__":
    main()
