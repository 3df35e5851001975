"""Trending hashtags of the last hour: a time-range index against scanning, and what the index costs writes.

    python bench/trending.py              # 1,000,000 posts over the last day
    python bench/trending.py --n 100000

Posts arrive in time order over one day, their hashtags drawn from a Zipf distribution
over 10,000 tags. The question is "the 10 hashtags with the most posts in the last hour",
asked of the window of an hourly time-range index that started 45 minutes ago (windows
of an hour every 15 minutes: an overlap of 4) and answered the same way by scanning that
hour: hoardDB's search over a plain index on the time and counting in Python, hoardDB's
aggregate ($match on the indexed time, $group, $sort, $limit), and SQLite (in process,
an index on the time, GROUP BY). Every answer is checked equal to the index's. Then the
write cost: the same posts inserted (batches of 1,000, embedded) into a bucket without
indexes, with a plain index on the time, and with the time-range index at overlap 1 and
at overlap 4.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import os
import platform
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections import Counter

import hoarddb

UTC = datetime.timezone.utc
TAGS = 10_000
ZIPF_S = 1.07
BATCH = 1000


def posts(n: int, now: float) -> list[tuple[float, str]]:
    rng = random.Random(2026)
    weights = list(itertools.accumulate(1 / (k + 1) ** ZIPF_S for k in range(TAGS)))
    tags = rng.choices([f"tag{k}" for k in range(TAGS)], cum_weights=weights, k=n)
    times = sorted(now - 86400 + rng.random() * 86400 for _ in range(n))
    return list(zip(times, tags))


def date(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(round(seconds, 3), UTC)


def trending_index(step: int) -> dict:
    return {"name": "hourly", "fields": ["At", "hashtag"], "ranked": True,
            "timeRange": {"on": "At", "range": 3600, "step": step, "ttl": 172800}}


def fill(bucket, data: list[tuple[float, str]]) -> float:
    """Insert every post in batches; seconds taken."""
    start = time.perf_counter()
    for s in range(0, len(data), BATCH):
        bucket.batch_insert([{"_id_": s + i, "At": date(t), "hashtag": tag, "text": "x" * 40}
                             for i, (t, tag) in enumerate(data[s:s + BATCH])])
    return time.perf_counter() - start


def timed(fn, reps: int) -> tuple[float, object]:
    """The median seconds of ``reps`` calls, and the last answer."""
    seconds = []
    answer = None
    for _ in range(reps):
        start = time.perf_counter()
        answer = fn()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), answer


def top10(counter: Counter) -> list[tuple[str, int]]:
    return sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:10]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=200, help="reads of the index (scans: a tenth, at least 3)")
    args = parser.parse_args()
    now = time.time()
    data = posts(args.n, now)
    path = tempfile.mkdtemp(prefix="hoarddb-trending-")
    rows = []
    try:
        with hoarddb.open(os.path.join(path, "data"), ttl_sweep_seconds=0) as c:
            db = c["bench"]
            writes = {}
            for name, indices in (("no index", []), ("plain index on the time", ["At"]),
                                  ("time-range, overlap 1", [trending_index(3600)]),
                                  ("time-range, overlap 4", [trending_index(900)])):
                bucket = db.create_bucket(f"B{len(writes)}", type="hash", indices=indices)
                writes[name] = (bucket, fill(bucket, data))
            indexed = writes["time-range, overlap 4"][0]
            plain = writes["plain index on the time"][0]

            window = indexed.window("hourly", oldest=True)
            lo, hi = window["start"], window["end"]
            in_hour = sum(1 for t, _ in data if lo.timestamp() <= t < hi.timestamp())
            scan_reps = max(3, args.reps // 10)

            def by_index():
                return [(r["value"], r["count"]) for r in indexed.window("hourly", byStart=lo, top=10)["top"]]

            served = {}

            def by_search():
                found = plain.search({"At": {"$gte": lo, "$lt": hi}})
                served["search"] = found.index_used
                return top10(Counter(d["hashtag"] for d in found))

            def by_aggregate():
                out = plain.aggregate([{"$match": {"At": {"$gte": lo, "$lt": hi}}},
                                       {"$group": {"_id": "$hashtag", "n": {"$count": {}}}},
                                       {"$sort": {"n": -1, "_id": 1}}, {"$limit": 10}])
                served["aggregate"] = getattr(out, "index_used", None)
                return [(d["_id"], d["n"]) for d in out]

            sql = sqlite3.connect(os.path.join(path, "posts.sqlite"))
            sql.execute("PRAGMA journal_mode=WAL")
            sql.execute("CREATE TABLE posts (id INTEGER PRIMARY KEY, at REAL, hashtag TEXT, text TEXT)")
            sql.execute("CREATE INDEX posts_at ON posts (at)")
            sql.executemany("INSERT INTO posts VALUES (?, ?, ?, ?)",
                            ((i, round(t, 3), tag, "x" * 40) for i, (t, tag) in enumerate(data)))
            sql.commit()

            def by_sqlite():
                return sql.execute("SELECT hashtag, COUNT(*) AS n FROM posts WHERE at >= ? AND at < ? "
                                   "GROUP BY hashtag ORDER BY n DESC, hashtag LIMIT 10",
                                   (lo.timestamp(), hi.timestamp())).fetchall()

            expected = None
            for name, fn, reps in (("time-range index, window top 10", by_index, args.reps),
                                   ("hoardDB search on the time + count", by_search, scan_reps),
                                   ("hoardDB aggregate", by_aggregate, scan_reps),
                                   ("SQLite, index on the time, GROUP BY", by_sqlite, scan_reps)):
                seconds, answer = timed(fn, reps)
                answer = [tuple(a) for a in answer]
                expected = expected if expected is not None else answer
                assert answer == expected, (name, answer, expected)
                rows.append((name, reps, seconds))
            sql.close()
    finally:
        shutil.rmtree(path, ignore_errors=True)

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"SQLite {sqlite3.sqlite_version}")
    print(f"{args.n:,} posts over one day, {TAGS:,} hashtags (Zipf s={ZIPF_S}); the window holds {in_hour:,} posts; "
          f"top 3: {expected[:3]}")
    print(f"index_used: search {served.get('search')!r}, aggregate {served.get('aggregate')!r}")
    print()
    print("| top 10 hashtags of the last hour | reads | median ms | ratio to the index |")
    print("|---|---:|---:|---:|")
    base = rows[0][2]
    for name, reps, seconds in rows:
        print(f"| {name} | {reps} | {seconds * 1000:.2f} | {seconds / base:,.0f}× |")
    print()
    print("| inserting the posts (batches of 1,000, embedded) | seconds | µs per post | ratio to no index |")
    print("|---|---:|---:|---:|")
    none = writes["no index"][1]
    for name, (_bucket, seconds) in writes.items():
        print(f"| {name} | {seconds:.1f} | {seconds / args.n * 1e6:.1f} | {seconds / none:.2f}× |")


if __name__ == "__main__":
    main()
