"""One hoardDB node against two (one per core), 16 client processes, alternating in one run; PostgreSQL and Redis beside them; the cost of a forward.

    python bench/cluster.py                     # 2 rounds of 4 s per workload and configuration
    python bench/cluster.py --seconds 6 --rounds 3 --no-postgres --no-redis

Two clusters run side by side for the whole run, each with its own etcd member: "1 node"
(n1) and "2 nodes" (n1, n2), every node a ``hoarddb server --cluster`` process. The 2 nodes
are measured twice: "2 node(s)", clients with ``route=any`` (each request to the node it
entered by, which forwards what it does not own), and "2 nodes, by owner", clients that
send each keyed request to its partition's owner (the default, hoarddb/client/router.py). Each has a
spread hash bucket ``bench.Docs`` (64 partitions, a plain index on CompanyID) preloaded
with 20,000 documents of ~1 KB (bench/peers_work.user_doc). Each round runs, on one
configuration then the other, for ``--seconds`` each:

- ``insert``: durable inserts of new ~1 KB documents, one per request;
- ``get``:    gets by key of preloaded documents;
- ``search``: a scatter-gather search by the indexed CompanyID (10 documents each);
- ``push`` / ``pop``: a partitioned fifo (``partitions: 8`` with ``group``, one group per
  client) — run only when the server accepts such a bucket (see PARTITIONED_FIFO); otherwise
  said skipped;
- ``push2`` / ``pop2``: the same with ``partitions: 2`` (one partition per node of the 2-node
  cluster);
- ``push1`` / ``pop1`` (not run unless named in ``--workloads``): a whole fifo, one owner and
  one log, as a single server keeps it: what a partitioned queue's path costs beside it;

and PostgreSQL (16 clients, one insert per transaction, a throwaway cluster as in
bench/peers.py) once per round, and Redis (``appendonly yes``, ``appendfsync always``, as in
bench/peers.py: 16 clients, LPUSH of the same small documents into one list, then RPOP) after
the cluster's push and pop. Without redis-server (``apt-get install redis-server``) or the
``redis`` package, or with ``--no-redis``, the Redis rows are said skipped. Each of the 16 client processes connects with a URL listing
every node, starting at a different one (half of them enter through each node). Beside
every figure: the nodes' CPU (seconds of CPU per second: cores used), CPU per operation of
the nodes and of the clients, how busy the machine was (/proc/stat), and each node's group
commits (its /metrics: writes made durable per group, milliseconds syncing per group, and
the share of the time spent syncing). First, the disk the nodes write to: how many
fdatasyncs it takes from one process, from two at once, and in groups of eight files.

Then, on the 2-node cluster, **the cost of a forward**: one client sends gets one at a time
to n1, alternating keys n1 owns and keys n2 owns (latency p50/p99 of each: what a forward
adds), and 16 clients send all their gets (then inserts) to n1 for keys n2 owns, then for
keys n1 owns: n1's CPU per operation is what entering and forwarding costs, n2's what
running a forwarded request costs; then 16 clients given n1's URL alone but routing by
owner (each node's CPU per operation: what a request costs where it runs, nothing forwarded). docs/benchmarks.md records a run and projects 3, 10 and
100 nodes from these figures. Linux only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from peers_procs import HoardServer, PostgresServer, RedisServer  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
CPUS = os.cpu_count() or 1
PARTITIONS = 64
PRELOAD = 20_000
COMPANIES = 2_000
#: The partitioned fifo's declaration: the workloads push and pop run when the server accepts it.
PARTITIONED_FIFO = {"type": "fifo", "partitions": 8, "group": "g"}
#: The same with one partition per node of the 2-node cluster (push2, pop2): each node's group commit syncs one
#: partition's log, as a node would with one log shared by its partitions (docs/benchmarks.md).
FEW_PARTITIONS = {"type": "fifo", "partitions": 2, "group": "g"}

_SETUP = f"import sys, time, json, random; sys.path[:0] = [{str(HERE.parent)!r}, {str(HERE)!r}]\n" + """
from peers_work import user_doc, company, small_doc
url, kind, seconds, index = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
extra = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
rng = random.Random(index)
"""
HOARD = _SETUP + """import hoarddb
from hoarddb.cluster.partitions import partition_of
client = hoarddb.connect(url)
db = client["bench"]
docs, queue = db.Docs, {"2": db.Jobs2, "1": db.Jobs1}.get(kind[-1], db.Jobs)
parts = set(extra["parts"]) if "parts" in extra else None
def fresh():
    i = extra.get("base", 0) + index * 10_000_000
    while True:
        i += 1
        if parts is None or partition_of(f"u{i:09d}", %d) in parts:
            yield user_doc(i, %d)
new = fresh()
keys = extra.get("keys")
def one():
    if kind == "insert":
        docs.insert(next(new))
    elif kind == "get":
        docs.get(rng.choice(keys) if keys else f"u{rng.randrange(%d):09d}")
    elif kind == "search":
        docs.search({"CompanyID": company(rng.randrange(%d))})
    elif kind in ("push", "push2", "push1"):
        queue.push({**small_doc(index), "g": f"g{index}"})
    elif kind in ("pop", "pop2", "pop1"):
        return queue.pop() is not None  # (an empty pop is not counted)
""" % (PARTITIONS, COMPANIES, PRELOAD, COMPANIES)
POSTGRES = _SETUP + """import psycopg
from psycopg.types.json import Jsonb
cursor = psycopg.connect(url, autocommit=True).cursor()
new = (user_doc(i, %d) for i in range(index * 10_000_000 + extra.get("base", 0), 1 << 62))
def one():
    d = next(new)
    cursor.execute("INSERT INTO docs (id, doc) VALUES (%%s, %%s)", (d["_id_"], Jsonb(d)))
""" % COMPANIES
REDIS = _SETUP + """import redis
r = redis.Redis(host="127.0.0.1", port=int(url))
def one():
    if kind == "push":
        r.lpush("jobs", json.dumps({**small_doc(index), "g": f"g{index}"}))
    else:
        raw = r.rpop("jobs")
        if raw is None:
            return False  # (an empty pop is not counted)
        json.loads(raw)
"""
_RUN = """
one()
print("ready", flush=True)
sys.stdin.readline()
lat = []
started = time.process_time()
t0 = time.perf_counter()
end = t0 + seconds
count = 0
while True:
    a = time.perf_counter()
    if a >= end:
        break
    if one() is not False:
        lat.append(time.perf_counter() - a)
        count += 1
print(json.dumps({"ops": count, "cpu": time.process_time() - started, "lat": lat if extra.get("lat") else []}))
"""


def machine_busy() -> float:
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values) - values[3] - values[4]) / TICKS  # all but idle and iowait


def process_cpu(pid: int, children: bool = False) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12]) + ((int(fields[13]) + int(fields[14])) if children else 0)) / TICKS


def tree_cpu(root: int) -> float:
    total = process_cpu(root, children=True)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[1] == str(root):
                    total += process_cpu(int(entry.name))
            except OSError:
                pass
    return total


class Cluster:
    """An etcd member and ``count`` nodes, each a ``hoarddb server --cluster`` process."""

    def __init__(self, tmp: Path, name: str, count: int):
        from hoarddb.cluster.etcd import EtcdProcess

        self.name = name
        self.etcd = EtcdProcess(tmp / name / "etcd").start()
        self.nodes: list[HoardServer] = []
        try:
            for i in range(1, count + 1):
                self.nodes.append(HoardServer(tmp / name / f"n{i}", tmp / name / f"n{i}.log",
                                              ("--cluster", self.etcd.url, "--node-id", f"n{i}",
                                               "--metrics-port", "0")))  # (its group commits: commits())
        except BaseException:
            self.stop()
            raise

    def url(self, first: int = 0, only: int | None = None, route: str = "any") -> str:
        """A URL listing every node from the ``first``-th (or node ``only`` alone); ``route``: "any" sends
        every request to the URL's node, "owner" each keyed one to its partition's owner (client/router.py)."""
        ports = [n.port for n in self.nodes]
        if only is not None:
            ports = [ports[only]]
        else:
            ports = ports[first % len(ports):] + ports[:first % len(ports)]
        return "hoarddb://" + ",".join(f"127.0.0.1:{p}" for p in ports) + f"/?insecure=true&timeout=60&route={route}"

    def cpu(self) -> list[float]:
        return [process_cpu(n.pid) for n in self.nodes]

    def commits(self) -> list[tuple[float, float, float]]:
        """Each node's group commits so far, from its /metrics: (groups, operations made durable, seconds syncing)."""
        out = []
        for n in self.nodes:
            port = re.search(r"metrics http://[\d.]+:(\d+)/metrics", n.child.log_text()).group(1)
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            out.append(tuple(float(re.search(rf"^hoarddb_server_{name} (\S+)", text, re.M).group(1))
                             for name in ("ops_per_fsync_count", "ops_per_fsync_sum", "fsync_seconds_sum")))
        return out

    def owners(self) -> list[str]:
        from hoarddb.cluster.coord import Coordinator

        async def read():
            coord = Coordinator([self.etcd.endpoint], "bench", "")
            await coord.connect()
            try:
                return (await coord.assignment("bench", "Docs"))["owners"]
            finally:
                await coord.close()

        return asyncio.run(read())

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()
        self.etcd.stop()


def clients(script: str, urls: list[str], kind: str, seconds: float, extra: dict | None = None) -> list:
    return [subprocess.Popen([sys.executable, "-c", script + _RUN, url, kind, str(seconds), str(k),
                              json.dumps(extra or {})],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for k, url in enumerate(urls)]


def measure(procs: list, server_cpu, commits=None) -> dict:
    """Start the waiting clients together; the operations, CPU and latencies of the run (and, given ``commits``
    (Cluster.commits), the nodes' group commits: how many, the operations each made durable, the time syncing)."""
    for p in procs:  # each made one operation before saying ready: imports and connections done
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError(f"a client failed: {p.communicate()}")
    groups0 = commits() if commits else None
    cpu0, machine0, started = server_cpu(), machine_busy(), time.perf_counter()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = [json.loads(p.communicate()[0]) for p in procs]
    seconds = time.perf_counter() - started
    cpu1 = server_cpu()
    ops = sum(o["ops"] for o in outs)
    server = [b - a for a, b in zip(cpu0, cpu1)] if isinstance(cpu0, list) else [cpu1 - cpu0]
    groups = [tuple(b - a for a, b in zip(x, y)) for x, y in zip(groups0, commits())] if commits else None
    return {"ops": ops, "rate": ops / seconds, "seconds": seconds, "server_cpu": server, "groups": groups,
            "clients_cpu": sum(o["cpu"] for o in outs), "machine": (machine_busy() - machine0) / seconds / CPUS,
            "lat": sorted(x for o in outs for x in o["lat"])}


def line(label: str, m: dict) -> str:
    ops = max(1, m["ops"])
    cores = sum(m["server_cpu"]) / m["seconds"]
    per_node = "+".join(f"{c / m['seconds']:.2f}" for c in m["server_cpu"])
    text = (f"{label:<26} {m['rate']:8,.0f} ops/s   server {cores:4.2f} CPU ({per_node}) "
            f"{sum(m['server_cpu']) / ops * 1e6:5.0f} µs/op   clients {m['clients_cpu'] / ops * 1e6:5.0f} µs/op   "
            f"machine {m['machine'] * 100:3.0f}% busy")
    groups = [g for g in m.get("groups") or [] if g[0]]
    if groups:  # each node's group commits: writes per group, ms syncing per group, share of the time syncing
        text += "   groups " + "; ".join(f"{g[1] / g[0]:.1f} ops, {g[2] / g[0] * 1e3:.2f} ms sync, "
                                         f"{g[2] / m['seconds'] * 100:.0f}%" for g in groups)
    return text


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def _syncs(path: str, files: int, seconds: float, out) -> None:
    """fdatasyncs of 4 KiB overwrites for ``seconds``, ``files`` files written then synced one after another."""
    fds = []
    for i in range(files):
        fd = os.open(f"{path}.{i}", os.O_RDWR | os.O_CREAT, 0o600)
        os.pwrite(fd, bytes(1 << 20), 0)
        os.fsync(fd)
        fds.append(fd)
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        for fd in fds:
            os.pwrite(fd, os.urandom(4096), (n % 256) * 4096)
            os.fdatasync(fd)
        n += 1
    for i, fd in enumerate(fds):
        os.close(fd)
        os.unlink(f"{path}.{i}")
    out.put(n)


def disk(tmp: Path, seconds: float = 2.0) -> None:
    """How many fdatasyncs the nodes' disk takes: from one process, from two at once (two nodes), and in groups of
    eight files synced one after another (a group commit that wrote eight partitions' logs)."""
    import multiprocessing

    for writers, files, what in ((1, 1, "1 process"), (2, 1, "2 processes at once"), (1, 8, "groups of 8 files")):
        out = multiprocessing.Queue()
        procs = [multiprocessing.Process(target=_syncs, args=(str(tmp / f"sync{k}"), files, seconds, out))
                 for k in range(writers)]
        for p in procs:
            p.start()
        rounds = sum(out.get() for _ in procs)
        for p in procs:
            p.join()
        print(f"  the disk: fdatasync of 4 KiB, {what:<20} {rounds * files / seconds:7,.0f}/s"
              + (f" ({rounds / seconds:,.0f} groups/s)" if files > 1 else ""))


def setup(c: Cluster) -> bool:
    """The bucket, preloaded; whether the partitioned fifo is accepted."""
    import hoarddb
    from peers_work import user_doc

    with hoarddb.connect(c.url()) as client:
        db = client["bench"]
        db.create_bucket("Docs", type="hash", partitions=PARTITIONS, indices=["CompanyID"])
        for start in range(0, PRELOAD, 1000):
            db.Docs.batch_insert([user_doc(i, COMPANIES) for i in range(start, start + 1000)])
        try:
            db.create_bucket("Jobs", **PARTITIONED_FIFO)
            db.create_bucket("Jobs2", **FEW_PARTITIONS)
            db.create_bucket("Jobs1", type="fifo")  # whole: one owner, one log (push1, pop1)
            return True
        except hoarddb.HoardError as e:
            print(f"  ({c.name}: partitioned fifo not accepted here, push and pop skipped: {e.message})")
            return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="seconds per measurement (default 4)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of every workload on each side (default 2)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--workloads", default="insert,get,search,push,pop,push2,pop2",
                    help="which workloads, comma-separated, of insert, get, search, push, pop, push2, pop2, "
                         "push1, pop1 (default: all but push1 and pop1)")
    ap.add_argument("--no-forward", action="store_true", help="leave out the cost of a forward")
    args = ap.parse_args()
    import hoarddb  # noqa: F401  (fails early without the package)

    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.processor() or platform.machine()}, "
          f"{CPUS} CPUs; python {platform.python_version()}; {args.clients} client processes, {args.seconds} s each; "
          f"load average before: {os.getloadavg()[0]:.2f}")
    tmp = Path(tempfile.mkdtemp(prefix="hoarddb-bench-cluster-"))
    disk(tmp)
    one = two = pg = rs = None
    results: dict = {}
    try:
        one, two = Cluster(tmp, "one", 1), Cluster(tmp, "two", 2)
        fifo = {c.name: setup(c) for c in (one, two)}
        if not args.no_postgres:
            pg = PostgresServer()
            import psycopg

            with psycopg.connect(pg.dsn, autocommit=True) as conn:
                conn.execute("CREATE TABLE docs (id text PRIMARY KEY, doc jsonb NOT NULL)")
                conn.execute("CREATE INDEX docs_company ON docs ((doc->>'CompanyID'))")
            postmaster = int((pg.data / "postmaster.pid").read_text().split()[0])
        if not args.no_redis:
            try:
                import redis  # noqa: F401
            except ImportError:
                print("  (Redis rows skipped: pip install redis)")
            else:
                if shutil.which("redis-server") is None:
                    print("  (Redis rows skipped: no redis-server; apt-get install redis-server)")
                else:
                    (tmp / "redis").mkdir()
                    rs = RedisServer(tmp / "redis")
        kinds = args.workloads.split(",")
        # the 2 nodes twice: clients entering through either node (which forwards what it does not own),
        # and clients sending each keyed request to its owner (search and pop go to every owner either way)
        sides = [(one, "any", "one", "1 node(s)"), (two, "any", "two", "2 node(s)"),
                 (two, "owner", "two-owner", "2 nodes, by owner")]
        for r in range(args.rounds):
            for kind in kinds:
                for c, route, name, label in sides:
                    if kind.startswith(("push", "pop")) and not fifo[c.name]:
                        continue
                    urls = [c.url(first=k, route=route) for k in range(args.clients)]
                    m = measure(clients(HOARD, urls, kind, args.seconds,
                                        {"base": (r + 1) * 1_000_000 + (500_000 if route == "owner" else 0)}), c.cpu,
                                c.commits)
                    results.setdefault((kind, name), []).append(m)
                    print(line(f"{kind} {label}", m), flush=True)
                if kind in ("push", "pop") and rs is not None:
                    m = measure(clients(REDIS, [str(rs.port)] * args.clients, kind, args.seconds),
                                lambda: tree_cpu(rs.child.proc.pid))
                    results.setdefault((kind, "redis"), []).append(m)
                    print(line(f"{kind} Redis", m), flush=True)
            if pg is not None and "insert" in kinds:
                m = measure(clients(POSTGRES, [pg.dsn] * args.clients, "insert", args.seconds,
                                    {"base": (r + 1) * 1_000_000}), lambda: tree_cpu(postmaster))
                results.setdefault(("insert", "postgres"), []).append(m)
                print(line("insert PostgreSQL", m), flush=True)
        print()
        for (kind, name), ms in sorted(results.items()):
            print(f"median {kind:<7} {name:<9} {statistics.median(m['rate'] for m in ms):8,.0f} ops/s   "
                  f"server {statistics.median(sum(m['server_cpu']) / m['seconds'] for m in ms):4.2f} CPU   "
                  f"machine {statistics.median(m['machine'] for m in ms) * 100:3.0f}% busy")
        if not args.no_forward:
            forward(two, args)
    finally:
        for thing in (one, two, pg, rs):
            if thing is not None:
                thing.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"load average after: {os.getloadavg()[0]:.2f}")


def forward(c: Cluster, args) -> None:
    """What a forward costs on the 2-node cluster: latency added, and CPU on the entry node and the owner."""
    owners = c.owners()
    mine = [p for p, o in enumerate(owners) if o == "n1"]
    theirs = [p for p, o in enumerate(owners) if o == "n2"]
    from hoarddb.cluster.partitions import partition_of

    keys = {"n1": [], "n2": []}
    for i in range(PRELOAD):
        key = f"u{i:09d}"
        keys[owners[partition_of(key, PARTITIONS)]].append(key)
    print("\nforwarding, on the 2-node cluster (every client connected to n1 only):")
    lat = {}
    for owner in ("n1", "n2", "n1", "n2"):  # one client, one get at a time
        m = measure(clients(HOARD, [c.url(only=0)], "get", args.seconds / 2,
                            {"keys": keys[owner][:5000], "lat": True}), c.cpu)
        lat.setdefault(owner, []).extend(m["lat"])
    for owner in ("n1", "n2"):
        v = sorted(lat[owner])
        print(f"  one client, get of a key {'n1 owns (run on n1)' if owner == 'n1' else 'n2 owns (forwarded)':<24}"
              f" p50 {percentile(v, 0.5) * 1e6:6.0f} µs   p99 {percentile(v, 0.99) * 1e6:6.0f} µs")
    print(f"  a forward adds          p50 {(percentile(sorted(lat['n2']), .5) - percentile(sorted(lat['n1']), .5)) * 1e6:6.0f} µs"
          f"   p99 {(percentile(sorted(lat['n2']), .99) - percentile(sorted(lat['n1']), .99)) * 1e6:6.0f} µs")
    urls = [c.url(only=0)] * args.clients
    for kind in ("get", "insert"):
        for owner, parts in (("n1", mine), ("n2", theirs)):
            extra = {"keys": keys[owner][:5000]} if kind == "get" else {"parts": parts, "base": 9_000_000}
            m = measure(clients(HOARD, urls, kind, args.seconds, extra), c.cpu)
            n1, n2 = (x / max(1, m["ops"]) * 1e6 for x in m["server_cpu"])
            print(line(f"{kind} via n1, {owner}'s keys", m) + f"   n1 {n1:4.0f} µs/op, n2 {n2:4.0f} µs/op")
    urls = [c.url(only=0, route="owner")] * args.clients  # n1's URL, each keyed request sent to its owner
    for kind in ("get", "insert"):
        m = measure(clients(HOARD, urls, kind, args.seconds, {"base": 9_500_000}), c.cpu)
        n1, n2 = (x / max(1, m["ops"]) * 1e6 for x in m["server_cpu"])
        print(line(f"{kind} n1's URL, by owner", m) + f"   n1 {n1:4.0f} µs/op, n2 {n2:4.0f} µs/op")


if __name__ == "__main__":
    main()
