"""Long use, embedded: cycles repeated a few hundred times leave open files, threads, memory and files as they were.

Each test repeats one cycle (open and close, create and drop, put and delete...) and checks
with :func:`assert_steady` what a leak would make grow: the process's open file descriptors
and threads, back at their warm baseline, and the Python memory still allocated
(tracemalloc), under a bound. The short versions run in CI; ``HOARDDB_SLOW=1`` runs the
long ones (thousands of cycles). tests/server/test_leaks.py does the same for the server
and the clients; docs/dev/architecture.md lists what is checked.
"""

from __future__ import annotations

import datetime
import gc
import os
import threading
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

import hoarddb

SLOW = os.environ.get("HOARDDB_SLOW") == "1"
TYPES = ("fifo", "lifo", "hash", "btree", "heap", "blob")
PAST = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
#: Traced memory a part of a run (a third of its cycles) may grow by. Measured: 1-40 KiB a
#: part for every cycle here; once in a while, a cache filling or Python's table of interned
#: strings resized (1-2 MiB), which lands in one part, while a leak grows in every part.
#: Caught from MEMORY / (cycles / PARTS) bytes a cycle: 1.5-4 KiB in the short runs,
#: 150-500 bytes in the long ones.
MEMORY = 96 * 1024
PARTS = 3


def cycles(short: int, long: int):
    """Parametrize ``cycles``: ``short`` in CI, ``long`` with HOARDDB_SLOW=1 (marked slow)."""
    return pytest.mark.parametrize("cycles", [
        pytest.param(short, id="short"),
        pytest.param(long, id="long", marks=[pytest.mark.slow,
                                             pytest.mark.skipif(not SLOW, reason="soak: HOARDDB_SLOW=1")]),
    ])


def open_fds(pid: int | str = "self") -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def threads(pid: int | str = "self") -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def anon_rss(pid: int | str = "self") -> int:
    """Anonymous resident memory, bytes (LMDB's file-backed maps left out)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


@dataclass
class Use:
    """What one moment of a run measured: the process's open fds and threads, the Python memory
    traced (this process's), and anonymous RSS."""

    fds: int
    threads: int
    traced: int
    rss: int


def assert_steady(cycle: Callable[[int], None], cycles: int, *, warmup: int = 10, memory: int = MEMORY,
                  pid: int | str = "self", fds_slack: int = 0, threads_slack: int = 0, rss: int | None = None,
                  settle: float = 10.0, collect: bool = True, what: str = "") -> None:
    """Run ``cycle(i)`` ``warmup`` times, then ``cycles`` times in three parts, and fail if any
    part left more open fds or threads than the warm baseline (plus the slacks), or if traced
    memory grew past ``memory`` bytes in *every* part: a leak grows in each, while what
    happens once (a cache filling, a table resized: tracemalloc counts a table allocated
    since it started, not the older one it replaced) lands in one.

    ``pid`` is the process whose fds, threads and RSS are counted (a server process; memory is
    traced in this one either way). Closes that finish in the background (a server's) get up
    to ``settle`` seconds to bring the counts back. ``rss`` bounds the anonymous RSS growth
    of ``pid`` the same way, where given. One fd or thread more a cycle fails at once.
    Each measure runs a full garbage collection first, unless ``collect`` is False (a caller that
    turned the collector off to see what only it would free).
    """
    for i in range(warmup):
        cycle(i)
    part = max(1, cycles // PARTS)
    tracemalloc.start()
    try:
        base = _measure(pid, collect=collect)
        points = [base]
        for n in range(PARTS):
            for i in range(warmup + n * part, warmup + (n + 1) * part):
                cycle(i)
            points.append(_measure(pid, base, fds_slack, threads_slack, settle, collect))
    finally:
        tracemalloc.stop()
    grew = [_growth(before, after) for before, after in zip(points, points[1:])]

    def each(field, scale=1):
        return "/".join(f"{getattr(g, field) / scale:+.0f}" for g in grew)

    report = (f"{what or getattr(cycle, '__name__', 'cycle')}: {warmup} + {PARTS} x {part} cycles; per part "
              f"fds {each('fds')}, threads {each('threads')}, traced {each('traced', 1024)} KiB, "
              f"anon RSS {each('rss', 1024)} KiB")
    print(report)
    for n, point in enumerate(points[1:], 1):
        assert point.fds <= base.fds + fds_slack, f"open fds {base.fds} -> {point.fds} after part {n}: {report}"
        assert point.threads <= base.threads + threads_slack, \
            f"threads {base.threads} -> {point.threads} after part {n}: {report}"
    assert min(g.traced for g in grew) < memory, \
        f"traced memory grew past {memory // 1024} KiB in every part: {report}"
    if rss is not None:
        assert min(g.rss for g in grew) < rss, f"anonymous RSS grew past {rss >> 20} MiB in every part: {report}"


def _measure(pid, base: Use | None = None, fds_slack: int = 0, threads_slack: int = 0, settle: float = 0,
             collect: bool = True) -> Use:
    deadline = time.monotonic() + settle
    while True:
        if collect:
            gc.collect()
        fds, tasks = open_fds(pid), threads(pid)
        if base is None or (fds <= base.fds + fds_slack and tasks <= base.threads + threads_slack) \
                or time.monotonic() > deadline:
            return Use(fds, tasks, tracemalloc.get_traced_memory()[0], anon_rss(pid))
        time.sleep(0.05)


def _growth(before: Use, after: Use) -> Use:
    return Use(after.fds - before.fds, after.threads - before.threads, after.traced - before.traced,
               after.rss - before.rss)


@pytest.fixture(autouse=True)
def _checkpoint_thread():
    """The one checkpoint thread of the process (storage/kv_checkpoint.py) starts at the first checkpoint
    ever made; started before a test's baseline, it is not counted as the test's."""
    from hoarddb.storage import kv

    kv._CHECKPOINTS.submit(int).result()


def files(path: Path) -> list[str]:
    """Every file under ``path``, relative to it, sorted."""
    return sorted(str(p.relative_to(path)) for p in Path(path).rglob("*") if p.is_file())


# -- the check itself can fail -------------------------------------------------------------------


@pytest.mark.parametrize("leak", ["fd", "thread", "memory"])
def test_the_check_fails_on_a_leak_of_one_a_cycle(leak):
    """A cycle that leaks one fd, one thread or 8 KiB fails assert_steady (so the tests below can)."""
    held: list = []
    stop = threading.Event()

    def cycle(i):
        if leak == "fd":
            held.append(os.open(os.devnull, os.O_RDONLY))
        elif leak == "thread":
            t = threading.Thread(target=stop.wait, daemon=True)
            t.start()
            held.append(t)
        else:
            held.append(bytearray(8 * 1024))

    try:
        with pytest.raises(AssertionError):
            assert_steady(cycle, 60, warmup=2, settle=0.2)
    finally:
        stop.set()
        for item in held:
            if isinstance(item, int):
                os.close(item)
            elif isinstance(item, threading.Thread):
                item.join()


# -- the cycles ----------------------------------------------------------------------------------


def _fill(bucket, type_name: str, n: int = 5) -> None:
    for k in range(n):
        if type_name in ("fifo", "lifo"):
            bucket.push({"n": k})
        elif type_name == "heap":
            bucket.push({"priority": k, "n": k})
        elif type_name in ("hash", "btree"):
            bucket.insert({"_id_": f"k{k}", "n": k})
        else:
            bucket.put(b"x" * 1000)


@cycles(120, 1200)
def test_open_and_close(tmp_path, cycles):
    """Each open starts a TTL sweeper thread and opens every bucket it touches (LMDB
    environments, write-ahead logs, segment and blob index files): close gives all of it back."""
    data = tmp_path / "data"
    with hoarddb.open(data) as c:
        for t in TYPES:
            _fill(c["app"].create_bucket(t.capitalize(), type=t), t)
        c["app"].create_bucket("Ttl", indices=[{"field": "At", "expire_after_seconds": 60}],
                               store_fields=[{"name": "Q", "type": "fifo"}])
    before = files(data)

    def open_and_close(i):
        with hoarddb.open(data) as c:
            for t in TYPES:
                c["app"][t.capitalize()].length()
            c["app"].Ttl.length()

    assert_steady(open_and_close, cycles)
    assert files(data) == before


@cycles(147, 1400)
def test_buckets_created_and_dropped(tmp_path, cycles):
    """Every store type with data, and hash buckets with unique, compound and TTL indexes and
    store fields: dropped, each leaves no file, fd, thread or memory behind."""
    with hoarddb.open(tmp_path / "data") as c:
        db = c["app"]
        db.create_bucket("Keep")  # the database stays
        before = files(tmp_path / "data")

        def create_and_drop(i):
            kind = i % (len(TYPES) + 1)
            if kind < len(TYPES):
                t = TYPES[kind]
                _fill(db.create_bucket("B", type=t), t)
            else:
                b = db.create_bucket("B", indices=[{"field": "Email", "unique": True}, {"fields": ["A", "Z"]},
                                                   {"field": "At", "expire_after_seconds": 60}],
                                     store_fields=[{"name": "Log", "type": "fifo"}, {"name": "Doc", "type": "blob"}])
                for k in range(5):
                    b.insert({"_id_": f"k{k}", "Email": f"e{k}", "A": k, "Z": -k, "At": PAST})
                    b[f"k{k}"].Log.push({"k": k})
                    b[f"k{k}"].Doc.put(b"y" * 500)
                assert b.search({"Email": "e1"})[0]["A"] == 1
                assert len(b.find({"A": 2, "Z": -2})) == 1
            db.drop_bucket("B")

        assert_steady(create_and_drop, cycles, warmup=len(TYPES) + 1)
        assert files(tmp_path / "data") == before


@cycles(150, 2100)
def test_documents_with_store_fields_created_and_deleted(tmp_path, cycles):
    """A document owning a store of every type, filled, then deleted: its elements and its
    blob field's file go with it."""
    with hoarddb.open(tmp_path / "data", sync=False) as c:  # (relaxed: the stores written are tracked for a sync)
        props = c["app"].create_bucket("P", store_fields=[{"name": t.capitalize(), "type": t} for t in TYPES])
        props.insert({"_id_": "warm"})
        props["warm"].Blob.delete(props["warm"].Blob.put(b"w"))  # the blob field's folder exists from here on
        before = files(tmp_path / "data/app/P")

        def create_and_delete(i):
            props.insert({"_id_": f"p{i}"})
            d = props[f"p{i}"]
            d.Fifo.push({"x": 1})
            d.Lifo.push({"x": 1})
            d.Heap.push({"priority": 1})
            d.Hash.put("a", {"x": 1})
            d.Btree.put("a", {"x": 1})
            blob = d.Blob.put(b"y" * 3000)
            assert b"".join(d.Blob.stream(blob, chunk_size=1000)) == b"y" * 3000
            props.delete(f"p{i}")

        assert_steady(create_and_delete, cycles)
        assert files(tmp_path / "data/app/P") == before


@cycles(210, 3000)
def test_blobs_put_streamed_and_deleted(tmp_path, cycles):
    with hoarddb.open(tmp_path / "data") as c:
        blobs = c["app"].create_bucket("B", type="blob")

        def put_stream_delete(i):
            blob = blobs.put(os.urandom(5000))
            assert sum(len(chunk) for chunk in blobs.stream(blob, chunk_size=1000)) == 5000
            blobs.delete(blob)

        assert_steady(put_stream_delete, cycles)
        assert files(tmp_path / "data/app/B") == ["_index.bson"]


@cycles(210, 3000)
def test_streams_and_cursors_abandoned_halfway(tmp_path, cycles):
    """A stream read halfway, or never, then dropped (garbage-collected), and export pages
    never followed: nothing of them stays open."""
    with hoarddb.open(tmp_path / "data") as c:
        blobs = c["app"].create_bucket("B", type="blob")
        blob = blobs.put(os.urandom(50_000))
        docs = c["app"].create_bucket("P", store_fields=[{"name": "File", "type": "blob"}])
        docs.insert({"_id_": "p"})
        field_blob = docs["p"].File.put(os.urandom(50_000))
        docs.batch_insert([{"_id_": f"d{k}"} for k in range(300)])

        def abandon(i):
            stream = blobs.stream(blob, chunk_size=1000)
            next(stream)
            del stream
            stream = docs["p"].File.stream(field_blob, chunk_size=1000)
            next(stream)
            del stream
            blobs.stream(blob)  # never started
            page = docs.export(limit=50)
            docs.export(cursor=page["next"], limit=50)

        assert_steady(abandon, cycles)


@cycles(99, 1200)
def test_ttl_sweeper_over_buckets_created_and_dropped(tmp_path, cycles):
    """The background sweeper (every 10 ms) and explicit sweeps visit TTL buckets that come and
    go: what it opens of a bucket is closed with the drop."""
    with hoarddb.open(tmp_path / "data", ttl_sweep_seconds=0.01) as c:
        db = c["app"]
        db.create_bucket("Keep")
        before = files(tmp_path / "data")

        def create_sweep_drop(i):
            b = db.create_bucket("T", indices=[{"field": "At", "expire_after_seconds": 0}],
                                 store_fields=[{"name": "Q", "type": "lifo"}])
            for k in range(5):
                b.insert({"_id_": f"k{k}", "At": PAST})
                try:
                    b[f"k{k}"].Q.push({"k": k})
                except hoarddb.errors.NotFoundError:
                    pass  # the background sweeper took the document first
            c.sweep_ttl()
            assert b.length() == 0
            db.drop_bucket("T")

        assert_steady(create_sweep_drop, cycles)
        assert files(tmp_path / "data") == before
