"""hoardDB side by side with what users would pick instead: Redis, PostgreSQL and SQLite, in one run.

    python bench/peers.py                     # n = 100k, 3 rounds, at most 5 s per side and workload
    python bench/peers.py --quick             # n = 3k, at most 2 s per side: a couple of minutes
    python bench/peers.py --only redis,sage   # sections: redis, postgres, sqlite, sage
    python bench/peers.py --json out.json     # the raw per-round numbers too
    python bench/peers.py --client busy_poll=0  # hoardDB's clients with these connection options

Each workload runs on hoardDB and on the peer, alternating (hoardDB first in rounds
1 and 3, the peer first in round 2), for ``--rounds`` rounds; the tables give the
median ops/s of each and the median of the per-round ratios hoardDB / peer. Each side
of a workload does ``n`` operations or stops after ``--seconds``, whichever comes
first (so every loop is bounded); the ``ops`` column says how many it did.

- queues vs Redis: a hoardDB server (``hoarddb server --insecure``, group commit: an
  answer leaves after its fsync) against redis-server with ``appendonly yes`` and
  ``appendfsync always``; then hoardDB embedded with ``sync=False`` (the server has no
  relaxed mode) against ``appendfsync everysec``.
- documents vs PostgreSQL: a throwaway cluster (initdb in a temporary directory, default
  settings: fsync and synchronous_commit on), ~1 KB JSONB documents with a unique index
  on Email and a plain one on CompanyID; a hoardDB hash bucket with
  ``indices=[{field: Email, unique: true}, "CompanyID"]`` read with ``search()``.
- embedded vs SQLite: the same document workload in process; SQLite in WAL mode with
  ``synchronous=FULL`` (against ``sync=True``) and ``NORMAL`` (against ``sync=False``),
  JSON text with expression indexes.
- property-sage: the case study's Property model, 1,000 properties, a mix of dashboard
  reads, writes (the three copies of an expense) and index lookups; hoardDB alone.

Nothing is installed: a missing peer is named with how to install it, and the rest
runs. Every server is stopped (its process group killed) before the script exits.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from time import perf_counter

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

import hoarddb  # noqa: E402
from hoarddb.client import pipeline  # noqa: E402
from hoarddb.errors import DuplicateKeyError  # noqa: E402

import peers_procs as procs  # noqa: E402
import peers_work as work  # noqa: E402
from peers_work import company, email, small_doc, user_doc  # noqa: E402

SECTIONS = ("redis", "postgres", "sqlite", "sage")
CLIENTS = 16
DEPTH = 100  # pipeline depth
BATCH = 1000  # document batch size

DURABLE_REDIS = "durable: server group commit vs `appendfsync always`"
RELAXED_REDIS = "relaxed: embedded `sync=False` vs `appendfsync everysec`"
DURABLE_PG = "durable: fsync per commit, both"
DURABLE_SQLITE = "durable: `sync=True` vs WAL + `synchronous=FULL`"
RELAXED_SQLITE = "relaxed: `sync=False` vs WAL + `synchronous=NORMAL`"


def loop(fn, count: int, seconds: float, per: int = 1) -> tuple[int, float]:
    """Call ``fn(i)`` for i in range(count) until ``seconds`` pass or it returns False; (ops, seconds)."""
    start = perf_counter()
    deadline = start + seconds
    done = 0
    for i in range(count):
        if fn(i) is False:
            break
        done += per
        if perf_counter() > deadline:
            break
    return done, perf_counter() - start


class Bench:
    def __init__(self, args):
        self.args = args
        self.n = args.n
        self.docs = args.docs
        self.seconds = args.seconds
        self.rounds = args.rounds
        self.client_options = f"&{args.client}" if args.client else ""  # hoardDB's clients (busy_poll=0)
        self.rows: dict[tuple[str, str, str], dict] = {}
        self.sage: list[dict] = []
        self.notes: list[str] = []
        self.missing = procs.missing_peers()
        self.tmp = Path(tempfile.mkdtemp(prefix="hoarddb-peers-"))
        self.pool = None
        self.barrier = None

    # -- bookkeeping

    def row(self, section: str, name: str, durability: str, bar: float | None) -> dict:
        return self.rows.setdefault((section, name, durability), {"section": section, "name": name, "durability": durability,
                                                      "bar": bar, "hoard": [], "peer": []})

    def pair(self, rnd: int, section: str, name: str, durability: str, bar: float | None, hoard, peer) -> None:
        """Run one workload on both sides (order alternating by round) and record (ops, seconds) of each."""
        row = self.row(section, name, durability, bar)
        sides = [("hoard", hoard), ("peer", peer)]
        if rnd % 2:
            sides.reverse()
        for side, fn in sides:
            if fn is None:
                continue
            ops, secs = fn()
            row[side].append((ops, secs))
            print(f"  round {rnd + 1} {section:8} {name[:58]:58} {side:5} {ops:>8} ops {ops / secs:>10,.0f}/s",
                  flush=True)

    # -- concurrent clients

    def start_pool(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.barrier = ctx.Barrier(CLIENTS)
        self.pool = ctx.Pool(CLIENTS, initializer=work.init_worker, initargs=(self.barrier,))

    def concurrent(self, kind: str, target, total: int, extra: dict, seconds: float | None = None):
        """``total`` operations shared by CLIENTS processes; (ops, seconds, [per-client extra])."""
        seconds = self.seconds if seconds is None else seconds
        per = math.ceil(total / CLIENTS)
        specs = [(kind, target, per, seconds, i, extra) for i in range(CLIENTS)]
        try:
            results = self.pool.map_async(work.task, specs, chunksize=1).get(timeout=seconds * 3 + 300)
        except BaseException:
            self.barrier.reset()
            raise
        start = min(r[0] for r in results)
        end = max(r[1] for r in results)
        return sum(r[2] for r in results), end - start, [r[3] for r in results]

    # -- queues and key-value vs Redis

    def section_redis(self) -> None:
        missing = self.missing.get("redis")
        if missing:
            self.notes.append(f"Redis rows skipped on the peer side: {missing}")
        base = self.tmp / "redis-section"
        base.mkdir()
        (base / "redis").mkdir()
        server = redis_server = client = None
        try:
            server = procs.HoardServer(base / "hoard", base / "hoard.log")
            redis_server = None if missing else procs.RedisServer(base / "redis")
            client = hoarddb.connect(server.url + self.client_options)
            db = client["bench"]
            r = redis_server.client() if redis_server else None
            for rnd in range(self.rounds):
                self._redis_durable(rnd, client, db, r)
                self._redis_relaxed(rnd, r)
        finally:
            if client is not None:
                client.close()
            for s in (redis_server, server):
                if s is not None:
                    s.stop()

    def _queue_rows(self, rnd, durability, bar, q, h, kv, r, prefix):
        """Sequential push/pop, heap push/pop, hash insert/get on hoardDB buckets (remote or embedded) and Redis."""
        n, secs = self.n, self.seconds
        st = {}
        key_q, key_z, key_h = f"{prefix}q{rnd}", f"{prefix}z{rnd}", f"{prefix}h{rnd}"

        def h_push():
            ops, t = loop(lambda i: q.push(small_doc(i)), n, secs)
            st["hq"] = ops
            return ops, t

        def r_push():
            ops, t = loop(lambda i: r.lpush(key_q, json.dumps(small_doc(i))), n, secs)
            st["rq"] = ops
            return ops, t

        def h_pop():
            return loop(lambda i: q.pop() is not None, st["hq"], secs)

        def r_pop():
            def one(i):
                raw = r.rpop(key_q)
                return raw is not None and json.loads(raw) is not None
            return loop(one, st["rq"], secs)

        self.pair(rnd, "redis", "push ~190 B, 1 client: fifo push vs LPUSH", durability, bar, h_push, r and r_push)
        self.pair(rnd, "redis", "pop, 1 client: fifo pop vs RPOP", durability, bar, h_pop, r and r_pop)

        def h_hpush():
            ops, t = loop(lambda i: h.push({"priority": i % 100, **small_doc(i)}), n, secs)
            st["hh"] = ops
            return ops, t

        def r_zadd():
            ops, t = loop(lambda i: r.zadd(key_z, {json.dumps(small_doc(i)): i % 100}), n, secs)
            st["rz"] = ops
            return ops, t

        def h_hpop():
            return loop(lambda i: h.pop() is not None, st["hh"], secs)

        def r_zpop():
            def one(i):
                got = r.zpopmax(key_z)
                return bool(got) and json.loads(got[0][0]) is not None
            return loop(one, st["rz"], secs)

        self.pair(rnd, "redis", "priority push, 1 client: heap push vs ZADD", durability, bar, h_hpush, r and r_zadd)
        self.pair(rnd, "redis", "priority pop, 1 client: heap pop vs ZPOPMAX", durability, bar, h_hpop, r and r_zpop)

        def h_insert():
            ops, t = loop(lambda i: kv.insert({"_id_": f"k{i:08d}", **small_doc(i)}), n, secs)
            st["hk"] = ops
            return ops, t

        def r_hset():
            ops, t = loop(lambda i: r.hset(key_h, f"k{i:08d}", json.dumps(small_doc(i))), n, secs)
            st["rk"] = ops
            return ops, t

        def h_get():
            return loop(lambda i: kv.get(f"k{i:08d}") is not None, st["hk"], secs)

        def r_hget():
            return loop(lambda i: json.loads(r.hget(key_h, f"k{i:08d}")) is not None, st["rk"], secs)

        self.pair(rnd, "redis", "key-value insert, 1 client: hash insert vs HSET", durability, bar, h_insert,
                  r and r_hset)
        self.pair(rnd, "redis", "key-value get, 1 client: hash get vs HGET", durability, bar, h_get, r and r_hget)

    def _redis_durable(self, rnd, client, db, r) -> None:
        n, secs = self.n, self.seconds
        if r is not None:
            r.config_set("appendfsync", "always")
        q = db.create_bucket(f"Q{rnd}", type="fifo")
        h = db.create_bucket(f"Heap{rnd}", type="heap")
        kv = db.create_bucket(f"KV{rnd}", type="hash")
        self._queue_rows(rnd, DURABLE_REDIS, 1.0, q, h, kv, r, "d")

        # pipelined 100 deep: hoarddb.client.pipeline sends 100 requests, then reads 100 answers
        st = {}
        pq = f"P{rnd}"
        db.create_bucket(pq, type="fifo")
        def push_reqs(i):
            return [{"op": "push", "db": "bench", "bucket": pq, "args": {"doc": small_doc(i * DEPTH + k)}}
                    for k in range(DEPTH)]

        pop_reqs = [{"op": "pop", "db": "bench", "bucket": pq, "args": {}}] * DEPTH

        def h_ppush():
            def one(i):
                for answer in pipeline(client, push_reqs(i)):
                    if isinstance(answer, Exception):
                        raise answer
            ops, t = loop(one, n // DEPTH, secs, DEPTH)
            st["h"] = ops
            return ops, t

        def h_ppop():
            def one(i):
                for answer in pipeline(client, pop_reqs):
                    if isinstance(answer, Exception):
                        raise answer
            return loop(one, st["h"] // DEPTH, secs, DEPTH)

        key = f"pq{rnd}"

        def r_ppush():
            def one(i):
                p = r.pipeline(transaction=False)
                for k in range(DEPTH):
                    p.lpush(key, json.dumps(small_doc(i * DEPTH + k)))
                p.execute()
            ops, t = loop(one, n // DEPTH, secs, DEPTH)
            st["r"] = ops
            return ops, t

        def r_ppop():
            def one(i):
                p = r.pipeline(transaction=False)
                for _ in range(DEPTH):
                    p.rpop(key)
                for raw in p.execute():
                    json.loads(raw)
            return loop(one, st["r"] // DEPTH, secs, DEPTH)

        self.pair(rnd, "redis", f"push, pipelined {DEPTH} deep: client pipeline vs redis-py pipeline", DURABLE_REDIS,
                  0.7, h_ppush, r and r_ppush)
        self.pair(rnd, "redis", f"pop, pipelined {DEPTH} deep: client pipeline vs redis-py pipeline", DURABLE_REDIS,
                  0.7, h_ppop, r and r_ppop)

        # 16 concurrent clients, one process each
        cq = f"C{rnd}"
        db.create_bucket(cq, type="fifo")
        ckey = f"cq{rnd}"
        h_extra, r_extra = {"db": "bench", "bucket": cq}, {"key": ckey}

        def h_cpush():
            ops, t, _ = self.concurrent("hoard_push", client_url(client), n, h_extra)
            st["hc"] = ops
            return ops, t

        def r_cpush():
            ops, t, _ = self.concurrent("redis_push", r.connection_pool.connection_kwargs["port"], n, r_extra)
            st["rc"] = ops
            return ops, t

        def h_cpop():
            return self.concurrent("hoard_pop", client_url(client), st["hc"], h_extra)[:2]

        def r_cpop():
            return self.concurrent("redis_pop", r.connection_pool.connection_kwargs["port"], st["rc"], r_extra)[:2]

        self.pair(rnd, "redis", f"push, {CLIENTS} clients (processes): fifo push vs LPUSH", DURABLE_REDIS, 1.0,
                  h_cpush, r and r_cpush)
        self.pair(rnd, "redis", f"pop, {CLIENTS} clients (processes): fifo pop vs RPOP", DURABLE_REDIS, 1.0,
                  h_cpop, r and r_cpop)
        for name in (f"Q{rnd}", f"Heap{rnd}", f"KV{rnd}", pq, cq):
            db.drop_bucket(name)
        if r is not None:
            r.flushall()

    def _redis_relaxed(self, rnd, r) -> None:
        path = self.tmp / f"relaxed{rnd}"
        if r is not None:
            r.config_set("appendfsync", "everysec")
        client = hoarddb.open(path, sync=False)
        try:
            db = client["bench"]
            q = db.create_bucket("Q", type="fifo")
            h = db.create_bucket("Heap", type="heap")
            kv = db.create_bucket("KV", type="hash")
            self._queue_rows(rnd, RELAXED_REDIS, None, q, h, kv, r, "r")
        finally:
            client.close()
            shutil.rmtree(path, ignore_errors=True)
            if r is not None:
                r.flushall()
                r.config_set("appendfsync", "always")

    # -- documents vs PostgreSQL

    def section_postgres(self) -> None:
        missing = self.missing.get("postgres")
        if missing:
            self.notes.append(f"PostgreSQL rows skipped on the peer side: {missing}")
        base = self.tmp / "pg-section"
        base.mkdir()
        server = pg = client = conn = None
        try:
            server = procs.HoardServer(base / "hoard", base / "hoard.log")
            client = hoarddb.connect(server.url + self.client_options)
            if not missing:
                import psycopg

                pg = procs.PostgresServer()
                conn = psycopg.connect(pg.dsn, autocommit=True)
            for rnd in range(self.rounds):
                self._documents(rnd, client, conn, pg.dsn if pg else None)
        finally:
            for c in (conn, client):
                if c is not None:
                    c.close()
            for s in (pg, server):
                if s is not None:
                    s.stop()

    def _documents(self, rnd, client, conn, dsn) -> None:
        N, n = self.docs, self.n
        companies = max(1, N // 10)
        db = client["bench"]
        bucket = db.create_bucket(f"Docs{rnd}", type="hash", indices=[{"field": "Email", "unique": True}, "CompanyID"])
        table = f"docs{rnd}"
        cur = None
        if conn is not None:
            cur = conn.cursor()
            cur.execute(f"CREATE TABLE {table} (id text PRIMARY KEY, doc jsonb NOT NULL)")
            cur.execute(f"CREATE UNIQUE INDEX {table}_email ON {table} ((doc->>'Email'))")
            cur.execute(f"CREATE INDEX {table}_company ON {table} ((doc->>'CompanyID'))")
        self._document_rows(rnd, "postgres", DURABLE_PG, bucket, N, companies, sql=cur, pg_table=table,
                                   conn=conn)
        # 16 clients inserting one document per transaction
        extra = {"db": "bench", "bucket": f"Docs{rnd}", "base": 100_000_000, "companies": companies}

        def h_c():
            return self.concurrent("hoard_insert", client_url(client), n, extra)[:2]

        def p_c():
            return self.concurrent("pg_insert", dsn, n, {**extra, "table": table})[:2]

        self.pair(rnd, "postgres", f"insert, {CLIENTS} clients (processes), one document per transaction",
                  DURABLE_PG, 2.0, h_c, cur and p_c)
        db.drop_bucket(f"Docs{rnd}")
        if cur is not None:
            cur.execute(f"DROP TABLE {table}")
            cur.close()

    def _document_rows(self, rnd, section, durability, bucket, N, companies, *, sql=None, pg_table=None,
                       conn=None, lite=None, relaxed_reopen=None) -> None:
        """Batch load, lookups by Email and CompanyID, single inserts, refused duplicates: hoardDB vs PG or SQLite."""
        n, secs = self.n, self.seconds
        rng = random.Random(rnd)
        order = list(range(N))
        rng.shuffle(order)
        comp_order = [rng.randrange(companies) for _ in range(max(1, n // 10))]
        p_batch = p_email = p_company = p_dup = None
        p_single = lambda base: None  # noqa: E731 - no peer: hoardDB only
        if sql is not None:
            from psycopg.types.json import Jsonb
            t = pg_table

            def p_batch():
                def one(b):
                    docs = [user_doc(i, companies) for i in range(b * BATCH, min(N, (b + 1) * BATCH))]
                    with conn.transaction():
                        sql.executemany(f"INSERT INTO {t} (id, doc) VALUES (%s, %s)",
                                        [(d["_id_"], Jsonb(d)) for d in docs])
                ops, took = loop(one, math.ceil(N / BATCH), 10 ** 9, BATCH)
                sql.execute(f"ANALYZE {t}")  # after the timing; what autovacuum would do soon anyway
                return min(ops, N), took

            def p_email():
                def one(k):
                    sql.execute(f"SELECT doc FROM {t} WHERE doc->>'Email' = %s", (email(order[k]),))
                    return sql.fetchone() is not None or _fail("PostgreSQL did not find an email")
                return loop(one, min(n, N), secs)

            def p_company():
                def one(k):
                    sql.execute(f"SELECT doc FROM {t} WHERE doc->>'CompanyID' = %s", (company(comp_order[k]),))
                    return len(sql.fetchall()) >= 1 or _fail("PostgreSQL found no company")
                return loop(one, len(comp_order), secs)

            def p_single(base):
                def run():
                    def one(i):
                        d = user_doc(base + i, companies)
                        sql.execute(f"INSERT INTO {t} (id, doc) VALUES (%s, %s)", (d["_id_"], Jsonb(d)))
                    return loop(one, n, secs)
                return run

            def p_dup():
                import psycopg

                def one(i):
                    d = user_doc(50_000_000 + i, companies)
                    d["Email"] = email(order[i % N])
                    try:
                        sql.execute(f"INSERT INTO {t} (id, doc) VALUES (%s, %s)", (d["_id_"], Jsonb(d)))
                    except psycopg.errors.UniqueViolation:
                        return True
                    _fail("PostgreSQL took a duplicate Email")
                return loop(one, n, secs)
        elif lite is not None:
            def p_batch():
                def one(b):
                    docs = [user_doc(i, companies) for i in range(b * BATCH, min(N, (b + 1) * BATCH))]
                    lite.execute("BEGIN")
                    lite.executemany("INSERT INTO docs (id, doc) VALUES (?, ?)",
                                     [(d["_id_"], json.dumps(d)) for d in docs])
                    lite.execute("COMMIT")
                ops, took = loop(one, math.ceil(N / BATCH), 10 ** 9, BATCH)
                return min(ops, N), took

            def p_email():
                def one(k):
                    row = lite.execute("SELECT doc FROM docs WHERE json_extract(doc, '$.Email') = ?",
                                       (email(order[k]),)).fetchone()
                    return json.loads(row[0]) is not None
                return loop(one, min(n, N), secs)

            def p_company():
                def one(k):
                    rows = lite.execute("SELECT doc FROM docs WHERE json_extract(doc, '$.CompanyID') = ?",
                                        (company(comp_order[k]),)).fetchall()
                    return len([json.loads(r[0]) for r in rows]) >= 1 or _fail("SQLite found no company")
                return loop(one, len(comp_order), secs)

            def p_single(base):
                def run():
                    def one(i):
                        d = user_doc(base + i, companies)
                        lite.execute("INSERT INTO docs (id, doc) VALUES (?, ?)", (d["_id_"], json.dumps(d)))
                    return loop(one, n, secs)
                return run

            def p_dup():
                def one(i):
                    d = user_doc(50_000_000 + i, companies)
                    d["Email"] = email(order[i % N])
                    try:
                        lite.execute("INSERT INTO docs (id, doc) VALUES (?, ?)", (d["_id_"], json.dumps(d)))
                    except sqlite3.IntegrityError:
                        return True
                    _fail("SQLite took a duplicate Email")
                return loop(one, n, secs)

        def h_batch():
            ops, took = loop(lambda b: bucket.batch_insert(
                [user_doc(i, companies) for i in range(b * BATCH, min(N, (b + 1) * BATCH))]),
                math.ceil(N / BATCH), 10 ** 9, BATCH)
            return min(ops, N), took

        def h_email():
            def one(k):
                return len(bucket.search({"Email": email(order[k])})) == 1 or _fail("hoardDB did not find an email")
            return loop(one, min(n, N), secs)

        def h_company():
            def one(k):
                return len(bucket.search({"CompanyID": company(comp_order[k])})) >= 1 or _fail("no company")
            return loop(one, len(comp_order), secs)

        def h_single(base):
            def run():
                return loop(lambda i: bucket.insert(user_doc(base + i, companies)), n, secs)
            return run

        def h_dup():
            def one(i):
                d = user_doc(50_000_000 + i, companies)
                d["Email"] = email(order[i % N])
                try:
                    bucket.insert(d)
                except DuplicateKeyError:
                    return True
                _fail("hoardDB took a duplicate Email")
            return loop(one, n, secs)

        self.pair(rnd, section, f"insert ~1 KB, batches of {BATCH} (load of {N:,})", durability, 1.0, h_batch,
                  p_batch)
        self.pair(rnd, section, "lookup by Email (unique index), 1 client", durability, 1.0, h_email, p_email)
        self.pair(rnd, section, "lookup by CompanyID (10 matches), 1 client", durability, 1.0, h_company,
                  p_company)
        self.pair(rnd, section, "insert ~1 KB, one per transaction, 1 client", durability, 1.0, h_single(10_000_000),
                  p_single(10_000_000))
        self.pair(rnd, section, "refused duplicate insert (unique Email), 1 client", durability,
                  1.0 if section == "postgres" else None, h_dup, p_dup)
        if relaxed_reopen is not None:
            bucket = relaxed_reopen()
            self.pair(rnd, section, "insert ~1 KB, one per transaction, 1 client", RELAXED_SQLITE, 1.0,
                      h_single(20_000_000), p_single(20_000_000))

            def h_batch2():
                return loop(lambda b: bucket.batch_insert(
                    [user_doc(30_000_000 + b * BATCH + k, companies) for k in range(BATCH)]),
                    max(1, n // BATCH), secs, BATCH)

            def p_batch2():
                def one(b):
                    docs = [user_doc(30_000_000 + b * BATCH + k, companies) for k in range(BATCH)]
                    lite.execute("BEGIN")
                    lite.executemany("INSERT INTO docs (id, doc) VALUES (?, ?)",
                                     [(d["_id_"], json.dumps(d)) for d in docs])
                    lite.execute("COMMIT")
                return loop(one, max(1, n // BATCH), secs, BATCH)

            self.pair(rnd, section, f"insert ~1 KB, batches of {BATCH}", RELAXED_SQLITE, 1.0, h_batch2, p_batch2)

    # -- embedded vs SQLite

    def section_sqlite(self) -> None:
        N = self.docs
        companies = max(1, N // 10)
        for rnd in range(self.rounds):
            path = self.tmp / f"embedded{rnd}"
            path.mkdir()
            state = {"client": hoarddb.open(path / "hoard")}
            lite = sqlite3.connect(path / "sqlite.db", isolation_level=None)
            try:
                lite.execute("PRAGMA journal_mode=WAL")
                lite.execute("PRAGMA synchronous=FULL")
                lite.execute("CREATE TABLE docs (id TEXT PRIMARY KEY, doc TEXT NOT NULL)")
                lite.execute("CREATE UNIQUE INDEX docs_email ON docs (json_extract(doc, '$.Email'))")
                lite.execute("CREATE INDEX docs_company ON docs (json_extract(doc, '$.CompanyID'))")
                plan = lite.execute("EXPLAIN QUERY PLAN SELECT doc FROM docs WHERE json_extract(doc, '$.Email') = ?",
                                    ("x",)).fetchall()
                if "docs_email" not in str(plan):
                    self.notes.append(f"SQLite does not use its Email index: {plan}")
                bucket = state["client"]["bench"].create_bucket(
                    "Docs", type="hash", indices=[{"field": "Email", "unique": True}, "CompanyID"])

                def relaxed():
                    state["client"].close()
                    state["client"] = hoarddb.open(path / "hoard", sync=False)
                    lite.execute("PRAGMA synchronous=NORMAL")
                    return state["client"]["bench"].Docs

                self._document_rows(rnd, "sqlite", DURABLE_SQLITE, bucket, N, companies, lite=lite,
                                    relaxed_reopen=relaxed)
            finally:
                state["client"].close()
                lite.close()
                shutil.rmtree(path, ignore_errors=True)

    # -- property-sage

    def section_sage(self) -> None:
        base = self.tmp / "sage"
        base.mkdir()
        props, comps, exps = self.args.properties, max(1, self.args.properties // 10), 10
        t = perf_counter()
        with hoarddb.open(base / "data", sync=False) as c:  # loading is setup, not measured
            work.sage_preload(c["app"], props, comps, exps)
        self.notes.append(f"property-sage: {props:,} properties of {comps:,} companies, each with {exps} expenses "
                          f"(3 copies), 5 tickets, 10 comments, 3 photos; loaded embedded in {perf_counter() - t:.1f} s")
        server = client = None
        try:
            server = procs.HoardServer(base / "data", base / "hoard.log")
            client = hoarddb.connect(server.url + self.client_options)
            extra = {"db": "app", "seed": 1000, "properties": props, "companies": comps, "expenses": exps}
            for rnd in range(self.rounds):
                mix = work.SageMix(client["app"], seed=rnd, worker=100 + rnd, properties=props, companies=comps,
                                   expenses=exps)
                start = perf_counter()
                ops, info = mix.run(self.args.sage_ops, start + self.seconds * 2)
                took = perf_counter() - start
                self._sage_record(rnd, 1, ops, took, [info])
                ops, took, infos = self.concurrent("sage", client_url(client), self.args.sage_ops,
                                                   {**extra, "seed": 1000 * (rnd + 1)}, self.seconds * 2)
                self._sage_record(rnd, CLIENTS, ops, took, infos)
        finally:
            if client is not None:
                client.close()
            if server is not None:
                server.stop()

    def _sage_record(self, rnd, clients, ops, took, infos) -> None:
        lat: dict[str, list[float]] = {}
        calls = 0
        for info in infos:
            calls += info["calls"]
            for kind, values in info["lat"].items():
                lat.setdefault(kind, []).extend(values)
        every = sorted(v for values in lat.values() for v in values)
        self.sage.append({"round": rnd, "clients": clients, "ops": ops, "seconds": took, "calls": calls,
                          "p50": pct(every, 50), "p99": pct(every, 99),
                          "kinds": {k: (len(v), pct(sorted(v), 50), pct(sorted(v), 99)) for k, v in lat.items()}})
        print(f"  round {rnd + 1} sage     {clients:>2} client(s): {ops} ops in {took:.1f} s = {ops / took:,.0f} ops/s, "
              f"p50 {pct(every, 50) * 1000:.2f} ms, p99 {pct(every, 99) * 1000:.2f} ms", flush=True)

    # -- output

    def tables(self, machine: list[str], command: str) -> str:
        out = ["Machine:", ""] + [f"- {line}" for line in machine] + ["", f"Command: `{command}`", ""]
        out.append(f"Medians of {self.rounds} rounds; each side of a workload does n = {self.n:,} operations "
                   f"(document loads: {self.docs:,}) or stops after {self.seconds:g} s, whichever comes first; "
                   "`ops` is what the last round did (hoardDB / peer). Ratio = median over rounds of "
                   "hoardDB ops/s ÷ peer ops/s; bar = the issue's target for that ratio.")
        out.append("")
        peers = {"redis": "Redis", "postgres": "PostgreSQL", "sqlite": "SQLite"}
        titles = {"redis": "Queues and key-value vs Redis (hoardDB over the wire, except relaxed rows: embedded)",
                  "postgres": "Documents vs PostgreSQL (both over loopback TCP)",
                  "sqlite": "Embedded documents vs SQLite (in process)"}
        for section in ("redis", "postgres", "sqlite"):
            rows = [r for r in self.rows.values() if r["section"] == section]
            if not rows:
                continue
            out += [f"#### {titles[section]}", "",
                    f"| workload | durability | ops | hoardDB ops/s | {peers[section]} ops/s | ratio | bar |",
                    "|---|---|---:|---:|---:|---:|---|"]
            for r in rows:
                h = statistics.median(ops / s for ops, s in r["hoard"]) if r["hoard"] else None
                p = statistics.median(ops / s for ops, s in r["peer"]) if r["peer"] else None
                ratio = (statistics.median(a[0] / a[1] / (b[0] / b[1]) for a, b in zip(r["hoard"], r["peer"]))
                         if r["hoard"] and r["peer"] else None)
                ops = f"{r['hoard'][-1][0]:,} / {r['peer'][-1][0]:,}" if r["peer"] else f"{r['hoard'][-1][0]:,} / —"
                if r["bar"] is None:
                    bar = "—"
                elif ratio is None:
                    bar = f"≥ {r['bar']:g}: no peer"
                else:
                    bar = f"≥ {r['bar']:g}: {'met' if ratio >= r['bar'] else '**not met**'}"
                out.append(f"| {r['name']} | {r['durability']} | {ops} | {fmt(h)} | {fmt(p)} | "
                           f"{'—' if ratio is None else f'{ratio:.2f}×'} | {bar} |")
            out.append("")
        if self.sage:
            out += ["#### property-sage on hoardDB (server, durable; no peer)", "",
                    "| clients | ops/s (median) | calls/s | p50 ms | p99 ms |", "|---:|---:|---:|---:|---:|"]
            for clients in sorted({s["clients"] for s in self.sage}):
                runs = [s for s in self.sage if s["clients"] == clients]
                out.append(f"| {clients} | {statistics.median(s['ops'] / s['seconds'] for s in runs):,.0f} | "
                           f"{statistics.median(s['calls'] / s['seconds'] for s in runs):,.0f} | "
                           f"{statistics.median(s['p50'] for s in runs) * 1000:.2f} | "
                           f"{statistics.median(s['p99'] for s in runs) * 1000:.2f} |")
            out += ["", "Per operation (median over rounds of each round's p50 / p99, ms):", "",
                    "| operation | share | " + " | ".join(f"{c} client{'s' if c > 1 else ''} p50 / p99"
                                                          for c in sorted({s['clients'] for s in self.sage})) + " |",
                    "|---|---:|" + "---:|" * len({s["clients"] for s in self.sage})]
            for kind, weight in work.MIX:
                cells = []
                for clients in sorted({s["clients"] for s in self.sage}):
                    runs = [s["kinds"][kind] for s in self.sage if s["clients"] == clients and s["kinds"][kind][0]]
                    cells.append(f"{statistics.median(r[1] for r in runs) * 1000:.2f} / "
                                 f"{statistics.median(r[2] for r in runs) * 1000:.2f}" if runs else "—")
                out.append(f"| {kind} | {weight}% | " + " | ".join(cells) + " |")
            out.append("")
        if self.notes:
            out += ["Notes:", ""] + [f"- {note}" for note in self.notes] + [""]
        return "\n".join(out)

    def dump(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump({"rows": list(self.rows.values()), "sage": self.sage, "notes": self.notes,
                       "args": vars(self.args)}, f, indent=1)


def client_url(client) -> str:
    """The URL of ``client``'s options, for the processes of a concurrent workload."""
    o = client._executor.options
    return f"hoarddb://{o.host}:{o.port}/?insecure=true&busy_poll={o.busy_poll}"


def pct(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, math.ceil(p / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


def fmt(x) -> str:
    return "—" if x is None else f"{x:,.0f}"


def _fail(message: str):
    raise AssertionError(message)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--quick", action="store_true", help="n = 3,000, 2 s per side: a short run")
    parser.add_argument("--n", type=int, help="operations per workload and side (default 100,000)")
    parser.add_argument("--docs", type=int, help="documents loaded for the lookups (default 100,000)")
    parser.add_argument("--seconds", type=float, help="at most this long per side and workload (default 5)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the table shows medians (default 3)")
    parser.add_argument("--properties", type=int, default=1000, help="property-sage properties (default 1,000)")
    parser.add_argument("--sage-ops", type=int, help="property-sage operations per run (default 20,000)")
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections: " + ", ".join(SECTIONS))
    parser.add_argument("--json", help="also write the raw per-round numbers to this file")
    parser.add_argument("--client", default="", metavar="QUERY",
                        help="connection options of hoardDB's clients, as in a URL (busy_poll=0)")
    args = parser.parse_args()
    quick = args.quick
    args.n = args.n or (3_000 if quick else 100_000)
    args.docs = args.docs or (3_000 if quick else 100_000)
    args.seconds = args.seconds or (2.0 if quick else 5.0)
    args.sage_ops = args.sage_ops or (2_000 if quick else 20_000)
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s) {', '.join(sorted(unknown))}; sections: {', '.join(SECTIONS)}")

    bench = Bench(args)
    for peer, advice in bench.missing.items():
        print(f"peer missing: {peer}: {advice}; its rows run on hoardDB only", file=sys.stderr)
    machine = procs.machine(str(bench.tmp))
    command = "python bench/peers.py " + " ".join(sys.argv[1:])
    print("\n".join(machine), flush=True)
    started = perf_counter()
    loads: list[float] = []
    stop_sampling = threading.Event()

    def sample_load():  # other processes on the machine share its 2 cores and its disk: say how busy it was
        while not stop_sampling.wait(5):
            loads.append(os.getloadavg()[0])
    sampler = threading.Thread(target=sample_load, daemon=True)
    sampler.start()
    try:
        if {"redis", "postgres", "sage"} & set(sections):
            bench.start_pool()
        for section in SECTIONS:
            if section in sections:
                print(f"== {section}", flush=True)
                try:
                    getattr(bench, f"section_{section}")()
                except Exception:
                    traceback.print_exc()
                    bench.notes.append(f"section {section} failed: {traceback.format_exc(limit=3).splitlines()[-1]}")
    finally:
        stop_sampling.set()
        if bench.pool is not None:
            bench.pool.terminate()
            bench.pool.join()
        shutil.rmtree(bench.tmp, ignore_errors=True)
    bench.notes.append(f"the whole run took {(perf_counter() - started) / 60:.1f} min; 1-minute load average "
                       f"sampled every 5 s: median {statistics.median(loads or [0]):.1f}, max {max(loads or [0]):.1f} "
                       f"on {os.cpu_count()} cores (the benchmark itself is part of it)")
    if args.json:
        bench.dump(args.json)
    print()
    print(bench.tables(machine, command.strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
