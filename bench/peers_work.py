"""The work of bench/peers.py that also runs in its client processes: documents, client loops, the property-sage mix.

A concurrent workload runs :func:`task` in N worker processes at once (a pool made
by bench/peers.py, whose initializer hands each process the same barrier). Each
worker opens its own connection, waits at the barrier so that all start together,
works for ``count`` operations or ``seconds``, whichever ends first, and reports
``(start, end, ops, latencies)``; start and end are ``time.perf_counter()``, which is
CLOCK_MONOTONIC and so comparable across processes.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

# -- documents ------------------------------------------------------------------------

TEXT = "The boiler in flat 3 makes a knocking sound at night; tenant asks for a visit. " * 2  # 158 chars
NOTES = ("Lease renewed for twelve months; deposit held in escrow; pets allowed with a fee. "
         "Keys: two front door, one mailbox. Parking space 14 in the rear lot. ") * 6


def small_doc(i: int) -> dict:
    """A ~190-byte document (BSON), the element of the queue workloads."""
    return {"Author": "Bob", "Text": TEXT, "n": i}


def email(i: int) -> str:
    return f"user{i}@example.com"


def company(j: int) -> str:
    return f"company-{j:07d}"


def user_doc(i: int, companies: int) -> dict:
    """A ~1 KB document (BSON and JSON alike) with a unique Email and a CompanyID shared by ``n / companies``."""
    return {
        "_id_": f"u{i:09d}",
        "Email": email(i),
        "CompanyID": company(i % companies),
        "Name": f"User Number {i}",
        "Phone": f"+1-555-{i % 10000:04d}",
        "Address": {"Street": f"{i % 997} Elm Street", "City": "Springfield", "Zip": f"{i % 100000:05d}"},
        "Tags": ["tenant", "newsletter", f"floor-{i % 12}"],
        "Score": i % 1000,
        "Notes": NOTES,
    }


# -- the concurrent worker ---------------------------------------------------------------

_barrier = None


def init_worker(barrier) -> None:
    """Pool initializer: every worker gets the one barrier."""
    global _barrier
    _barrier = barrier


def task(spec: tuple) -> tuple[float, float, int, Any]:
    """Run one client's share of a concurrent workload: ``(kind, target, count, seconds, index, extra)``."""
    kind, target, count, seconds, index, extra = spec
    try:
        run = _PREPARE[kind](target, index, extra)
    except BaseException:
        _barrier.abort()  # the others must not wait for this one
        raise
    try:
        _barrier.wait(120)
        start = time.perf_counter()
        ops, lat = run(count, start + seconds)
        end = time.perf_counter()
    finally:
        closer = getattr(run, "close", None)
        if closer is not None:
            closer()
    return start, end, ops, lat


class _Runner:
    def __init__(self, fn, close):
        self.fn, self.close = fn, close

    def __call__(self, count, deadline):
        return self.fn(count, deadline)


def _hoard_push(url, index, extra):
    import hoarddb

    client = hoarddb.connect(url)
    bucket = client[extra["db"]][extra["bucket"]]

    def run(count, deadline):
        done = 0
        for i in range(count):
            bucket.push(small_doc(i))
            done += 1
            if time.perf_counter() > deadline:
                break
        return done, None
    return _Runner(run, client.close)


def _hoard_pop(url, index, extra):
    import hoarddb

    client = hoarddb.connect(url)
    bucket = client[extra["db"]][extra["bucket"]]

    def run(count, deadline):
        done = 0
        for _ in range(count):
            if bucket.pop() is None:
                break
            done += 1
            if time.perf_counter() > deadline:
                break
        return done, None
    return _Runner(run, client.close)


def _hoard_insert(url, index, extra):
    import hoarddb

    client = hoarddb.connect(url)
    bucket = client[extra["db"]][extra["bucket"]]
    base, companies = extra["base"] + index * 10_000_000, extra["companies"]

    def run(count, deadline):
        done = 0
        for i in range(count):
            bucket.insert(user_doc(base + i, companies))
            done += 1
            if time.perf_counter() > deadline:
                break
        return done, None
    return _Runner(run, client.close)


def _redis_push(port, index, extra):
    import redis

    r = redis.Redis(host="127.0.0.1", port=port)
    r.ping()
    key = extra["key"]

    def run(count, deadline):
        done = 0
        for i in range(count):
            r.lpush(key, json.dumps(small_doc(i)))
            done += 1
            if time.perf_counter() > deadline:
                break
        return done, None
    return _Runner(run, r.close)


def _redis_pop(port, index, extra):
    import redis

    r = redis.Redis(host="127.0.0.1", port=port)
    r.ping()
    key = extra["key"]

    def run(count, deadline):
        done = 0
        for _ in range(count):
            raw = r.rpop(key)
            if raw is None:
                break
            json.loads(raw)
            done += 1
            if time.perf_counter() > deadline:
                break
        return done, None
    return _Runner(run, r.close)


def _pg_insert(dsn, index, extra):
    import psycopg
    from psycopg.types.json import Jsonb

    conn = psycopg.connect(dsn, autocommit=True)
    sql = f"INSERT INTO {extra['table']} (id, doc) VALUES (%s, %s)"
    base, companies = extra["base"] + index * 10_000_000, extra["companies"]

    def run(count, deadline):
        done = 0
        with conn.cursor() as cur:
            for i in range(count):
                doc = user_doc(base + i, companies)
                cur.execute(sql, (doc["_id_"], Jsonb(doc)))
                done += 1
                if time.perf_counter() > deadline:
                    break
        return done, None
    return _Runner(run, conn.close)


def _sage(url, index, extra):
    import hoarddb

    client = hoarddb.connect(url)
    mix = SageMix(client[extra["db"]], seed=extra["seed"] + index, worker=index, properties=extra["properties"],
                  companies=extra["companies"], expenses=extra["expenses"])

    def run(count, deadline):
        return mix.run(count, deadline)
    return _Runner(run, client.close)


_PREPARE = {
    "hoard_push": _hoard_push, "hoard_pop": _hoard_pop, "hoard_insert": _hoard_insert,
    "redis_push": _redis_push, "redis_pop": _redis_pop, "pg_insert": _pg_insert, "sage": _sage,
}


# -- property-sage ------------------------------------------------------------------------

#: The case study's Property bucket (docs/user/examples/property-sage.md), as Python options.
PROPERTY = dict(
    type="hash",
    fields=[{"name": "CompanyID", "type": "string"}, {"name": "Name", "type": "string"}],
    store_fields=[{"name": "Expenses", "type": "lifo"}, {"name": "ExpenseByID", "type": "hash"},
                  {"name": "ExpenseDates", "type": "btree"}, {"name": "Tickets", "type": "heap"},
                  {"name": "Comments", "type": "fifo"}, {"name": "Photos", "type": "lifo"},
                  {"name": "Documents", "type": "blob"}],
    indices=["CompanyID"],
)

CATEGORIES = ["boiler", "plumbing", "roof", "cleaning", "insurance", "tax", "garden", "electric"]

#: (kind, weight): 60 dashboard reads (peek/list/get), 25 writes, 15 index lookups.
MIX = [
    ("read: Property.get", 10),
    ("read: Expenses.peek(10)", 15),
    ("read: Tickets.peek()", 10),
    ("read: Comments.list(limit 20)", 5),
    ("read: Photos.peek(5)", 5),
    ("read: ExpenseDates.list(month, 50)", 10),
    ("read: ExpenseByID.get", 5),
    ("write: expense, 3 copies", 15),
    ("write: Tickets.push", 5),
    ("write: Comments.push", 5),
    ("index: search CompanyID", 15),
]


def pid(i: int) -> str:
    return f"p{i:05d}"


def expense(rng: random.Random, day: int) -> dict:
    return {"Amount": rng.randrange(10, 5000), "Category": rng.choice(CATEGORIES), "Date": f"2026-03-{day:02d}",
            "Vendor": f"Vendor {rng.randrange(200)}", "Note": "invoice attached"}


def sage_preload(db, properties: int, companies: int, expenses: int, seed: int = 7) -> None:
    """1 property document per id, each with ``expenses`` expenses (3 copies), 5 tickets, 10 comments, 3 photos."""
    rng = random.Random(seed)
    prop = db.create_bucket("Property", **PROPERTY)
    for i in range(properties):
        key = pid(i)
        prop.insert({"_id_": key, "CompanyID": company(i % companies), "Name": f"{i} Elm Street",
                     "Units": rng.randrange(1, 40)})
        doc = prop[key]
        feed = []
        for k in range(expenses):
            e, eid = expense(rng, 1 + k % 28), f"e{i}-{k}"
            feed.append(e)
            doc.ExpenseByID.put(eid, e)
            doc.ExpenseDates.put(f"{e['Date']}/{eid}", e)
        doc.Expenses.batch_push(feed)
        doc.Tickets.batch_push([{"priority": rng.randrange(1, 6), "Subject": "Leaking tap", "Unit": u}
                                for u in range(5)])
        doc.Comments.batch_push([{"Author": "Ann", "Text": TEXT[:80], "n": c} for c in range(10)])
        doc.Photos.batch_push([{"Name": f"photo{p}.jpg", "Size": 120_000 + p, "Type": "image/jpeg"}
                               for p in range(3)])


class SageMix:
    """One property-sage client: picks an operation of :data:`MIX` at random and times it."""

    def __init__(self, db, seed: int, worker: int, properties: int, companies: int, expenses: int):
        self.db = db
        self.prop = db.Property
        self.rng = random.Random(seed)
        self.worker = worker
        self.properties, self.companies, self.expenses = properties, companies, expenses
        self.kinds = [k for k, _ in MIX]
        self.weights = [w for _, w in MIX]
        self.added = 0

    def one(self, kind: str) -> int:
        """Do one operation of ``kind``; the number of calls it took."""
        rng = self.rng
        i = rng.randrange(self.properties)
        doc = self.prop[pid(i)]
        if kind == "read: Property.get":
            assert self.prop.get(pid(i)) is not None
        elif kind == "read: Expenses.peek(10)":
            doc.Expenses.peek(10)
        elif kind == "read: Tickets.peek()":
            doc.Tickets.peek()
        elif kind == "read: Comments.list(limit 20)":
            doc.Comments.list(limit=20)
        elif kind == "read: Photos.peek(5)":
            doc.Photos.peek(5)
        elif kind == "read: ExpenseDates.list(month, 50)":
            doc.ExpenseDates.list(after="2026-03-", limit=50)
        elif kind == "read: ExpenseByID.get":
            doc.ExpenseByID.get(f"e{i}-{rng.randrange(self.expenses)}")
        elif kind == "write: expense, 3 copies":
            self.added += 1
            e, eid = expense(rng, rng.randrange(1, 29)), f"w{self.worker}-{self.added}"
            doc.Expenses.push(e)
            doc.ExpenseByID.put(eid, e)
            doc.ExpenseDates.put(f"{e['Date']}/{eid}", e)
            return 3
        elif kind == "write: Tickets.push":
            doc.Tickets.push({"priority": rng.randrange(1, 6), "Subject": "Door lock", "Unit": rng.randrange(40)})
        elif kind == "write: Comments.push":
            doc.Comments.push({"Author": "Ann", "Text": TEXT[:80], "n": rng.randrange(1000)})
        elif kind == "index: search CompanyID":
            found = self.prop.search({"CompanyID": company(rng.randrange(self.companies))})
            assert len(found) >= 1
        else:
            raise ValueError(kind)
        return 1

    def run(self, count: int, deadline: float) -> tuple[int, dict]:
        """Up to ``count`` operations or until ``deadline``; (operations, {kind: [seconds...], "calls": n})."""
        lat: dict[str, list[float]] = {k: [] for k in self.kinds}
        calls = 0
        picks = self.rng.choices(self.kinds, self.weights, k=count)
        done = 0
        for kind in picks:
            t = time.perf_counter()
            calls += self.one(kind)
            end = time.perf_counter()
            lat[kind].append(end - t)
            done += 1
            if end > deadline:
                break
        return done, {"lat": lat, "calls": calls}
