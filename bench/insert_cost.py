"""What one embedded single insert costs hoardDB in work done: Python calls, and user-space instructions.

    python bench/insert_cost.py                  # cProfile's calls per insert, sync=False
    python bench/insert_cost.py --durable        # the same with sync=True
    python bench/insert_cost.py --valgrind       # also instructions per insert (valgrind's callgrind)

The inserts of bench/embedded_insert.py: ~1 KB documents (bench/peers_work.py's user_doc)
into a hash bucket with a unique index on Email and a plain one on CompanyID, one per
write, after 10,000 documents loaded in batches. Both figures are counts, not times, so
they do not move with the machine's load: use them to A/B a change to the Python path
(two checkouts, this script from each), and bench/embedded_insert.py for its time.

- **calls** is cProfile's count of function calls (Python functions and C functions
  called from Python) over 5,000 inserts, divided by 5,000: the same on every run but for
  a fraction of a call (how often a checkpoint in the background is found still running).
- **instructions** (``--valgrind``) runs this script twice under ``valgrind
  --tool=callgrind``, with 0 and with 2,000 inserts after the same setup, and divides
  the difference by 2,000: hoardDB's Python, the interpreter, BSON, LMDB and zlib alike,
  in every thread (the checkpoint's too), the kernel not counted. The log's and data.mdb's
  fdatasyncs are stubbed out meanwhile (they cost the kernel's time, which is not counted,
  and would only make the run slow); ~1 minute.
"""

from __future__ import annotations

import argparse
import cProfile
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
import hoarddb.storage.kv_recovery as kv_recovery  # noqa: E402
import hoarddb.storage.wal as wal  # noqa: E402
from peers_work import user_doc  # noqa: E402

PROFILED = 5000
COUNTED = 2000


def run(durable: bool, inserts: int, profile: bool) -> float | None:
    """Load the bucket, warm up, then ``inserts`` single inserts; calls per insert if ``profile``."""
    tmp = Path(tempfile.mkdtemp(prefix="hoarddb-insert-cost-"))
    try:
        with hoarddb.open(tmp / "hoard", sync=False) as client:
            bucket = client["bench"].create_bucket(
                "Docs", type="hash", indices=[{"field": "Email", "unique": True}, "CompanyID"])
            for start in range(0, 10_000, 1000):
                bucket.batch_insert([user_doc(i, 1000) for i in range(start, start + 1000)])
        with hoarddb.open(tmp / "hoard", sync=durable) as client:
            bucket = client["bench"].Docs
            docs = [user_doc(i, 1000) for i in range(100_000, 100_200 + max(inserts, PROFILED))]
            for doc in docs[:200]:  # caches filled, the bucket open
                bucket.insert(doc)
            docs = docs[200:200 + inserts]
            if not profile:
                for doc in docs:
                    bucket.insert(doc)
                return None
            profiler = cProfile.Profile()
            profiler.enable()
            for doc in docs:
                bucket.insert(doc)
            profiler.disable()
            return pstats.Stats(profiler).total_calls / len(docs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def instructions(durable: bool) -> int:
    """User-space instructions per insert: two runs under callgrind, with and without the inserts."""
    def collected(inserts: int) -> int:
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__,
                   "--inserts", str(inserts), *(["--durable"] if durable else [])]
        # (a fixed hash seed: str hashes, and so dict and set probes, are then the same in every run)
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        out = subprocess.run(command, capture_output=True, text=True, check=True, env=env).stderr
        return int(re.search(r"Collected : (\d+)", out).group(1))

    return (collected(COUNTED) - collected(0)) // COUNTED


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--durable", action="store_true", help="sync=True (default: sync=False)")
    ap.add_argument("--valgrind", action="store_true", help="also count instructions per insert (valgrind)")
    ap.add_argument("--inserts", type=int, help=argparse.SUPPRESS)  # one run under valgrind
    args = ap.parse_args()
    if args.inserts is not None:
        wal._datasync = kv_recovery._datasync = lambda fd: None
        run(args.durable, args.inserts, profile=False)
        return
    mode = "durable" if args.durable else "relaxed"
    print(f"{mode}: {run(args.durable, PROFILED, profile=True):.1f} calls per insert (cProfile, {PROFILED:,} inserts)")
    if args.valgrind:
        if shutil.which("valgrind") is None:
            sys.exit("valgrind is not installed (apt-get install valgrind)")
        print(f"{mode}: {instructions(args.durable):,} instructions per insert (callgrind, {COUNTED:,} inserts)")


if __name__ == "__main__":
    main()
