"""Where the CPU of 16 concurrent durable inserts goes, hoardDB against PostgreSQL: the server's, the clients', the whole machine's.

    python bench/cpu_per_insert.py              # 16 processes × 600 inserts of ~1 KB, each side
    python bench/cpu_per_insert.py -n 300
    python bench/cpu_per_insert.py --hoarddb-only --client busy_poll=0   # an A/B of the clients' options

Each side: a server (``hoarddb server --insecure``, or a throwaway PostgreSQL cluster as
in bench/peers.py), a bucket or table with a unique index on Email and a plain one on
CompanyID, and 16 client processes that build their documents, wait at a line on stdin,
insert one document per request (per transaction), and print their own CPU time of the
inserts. Counted over the inserts only: the server's CPU (hoardDB's one process;
PostgreSQL's postmaster and its backends, whose CPU it collects as they exit), the
clients' (``time.process_time``) and the machine's (busy time in ``/proc/stat``). Linux
only. docs/benchmarks.md reads the result: a server that leaves the machine idle is
bound by something other than CPU.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from peers_procs import HoardServer, PostgresServer  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
CLIENTS = 16
_SETUP = f"import sys, time; sys.path[:0] = [{str(HERE.parent)!r}, {str(HERE)!r}]\nfrom peers_work import user_doc\n"
HOARD = _SETUP + """import hoarddb
bucket = hoarddb.connect(sys.argv[1])["bench"]["Docs"]
insert = bucket.insert
"""
POSTGRES = _SETUP + """import psycopg
from psycopg.types.json import Jsonb
cursor = psycopg.connect(sys.argv[1], autocommit=True).cursor()
insert = lambda d: cursor.execute("INSERT INTO docs (id, doc) VALUES (%s, %s)", (d["_id_"], Jsonb(d)))
"""
_RUN = """docs = [user_doc(int(sys.argv[2]) + i, 1000) for i in range(int(sys.argv[3]))]
sys.stdin.readline()
started = time.process_time()
for d in docs:
    insert(d)
print(time.process_time() - started)
"""


def machine_busy() -> float:
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values) - values[3] - values[4]) / TICKS  # all but idle and iowait


def process_cpu(pid: int, children: bool = False) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12]) + ((int(fields[13]) + int(fields[14])) if children else 0)) / TICKS


def tree_cpu(root: int) -> float:
    """A process, the children it has reaped, and those still running."""
    total = process_cpu(root, children=True)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[1] == str(root):
                    total += process_cpu(int(entry.name))
            except OSError:
                pass  # gone meanwhile: its CPU is in the parent's reaped children now
    return total


def run(client: str, target: str, server_cpu, n: int) -> str:
    procs = [subprocess.Popen([sys.executable, "-c", client + _RUN, target, str((k + 1) * 10_000_000), str(n)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for k in range(CLIENTS)]
    time.sleep(3)  # imports, connections, documents built
    server0, machine0, started = server_cpu(), machine_busy(), time.perf_counter()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    clients = sum(float(p.communicate()[0]) for p in procs)
    seconds = time.perf_counter() - started
    ops = CLIENTS * n
    return (f"{ops / seconds:7,.0f} inserts/s   server {(server_cpu() - server0) / ops * 1e6:4.0f} µs CPU/insert   "
            f"clients {clients / ops * 1e6:4.0f}   machine {(machine_busy() - machine0) / ops * 1e6:4.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=600, help="inserts per client process (default 600)")
    ap.add_argument("--client", default="", metavar="QUERY",
                    help="connection options of hoardDB's clients, as in a URL (busy_poll=0)")
    ap.add_argument("--hoarddb-only", action="store_true", help="leave PostgreSQL out")
    args = ap.parse_args()
    n = args.n
    import hoarddb

    tmp = Path(tempfile.mkdtemp(prefix="hoarddb-cpu-"))
    server = HoardServer(tmp / "data", tmp / "server.log")
    try:
        with hoarddb.connect(server.url) as c:
            c["bench"].create_bucket("Docs", type="hash", indices=[{"field": "Email", "unique": True}, "CompanyID"])
        url = server.url + (f"&{args.client}" if args.client else "")
        print("hoardDB    ", run(HOARD, url, lambda: process_cpu(server.pid), n), flush=True)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.hoarddb_only:
        return
    pg = PostgresServer()
    try:
        import psycopg

        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE docs (id text PRIMARY KEY, doc jsonb NOT NULL)")
            conn.execute("CREATE UNIQUE INDEX docs_email ON docs ((doc->>'Email'))")
            conn.execute("CREATE INDEX docs_company ON docs ((doc->>'CompanyID'))")
        postmaster = int((pg.data / "postmaster.pid").read_text().split()[0])
        print("PostgreSQL ", run(POSTGRES, pg.dsn, lambda: tree_cpu(postmaster), n), flush=True)
    finally:
        pg.stop()


if __name__ == "__main__":
    main()
