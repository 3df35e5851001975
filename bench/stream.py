"""A find streaming every document of a big bucket through a hoardDB server, beside SQLite's JSON and PostgreSQL's JSONB.

    python bench/stream.py                  # 1,000,000 documents of ~250 bytes
    python bench/stream.py --n 100000       # a quicker run
    python bench/stream.py --only hoard     # sides: hoard, sqlite, postgres

Each side reads every document into a Python dict, one at a time, in a process of its
own whose peak RSS (VmHWM; not ``ru_maxrss``, which keeps the peak of the process it was
forked from) is measured, after the same documents were loaded:

- hoardDB: a server (``hoarddb server --insecure``, its own process) on a data directory
  loaded beforehand (embedded, ``sync=False``, then closed); the client iterates
  ``bucket.find({})`` (a cursor: 101 documents, then batches of about 1 MiB). The
  server's peak RSS is its VmHWM (/proc), read after the stream, with its RSS before the
  stream; that counts the pages of the LMDB file it has mapped and read, so the table
  also gives the peak of its own memory (RssAnon, sampled every 20 ms).
- SQLite: ``SELECT doc FROM docs`` over a WAL database file, each row ``json.loads``-ed
  (in process: client and "server" are one).
- PostgreSQL: a throwaway cluster (bench/peers_procs.py), ``SELECT doc FROM docs`` through
  a server-side cursor (psycopg's named cursor, 2,000 rows a fetch), JSONB decoded by
  psycopg; the server side's RSS is the backend's VmHWM (it counts the shared buffers it
  touched), and its own memory RssAnon.

The rate is documents per second of the stream alone (not the load); one run, no rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(REPO))

import hoarddb  # noqa: E402

import peers_procs as procs  # noqa: E402


def doc(i: int) -> dict:
    """A document of about 250 bytes of BSON."""
    return {"_id_": i, "Name": f"user {i}", "Email": f"user{i}@example.com", "CompanyID": f"c{i % 1000:04d}",
            "Score": (i * 7919) % 1000, "Active": i % 3 != 0, "Tags": ["alpha", "beta"][: 1 + i % 2],
            "Bio": "lorem ipsum dolor sit amet " * 4}


def rss_kb(pid: int, field: str) -> int:
    """A /proc/<pid>/status field in kB: VmRSS (now), VmHWM (its peak), RssAnon (the heap's share)."""
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Peak(threading.Thread):
    """The highest RssAnon (memory of the process's own: heap, not mapped files or shared
    buffers) of a process, sampled every 20 ms while the stream runs."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.kb, self.done = pid, 0, threading.Event()
        self.start()

    def run(self) -> None:
        while not self.done.wait(0.02):
            self.kb = max(self.kb, rss_kb(self.pid, "RssAnon"))

    def stop(self) -> int:
        self.done.set()
        self.join()
        return max(self.kb, rss_kb(self.pid, "RssAnon"))


# -- the readers, each run as a child process (``--child SIDE ...``) --------------------------

def child(side: str, target: str, server_pid: str = "0") -> dict:
    before = rss_kb(os.getpid(), "VmRSS")
    n = 0
    extra = {}
    mine = Peak(os.getpid())
    start = time.perf_counter()
    if side == "hoard":
        server = Peak(int(server_pid))
        extra["server_anon_before_kb"] = rss_kb(int(server_pid), "RssAnon")
        client = hoarddb.connect(target)
        for d in client["bench"].Docs.find({}):
            n += 1
        client.close()
        extra["server_anon_peak_kb"] = server.stop()
    elif side == "sqlite":
        conn = sqlite3.connect(target)
        for (text,) in conn.execute("SELECT doc FROM docs"):
            json.loads(text)
            n += 1
        conn.close()
    elif side == "postgres":
        import psycopg

        with psycopg.connect(target) as conn:
            backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            extra["server_rss_before_kb"] = rss_kb(backend, "VmRSS")
            extra["server_anon_before_kb"] = rss_kb(backend, "RssAnon")
            server = Peak(backend)
            with conn.cursor(name="stream") as cur:
                cur.itersize = 2000
                cur.execute("SELECT doc FROM docs")
                for (d,) in cur:
                    n += 1
            extra["server_peak_kb"] = rss_kb(backend, "VmHWM")
            extra["server_anon_peak_kb"] = server.stop()
    took = time.perf_counter() - start
    return {"n": n, "seconds": took, "client_rss_before_kb": before, "client_anon_peak_kb": mine.stop(),
            "client_peak_kb": rss_kb(os.getpid(), "VmHWM"), **extra}


def run_child(side: str, target: str, server_pid: int = 0) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", side, target, str(server_pid)],
                         capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), check=False)
    if out.returncode != 0:
        raise RuntimeError(f"the {side} reader failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- the sides ----------------------------------------------------------------------------------

def side_hoard(tmp: Path, n: int) -> dict:
    data = tmp / "hoard"
    start = time.perf_counter()
    with hoarddb.open(data, sync=False) as client:
        bucket = client["bench"].create_bucket("Docs")
        for at in range(0, n, 5000):
            bucket.batch_insert([doc(i) for i in range(at, min(at + 5000, n))])
    loaded = time.perf_counter() - start
    server = procs.HoardServer(data, tmp / "hoard.log")
    try:
        time.sleep(0.5)
        server_before = rss_kb(server.pid, "VmRSS")
        result = run_child("hoard", server.url, server.pid)
        result["server_peak_kb"] = rss_kb(server.pid, "VmHWM")
        result["server_rss_before_kb"] = server_before
    finally:
        server.stop()
    result["load_seconds"] = loaded
    return result


def side_sqlite(tmp: Path, n: int) -> dict:
    path = tmp / "stream.sqlite"
    start = time.perf_counter()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE docs (id INTEGER PRIMARY KEY, doc TEXT NOT NULL)")
    for at in range(0, n, 5000):
        conn.executemany("INSERT INTO docs VALUES (?, ?)",
                         [(i, json.dumps(doc(i))) for i in range(at, min(at + 5000, n))])
        conn.commit()
    conn.close()
    loaded = time.perf_counter() - start
    result = run_child("sqlite", str(path))
    result["load_seconds"] = loaded
    return result


def side_postgres(tmp: Path, n: int) -> dict:
    import psycopg

    pg = procs.PostgresServer()
    try:
        start = time.perf_counter()
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE docs (id bigint PRIMARY KEY, doc jsonb NOT NULL)")
            with conn.cursor() as cur, cur.copy("COPY docs (id, doc) FROM STDIN") as copy:
                for i in range(n):
                    copy.write_row((i, json.dumps(doc(i))))
            conn.execute("VACUUM ANALYZE docs")
        loaded = time.perf_counter() - start
        result = run_child("postgres", pg.dsn)
        result["load_seconds"] = loaded
    finally:
        pg.stop()
    return result


def mib(kb: int | None) -> str:
    return "—" if kb is None else f"{kb / 1024:.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--only", default="hoard,sqlite,postgres")
    parser.add_argument("--child", nargs=3, metavar=("SIDE", "TARGET", "SERVER_PID"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    tmp = Path(tempfile.mkdtemp(prefix="hoarddb-stream-"))
    rows = {}
    try:
        for side in args.only.split(","):
            if side == "postgres" and procs.missing_peers().get("postgres"):
                print(f"postgres skipped: {procs.missing_peers()['postgres']}", file=sys.stderr)
                continue
            rows[side] = {"hoard": side_hoard, "sqlite": side_sqlite, "postgres": side_postgres}[side](tmp, args.n)
            print(side, json.dumps(rows[side]), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    names = {"hoard": "hoardDB server, find() cursor", "sqlite": "SQLite JSON, SELECT (in process)",
             "postgres": "PostgreSQL JSONB, server-side cursor"}
    print(f"{args.n:,} documents of ~250 bytes; {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d', time.gmtime())}\n")
    print(f"load average before the run: {load}\n")
    print("| side | docs/s | stream s | client peak RSS (own memory), MiB | server RSS before → peak "
          "(own memory before → peak), MiB |")
    print("|---|---:|---:|---:|---:|")
    for side, r in rows.items():
        server = (f"{mib(r.get('server_rss_before_kb'))} → {mib(r.get('server_peak_kb'))} "
                  f"({mib(r.get('server_anon_before_kb'))} → {mib(r.get('server_anon_peak_kb'))})"
                  if "server_peak_kb" in r else "(in the client)")
        print(f"| {names[side]} | {r['n'] / r['seconds']:,.0f} | {r['seconds']:.1f} | "
              f"{mib(r['client_peak_kb'])} ({mib(r['client_anon_peak_kb'])}) | {server} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
