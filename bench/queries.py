"""Queries against SQLite's JSON and PostgreSQL's JSONB on the same documents: a sorted, limited read and a $group.

    python bench/queries.py                          # n = 1,000,000 tickets (~6 min on 2 cores)
    python bench/queries.py --n 100000 --reps 300    # smaller, quicker
    python bench/queries.py --only sqlite --no-server --json out.json

The documents are property-management tickets (~170 bytes): ``Category`` (one of 20),
``Date`` (all distinct), ``Cost``, ``Status``, ``PropertyID``, ``Title``. Two questions a
dashboard asks:

- **the ten newest tickets of a category**: hoardDB ``search({Category: c}, sort={Date: -1},
  limit=10)`` on a hash bucket with an index on ``(Category, Date)``, which it reads backward
  and stops after ten entries; SQLite ``... WHERE json_extract(doc, '$.Category') = ? ORDER BY
  json_extract(doc, '$.Date') DESC LIMIT 10`` with an expression index on those two; and
  PostgreSQL ``... WHERE doc->>'Category' = %s ORDER BY doc->>'Date' DESC LIMIT 10`` with a
  btree expression index on them (a GIN index on ``doc`` is there too, as a JSONB user would
  add one; it serves containment, not order). Each query's documents are decoded into Python
  dicts on every side. Median and p99 latency of ``--reps`` queries per side, random categories.
- **expenses per category**: ``aggregate([{$group: {_id: "$Category", total: {$sum: "$Cost"}}}])``
  against ``SELECT ..., SUM(...) GROUP BY`` over every document; median seconds of
  ``--group-rounds`` runs per side.

hoardDB runs embedded (in this process) and over the wire (a server this script starts
on the same data, ``hoarddb server --insecure``, over loopback TCP); SQLite in process
(WAL); PostgreSQL as a throwaway cluster with its default settings (it may use parallel
workers for the GROUP BY). The sides alternate in rounds, and every table gives hoardDB
as a ratio of times to the peer measured in the same phase: below 1 hoardDB is faster.
Every server started is stopped before the script exits.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

import hoarddb  # noqa: E402

import peers_procs as procs  # noqa: E402

CATEGORIES = [f"c{i:02}" for i in range(20)]
T0 = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
BATCH = 2000
NEWEST = {"sqlite": "SELECT doc FROM tickets WHERE json_extract(doc, '$.Category') = ? "
                    "ORDER BY json_extract(doc, '$.Date') DESC LIMIT 10",
          "postgres": "SELECT doc FROM tickets WHERE doc->>'Category' = %s ORDER BY doc->>'Date' DESC LIMIT 10"}
GROUP = {"sqlite": "SELECT json_extract(doc, '$.Category'), SUM(json_extract(doc, '$.Cost')) FROM tickets GROUP BY 1",
         "postgres": "SELECT doc->>'Category', SUM((doc->>'Cost')::float8) FROM tickets GROUP BY 1"}
PIPELINE = [{"$group": {"_id": "$Category", "total": {"$sum": "$Cost"}}}]


def ticket(i: int, n: int) -> dict:
    """The i-th ticket: its Date is distinct from every other (a permutation of n half-minutes)."""
    rng = random.Random(i)
    return {"_id_": i, "Category": CATEGORIES[rng.randrange(20)],
            "Date": T0 + datetime.timedelta(seconds=30 * ((i * 7919) % n)),
            "Cost": rng.randrange(100, 100_000) / 100, "Status": rng.choice(["open", "closed", "waiting"]),
            "PropertyID": f"p{rng.randrange(1000):04}", "Title": f"ticket {i}: the tap in flat {rng.randrange(90)}"}


def as_json(doc: dict) -> str:
    d = dict(doc, Date=doc["Date"].strftime("%Y-%m-%dT%H:%M:%SZ"))
    return json.dumps(d, separators=(",", ":"))


def batches(n: int):
    for start in range(0, n, BATCH):
        yield [ticket(i, n) for i in range(start, min(n, start + BATCH))]


# -- the sides: each has newest(category) -> list of dicts and group() -> {category: total} ----------------

class Hoard:
    def __init__(self, client, name: str):
        self.client, self.name = client, name
        self.bucket = client["bench"]["Tickets"]

    def newest(self, category: str) -> list:
        return list(self.bucket.search({"Category": category}, sort={"Date": -1}, limit=10))

    def group(self) -> dict:
        return {d["_id"]: d["total"] for d in self.bucket.aggregate(PIPELINE)}


class SQLite:
    name = "SQLite"

    def __init__(self, path: Path, n: int):
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE tickets (id INTEGER PRIMARY KEY, doc TEXT NOT NULL)")
        for batch in batches(n):
            self.db.execute("BEGIN")
            self.db.executemany("INSERT INTO tickets VALUES (?, ?)", [(d["_id_"], as_json(d)) for d in batch])
            self.db.execute("COMMIT")
        self.db.execute("CREATE INDEX tickets_category_date ON tickets "
                        "(json_extract(doc, '$.Category'), json_extract(doc, '$.Date'))")
        self.db.execute("ANALYZE")

    def newest(self, category: str) -> list:
        return [json.loads(doc) for (doc,) in self.db.execute(NEWEST["sqlite"], (category,))]

    def group(self) -> dict:
        return dict(self.db.execute(GROUP["sqlite"]).fetchall())

    def plan(self) -> str:
        return " / ".join(r[-1] for r in self.db.execute("EXPLAIN QUERY PLAN " + NEWEST["sqlite"], ("c01",)))


class Postgres:
    name = "PostgreSQL"

    def __init__(self, n: int):
        import psycopg

        self.server = procs.PostgresServer()
        try:
            self.conn = psycopg.connect(self.server.dsn, autocommit=True)
            cur = self.conn.cursor()
            cur.execute("CREATE TABLE tickets (id bigint PRIMARY KEY, doc jsonb NOT NULL)")
            with cur.copy("COPY tickets (id, doc) FROM STDIN") as copy:
                for batch in batches(n):
                    for d in batch:
                        copy.write_row((d["_id_"], as_json(d)))
            cur.execute("CREATE INDEX tickets_category_date ON tickets ((doc->>'Category'), (doc->>'Date'))")
            cur.execute("CREATE INDEX tickets_doc ON tickets USING gin (doc jsonb_path_ops)")
            cur.execute("VACUUM ANALYZE tickets")
            self.cur = cur
        except BaseException:
            self.server.stop()
            raise

    def newest(self, category: str) -> list:
        self.cur.execute(NEWEST["postgres"], (category,))
        return [doc for (doc,) in self.cur.fetchall()]  # psycopg decodes jsonb into dicts

    def group(self) -> dict:
        self.cur.execute(GROUP["postgres"])
        return dict(self.cur.fetchall())

    def plan(self) -> str:
        self.cur.execute("EXPLAIN " + NEWEST["postgres"], ("c01",))
        return " / ".join(r[0].strip() for r in self.cur.fetchall())

    def stop(self) -> None:
        try:
            self.conn.close()
        finally:
            self.server.stop()


# -- measuring ---------------------------------------------------------------------------------------

def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def measure(sides: list, reps: int, group_rounds: int, rng: random.Random) -> dict:
    """``{side name: {"newest": [seconds], "group": [seconds]}}``, the sides alternating in rounds
    (the first side first in odd rounds, last in even ones)."""
    out = {s.name: {"newest": [], "group": []} for s in sides}
    rounds = 3
    for r in range(rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        categories = [rng.choice(CATEGORIES) for _ in range(reps // rounds)]
        for side in order:
            side.newest(categories[0])  # warm
            for c in categories:
                t = time.perf_counter()
                side.newest(c)
                out[side.name]["newest"].append(time.perf_counter() - t)
    for r in range(group_rounds):
        for side in (sides if r % 2 == 0 else sides[::-1]):
            t = time.perf_counter()
            side.group()
            out[side.name]["group"].append(time.perf_counter() - t)
    return out


def check_same(sides: list) -> None:
    """Every side answers the same: the same ten tickets, the same totals (to a cent)."""
    want = [d["_id_"] for d in sides[0].newest("c07")]
    totals = sides[0].group()
    for side in sides[1:]:
        got = [d["_id_"] for d in side.newest("c07")]
        assert got == want, (side.name, got, want)
        other = side.group()
        assert other.keys() == totals.keys() and all(abs(other[k] - v) < 0.01 for k, v in totals.items()), side.name


def report(hoard: str, numbers: dict, peers: list[str]) -> list[str]:
    h = numbers[hoard]
    lines = ["| query | side | median | p99 | hoardDB / side (median time) |", "|---|---|---|---|---|"]
    for name in [hoard] + peers:
        x = numbers[name]["newest"]
        ratio = "" if name == hoard else f"{statistics.median(h['newest']) / statistics.median(x):.2f}"
        lines.append(f"| ten newest of a category | {name} | {statistics.median(x) * 1e3:.3f} ms | "
                     f"{pct(x, 99) * 1e3:.3f} ms | {ratio} |")
    for name in [hoard] + peers:
        x = numbers[name]["group"]
        ratio = "" if name == hoard else f"{statistics.median(h['group']) / statistics.median(x):.2f}"
        lines.append(f"| $group: total Cost per Category | {name} | {statistics.median(x):.2f} s | "
                     f"{max(x):.2f} s (max) | {ratio} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000, help="tickets (default 1,000,000)")
    ap.add_argument("--reps", type=int, default=600, help="newest-ten queries per side (default 600)")
    ap.add_argument("--group-rounds", type=int, default=3, help="$group runs per side (default 3)")
    ap.add_argument("--only", default="sqlite,postgres", help="peers: sqlite,postgres")
    ap.add_argument("--no-server", action="store_true", help="hoardDB embedded only")
    ap.add_argument("--no-embedded", action="store_true", help="hoardDB over the wire only")
    ap.add_argument("--json", help="write the raw latencies here")
    args = ap.parse_args()
    wanted = [p for p in args.only.split(",") if p]
    missing = procs.missing_peers()
    tmp = Path(tempfile.mkdtemp(prefix="hoarddb-queries-"))
    rng = random.Random(11)
    print(f"# bench/queries.py, n = {args.n:,}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    for line in procs.machine(str(tmp)):
        print(f"#   {line}")
    peers: list = []
    server = None
    results: dict = {}
    try:
        t = time.perf_counter()
        with hoarddb.open(tmp / "hoard", sync=False) as client:
            b = client["bench"].create_bucket("Tickets", type="hash", indices=[{"fields": ["Category", "Date"]}])
            for batch in batches(args.n):
                b.batch_insert(batch)
        print(f"# loaded hoardDB in {time.perf_counter() - t:.0f} s")
        if "sqlite" in wanted:
            t = time.perf_counter()
            peers.append(SQLite(tmp / "sqlite.db", args.n))
            print(f"# loaded SQLite in {time.perf_counter() - t:.0f} s; plan: {peers[-1].plan()}")
        if "postgres" in wanted:
            if "postgres" in missing:
                print(f"# PostgreSQL skipped: {missing['postgres']}")
            else:
                t = time.perf_counter()
                peers.append(Postgres(args.n))
                print(f"# loaded PostgreSQL in {time.perf_counter() - t:.0f} s; plan: {peers[-1].plan()}")
        names = [p.name for p in peers]
        if not args.no_embedded:
            with hoarddb.open(tmp / "hoard") as client:
                side = Hoard(client, "hoardDB embedded")
                explain = side.bucket.search({"Category": "c01"}, sort={"Date": -1}, limit=10, explain=True).explain
                print(f"# hoardDB: {explain['index_used']}, sort {explain['sort']}, "
                      f"{explain['keys_examined']} keys and {explain['docs_examined']} documents examined")
                check_same([side] + peers)
                results["embedded"] = measure([side] + peers, args.reps, args.group_rounds, rng)
            print("\n## hoardDB embedded (in process)\n")
            print("\n".join(report("hoardDB embedded", results["embedded"], names)))
        if not args.no_server:
            server = procs.HoardServer(tmp / "hoard", tmp / "server.log")
            with hoarddb.connect(server.url) as client:
                side = Hoard(client, "hoardDB server")
                check_same([side] + peers)
                results["server"] = measure([side] + peers, args.reps, args.group_rounds, rng)
            print("\n## hoardDB server (over loopback TCP)\n")
            print("\n".join(report("hoardDB server", results["server"], names)))
    finally:
        if server is not None:
            server.stop()
        for p in peers:
            if isinstance(p, Postgres):
                p.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
