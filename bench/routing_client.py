"""One client process's own CPU (time.process_time) per get and per insert, one at a time, routing by owner on a 2-node cluster against route=any and a single server, busy_poll=0 in all three.

    python bench/routing_client.py                        # 3 rounds of 3 s per operation and configuration
    python bench/routing_client.py --seconds 5 --rounds 5
    python bench/routing_client.py --one owner-get        # one alone: user and system CPU, context switches
    python bench/routing_client.py --profile owner-get    # cProfile (CPU time) of one, top 25
    python bench/routing_client.py --calls 2000           # Python calls per operation (a count: no noise)
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import pstats
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import hoarddb  # noqa: E402
from cluster import Cluster  # noqa: E402
from peers_procs import HoardServer  # noqa: E402
from peers_work import user_doc  # noqa: E402

PARTITIONS = 64
PRELOAD = 2_000
COMPANIES = 200
KINDS = ("get", "insert")


def prepare(url: str, partitions: int | None) -> None:
    with hoarddb.connect(url) as client:
        db = client["bench"]
        db.create_bucket("Docs", type="hash", **({"partitions": partitions} if partitions else {}))
        for start in range(0, PRELOAD, 500):
            db.Docs.batch_insert([user_doc(i, COMPANIES) for i in range(start, start + 500)])


def operation(client, kind: str, fresh):
    """One ``kind`` a call: a get of a preloaded document at random, or an insert of a new one."""
    docs = client["bench"].Docs
    rng = random.Random(7)
    if kind == "get":
        return lambda: docs.get(f"u{rng.randrange(PRELOAD):09d}")
    return lambda: docs.insert(user_doc(next(fresh), COMPANIES))


def run(client, kind: str, seconds: float, fresh) -> tuple[int, float, float]:
    """(operations, CPU seconds of this process, seconds) of ``seconds`` of ``kind`` one at a time."""
    one = operation(client, kind, fresh)
    for _ in range(50):  # warm: connections to every owner opened, the map read
        one()
    count, cpu0, started = 0, time.process_time(), time.perf_counter()
    end = started + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            one()
        count += 20
    return count, time.process_time() - cpu0, time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds of each operation per configuration and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", metavar="CONFIG-KIND", help="cProfile one (single|any|owner)-(get|insert) instead")
    ap.add_argument("--one", metavar="CONFIG-KIND", help="run one (single|any|owner)-(get|insert) alone: CPU (user, "
                    "system), context switches per operation")
    ap.add_argument("--calls", type=int, metavar="N", help="count the Python calls (cProfile's) of N operations of "
                    "each kind and configuration instead")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="hoarddb-routing-"))
    single = cluster = None
    try:
        single = HoardServer(tmp / "single", tmp / "single.log")
        cluster = Cluster(tmp, "two", 2)
        prepare(single.url, None)
        prepare(cluster.url(), PARTITIONS)
        urls = {"single": single.url + "&busy_poll=0",
                "any": cluster.url(only=0, route="any") + "&busy_poll=0",
                "owner": cluster.url(only=0, route="owner") + "&busy_poll=0"}
        clients = {name: hoarddb.connect(url) for name, url in urls.items()}
        fresh = itertools.count(10_000_000)
        if args.profile:
            name, kind = args.profile.split("-")
            profile = cProfile.Profile(time.process_time)  # CPU, not waiting
            profile.enable()
            count, _, _ = run(clients[name], kind, args.seconds, fresh)
            profile.disable()
            print(f"{count} {kind}s, {name}")
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)
            return
        if args.calls:
            print(f"Python calls per operation ({args.calls:,} of each, after 50 unprofiled)")
            for name in urls:
                counts = []
                for kind in KINDS:
                    one = operation(clients[name], kind, fresh)
                    for _ in range(50):
                        one()
                    profile = cProfile.Profile()
                    profile.enable()
                    for _ in range(args.calls):
                        one()
                    profile.disable()
                    calls = sum(entry.callcount for entry in profile.getstats())
                    counts.append(f"{kind} {calls / args.calls:.1f}")
                print(f"{name:8}" + "   ".join(counts))
            return
        if args.one:
            name, kind = args.one.split("-")
            before = resource.getrusage(resource.RUSAGE_SELF)
            count, cpu, wall = run(clients[name], kind, args.seconds, fresh)
            after = resource.getrusage(resource.RUSAGE_SELF)
            print(f"{name} {kind}: {count} in {wall:.1f} s; per operation: {cpu / count * 1e6:.0f} µs of CPU "
                  f"(user {(after.ru_utime - before.ru_utime) / count * 1e6:.0f}, "
                  f"system {(after.ru_stime - before.ru_stime) / count * 1e6:.0f}), "
                  f"{(after.ru_nvcsw - before.ru_nvcsw) / count:.2f} voluntary and "
                  f"{(after.ru_nivcsw - before.ru_nivcsw) / count:.2f} involuntary context switches")
            return
        figures: dict[tuple[str, str], list[float]] = {}
        walls: dict[tuple[str, str], list[float]] = {}
        for r in range(args.rounds):
            for kind in KINDS:
                for name in (urls if r % 2 == 0 else reversed(list(urls))):
                    count, cpu, wall = run(clients[name], kind, args.seconds, fresh)
                    figures.setdefault((name, kind), []).append(cpu / count * 1e6)
                    walls.setdefault((name, kind), []).append(wall / count * 1e6)
        print(f"client CPU per operation, µs: median (lowest–highest) of {args.rounds} rounds of {args.seconds:g} s; "
              "busy_poll=0; [µs of wall time per operation]")
        print(f"{'':8}" + "".join(f"{k:>30}" for k in KINDS))
        for name in urls:
            print(f"{name:8}" + "".join(
                f"{statistics.median(figures[name, k]):.0f} ({min(figures[name, k]):.0f}–{max(figures[name, k]):.0f}) "
                f"[{statistics.median(walls[name, k]):.0f}]".rjust(30) for k in KINDS))
        for c in clients.values():
            c.close()
    finally:
        if cluster is not None:
            cluster.stop()
        if single is not None:
            single.stop()
        time.sleep(0.2)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
