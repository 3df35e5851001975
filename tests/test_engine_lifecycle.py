"""The embedded database's life cycle: a client forgotten without close(), a process that
exits without it, use after close, close twice or under running calls, opens racing
each other, and os.fork() after an open.

What is promised is in docs/user/python-api.md ("Closing, threads and processes"); how
it is done in docs/dev/architecture.md ("Life cycle of an embedded database").
"""

from __future__ import annotations

import datetime
import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
import weakref

import pytest

import hoarddb
from hoarddb import errors, operations
from hoarddb.storage.blobfiles import CLOSED_NAME
from hoarddb.storage.segment import closed_cleanly
from hoarddb.storage.wal import newest_header

TYPES = ("fifo", "lifo", "hash", "btree", "heap", "blob")


def sweeper_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "hoarddb-ttl-sweeper"]


def run_child(code: str, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in a new Python process (with this checkout on its path)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env)


# -- a client forgotten without close() ---------------------------------------------------------


def test_a_client_dropped_without_close_is_closed_with_a_resource_warning_and_the_directory_opens_again(tmp_path):
    """Regression: the TTL sweeper's thread held the engine, so a dropped client was never
    freed and the next open in the process said the directory was open already."""
    before = len(sweeper_threads())
    c = hoarddb.open(tmp_path / "data", ttl_sweep_seconds=60)
    c["app"].create_bucket("H", type="hash").insert({"_id_": 1})
    c["app"].create_bucket("Q", type="fifo").push({"n": 1})
    assert len(sweeper_threads()) == before + 1
    gc_was = gc.isenabled()
    gc.disable()  # freed when the last reference goes, not at the next collection
    try:
        with pytest.warns(ResourceWarning, match="never closed"):
            del c
        again = hoarddb.open(tmp_path / "data")
    finally:
        if gc_was:
            gc.enable()
    with again:
        assert again["app"].H.get(1) == {"_id_": 1}
        assert again["app"].Q.pop() == {"n": 1}
    deadline = time.monotonic() + 10
    while len(sweeper_threads()) > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(sweeper_threads()) == before  # the forgotten engine's sweeper ended


def test_handles_keep_the_database_open_and_the_last_one_dropped_closes_it(tmp_path):
    c = hoarddb.open(tmp_path / "data")
    bucket = c["app"].create_bucket("H", type="hash")
    del c
    bucket.insert({"_id_": 1})  # the bucket's handle holds its client: still open
    with pytest.warns(ResourceWarning):
        del bucket
        gc.collect()
    with hoarddb.open(tmp_path / "data") as again:
        assert again["app"].H.get(1) == {"_id_": 1}


def test_a_client_in_a_reference_cycle_is_closed_by_the_garbage_collector(tmp_path):
    c = hoarddb.open(tmp_path / "data")
    c["app"].create_bucket("H", type="hash").insert({"_id_": 1})
    holder: dict = {"client": c}
    holder["self"] = holder  # a cycle: only the collector frees it
    del c, holder
    with pytest.warns(ResourceWarning):
        gc.collect()
    with hoarddb.open(tmp_path / "data") as again:
        assert again["app"].H.length() == 1


def test_an_engine_freed_on_its_sweeper_thread_is_closed_there_without_a_deadlock(tmp_path):
    """A pass holds the engine: when the user's last reference goes during one, the
    engine is freed on the sweeper's thread as the pass ends, and closed from there."""
    c = hoarddb.open(tmp_path / "data", ttl_sweep_seconds=0.001)
    b = c["app"].create_bucket("T", type="hash", indices=[{"fields": ["at"], "expire_after_seconds": 3600}])
    now = datetime.datetime.now(datetime.timezone.utc)
    b.batch_put([{"_id_": i, "at": now} for i in range(200)])  # none expires for an hour
    ref = weakref.ref(c._executor)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        for _ in range(50):  # some of these drops land during a pass
            del b, c
            deadline = time.monotonic() + 30
            while ref() is not None and time.monotonic() < deadline:
                time.sleep(0.001)
            assert ref() is None, "the engine was never freed"
            c = hoarddb.open(tmp_path / "data", ttl_sweep_seconds=0.001)  # (waits for a close under way)
            b = c["app"].T  # a bucket held too, dropped with its client at the loop's top
            ref = weakref.ref(c._executor)
        del b
        c.close()
    with hoarddb.open(tmp_path / "data") as again:
        assert again["app"].T.length() == 200


def test_an_open_waits_for_a_forgotten_engine_whose_finalizer_has_not_begun_to_close_it(tmp_path, monkeypatch):
    """A freed engine's weak references are cleared before its finalizer runs, and on one of
    hoardDB's threads the finalizer warns before it hands the close to a thread of its own:
    an open in between was refused as "open already" (seen under load in the test above)."""
    c = hoarddb.open(tmp_path / "data")
    c["app"].create_bucket("H").put({"_id_": 1})
    ref = weakref.ref(c._executor)
    warning = threading.Event()

    def slow_warning(*args, **kwargs):  # the finalizer's warning, and the moment after it
        warning.set()
        time.sleep(0.5)

    monkeypatch.setattr(warnings, "warn", slow_warning)
    holder = [c]
    del c
    dropper = threading.Thread(target=holder.clear, name="hoarddb-test-dropper")  # the last reference goes there
    dropper.start()
    assert warning.wait(10)
    assert ref() is None
    with hoarddb.open(tmp_path / "data") as again:
        assert again["app"].H.get(1) == {"_id_": 1}
    dropper.join(10)


def test_clients_forgotten_again_and_again_leave_no_descriptor_or_thread_behind(tmp_path):
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    def cycle():
        c = hoarddb.open(tmp_path / "data", ttl_sweep_seconds=0.01)
        db = c["app"]
        existing = db.buckets() if "app" in c.databases() else []
        for kind in TYPES:
            if kind not in existing:
                db.create_bucket(kind, type=kind, **({"key": "k"} if kind == "btree" else {}))
        db["fifo"].push({"n": 1})
        db["hash"].put({"_id_": 1})

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        cycle()
        before_fds, before_threads = fds(), threading.active_count()
        for _ in range(20):
            cycle()
    assert fds() == before_fds
    deadline = time.monotonic() + 10
    while threading.active_count() > before_threads and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() == before_threads


EXIT_WITHOUT_CLOSE = """
    import sys, hoarddb
    how = sys.argv[2]
    c = hoarddb.open(sys.argv[1])
    db = c["app"]
    h = db.create_bucket("H", type="hash", indices=[{"fields": ["email"], "unique": True}],
                         store_fields=[{"name": "Log", "type": "fifo"}])
    for i in range(300):
        h.insert({"_id_": i, "email": f"u{i}@x"})
        h[i].Log.push({"n": i})
    db.create_bucket("B", type="btree", key="k").batch_insert([{"k": i} for i in range(300)])
    db.create_bucket("P", type="heap").batch_push([{"priority": i} for i in range(300)])
    db.create_bucket("Q", type="fifo").batch_push([{"n": i} for i in range(300)])
    db.create_bucket("L", type="lifo").batch_push([{"n": i} for i in range(300)])
    db.create_bucket("F", type="blob").put(b"x" * 100_000, name="f")
    print("written", flush=True)
    if how == "raise":
        raise SystemExit(3)
    if how == "error":
        raise RuntimeError("the program failed")
    """


@pytest.mark.parametrize("how", ["return", "raise", "error"])
def test_a_process_that_exits_without_close_leaves_a_database_that_opens_without_recovery(tmp_path, how):
    data = tmp_path / "data"
    out = run_child(EXIT_WITHOUT_CLOSE, data, how)
    assert "written" in out.stdout, out.stderr
    assert "Traceback" not in out.stderr or how == "error", out.stderr
    # closed cleanly at exit: every LMDB log says so (nothing to replay), and so do the
    # queues' state and the blob bucket's mark
    for kv in [data / "catalog", *(data / "app").glob("*/kv")]:
        header = newest_header(kv)
        assert header is not None and header[1], f"{kv} was not closed cleanly"
    assert closed_cleanly(data / "app" / "Q") and closed_cleanly(data / "app" / "L")
    assert (data / "app" / "F" / CLOSED_NAME).exists()
    with hoarddb.open(data) as c:
        db = c["app"]
        assert db.H.length() == 300 and db.H[7].Log.length() == 1
        assert db.H.search({"email": "u5@x"}) == [{"_id_": 5, "email": "u5@x"}]
        assert db.B.length() == db.P.length() == db.Q.length() == db.L.length() == 300
        assert db.P.pop() == {"priority": 299}
        assert db.F.length() == 1


# -- use after close ------------------------------------------------------------------------------

SAMPLE = {
    "doc": {"_id_": 1, "k": 1, "priority": 1},
    "docs": [{"_id_": 2, "k": 2, "priority": 2}],
    "filter": {},
    "update": {"$set": {"a": 1}},
    "int": 1,
    "any": 1,
    "data": b"x",
    "str": "x",
}


def sample_args(op: operations.Operation) -> list:
    return [SAMPLE[p.kind] for p in op.params if p.required]


@pytest.fixture
def closed(tmp_path):
    """A closed client, the handles taken before it closed, and what they had read."""
    c = hoarddb.open(tmp_path / "data")
    db = c["app"]
    for kind in TYPES:
        opts = {"key": "k"} if kind == "btree" else {}
        if kind in ("hash", "btree"):
            opts["store_fields"] = [{"name": t.capitalize(), "type": t} for t in TYPES]
        db.create_bucket(kind.capitalize(), type=kind, **opts)
    db.Hash.insert({"_id_": "d"})
    db.Btree.insert({"k": "d"})
    blob = db.Blob.put(b"y" * 300_000)
    field_blob = db.Hash["d"].Blob.put(b"z" * 300_000)
    streams = [db.Blob.stream(blob, chunk_size=1000), db.Hash["d"].Blob.stream(field_blob, chunk_size=1000)]
    next(streams[0])
    next(streams[1])
    found = db.Hash.find({})
    c.close()
    return c, db, streams, found


@pytest.mark.parametrize("kind", TYPES)
def test_every_verb_of_every_store_type_after_close_raises_closed_error(closed, kind):
    c, db, _streams, _found = closed
    bucket = db[kind.capitalize()]
    for name, op in operations.VERBS.items():
        with pytest.raises(errors.ClosedError):
            getattr(bucket, name)(*sample_args(op))
    for call in (bucket.stats, bucket.describe):
        with pytest.raises(errors.ClosedError):
            call()


@pytest.mark.parametrize("owner", ["Hash", "Btree"])
@pytest.mark.parametrize("kind", TYPES)
def test_every_store_field_verb_after_close_raises_closed_error(closed, owner, kind):
    _c, db, _streams, _found = closed
    field = db[owner]["d"][kind.capitalize()]
    for name, op in operations.FIELD_VERBS.items():
        with pytest.raises(errors.ClosedError):
            getattr(field, name)(*sample_args(op))


def test_catalog_calls_after_close_raise_closed_error(closed):
    c, db, _streams, _found = closed
    calls = [c.databases, lambda: c.create_database("x"), lambda: c.drop_database("app"), c.metrics, c.sweep_ttl,
             lambda: c.execute({"op": "list_databases"}), lambda: db.create_bucket("N"), lambda: db.drop_bucket("Hash"),
             db.buckets, lambda: c.execute({"op": "alter_bucket", "db": "app", "bucket": "Hash",
                                            "options": {"placement": "x"}})]
    for call in calls:
        with pytest.raises(errors.ClosedError):
            call()


def test_what_was_read_before_close_stays_readable(closed):
    """A find's answer is a list; a stream begun before close reads its own open file to
    its end (its bytes were verified against their SHA-256 as usual)."""
    _c, _db, streams, found = closed
    assert found == [{"_id_": "d"}]
    assert sum(len(chunk) for chunk in streams[0]) == 300_000 - 1000
    assert sum(len(chunk) for chunk in streams[1]) == 300_000 - 1000


def test_close_twice_and_from_many_threads_at_once(tmp_path):
    c = hoarddb.open(tmp_path / "data")
    c["app"].create_bucket("Q", type="fifo").push({"n": 1})
    barrier = threading.Barrier(8)
    failures = []

    def close():
        barrier.wait()
        try:
            c.close()
        except BaseException as e:  # noqa: BLE001
            failures.append(e)

    threads = [threading.Thread(target=close) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures
    c.close()
    with hoarddb.open(tmp_path / "data") as again:
        assert again["app"].Q.length() == 1


def test_with_closes_also_on_an_exception(tmp_path):
    with pytest.raises(KeyError):
        with hoarddb.open(tmp_path / "data") as c:
            c["app"].create_bucket("Q", type="fifo").push({"n": 1})
            raise KeyError("boom")
    with pytest.raises(errors.ClosedError):
        c["app"].Q.length()
    with hoarddb.open(tmp_path / "data") as again:
        assert again["app"].Q.length() == 1


@pytest.mark.parametrize("kind", ["hash", "fifo", "heap", "btree", "blob"])
def test_close_while_other_threads_call_gives_them_closed_error_and_keeps_every_acknowledged_write(tmp_path, kind):
    c = hoarddb.open(tmp_path / "data", sync=False)
    db = c["app"]
    db.create_bucket("B", type=kind, **({"key": "k"} if kind == "btree" else {}))
    acked: list[list] = [[] for _ in range(4)]
    unexpected: list[BaseException] = []
    started = threading.Barrier(5)

    def work(i):
        started.wait()
        n = 0
        while True:
            n += 1
            try:
                if kind == "hash":
                    db.B.insert({"_id_": f"{i}-{n}"})
                    acked[i].append(n)
                    db.B.find({"_id_": f"{i}-{n}"})
                elif kind == "btree":
                    db.B.insert({"k": f"{i}-{n}"})
                    acked[i].append(n)
                    db.B.range({"k": {"$gte": f"{i}-"}}, limit=5)
                elif kind == "blob":
                    acked[i].append(db.B.put(b"x" * 100))
                    db.B.list(limit=5)
                else:
                    db.B.push({"priority": n, "w": i, "n": n})
                    acked[i].append(n)
                    db.B.peek(5)
            except errors.ClosedError:
                return
            except BaseException as e:  # noqa: BLE001 - collected, the test fails on them
                unexpected.append(e)
                return

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(0.2)
    c.close()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a call never returned after close"
    assert not unexpected, unexpected[:3]
    with hoarddb.open(tmp_path / "data") as again:
        b = again["app"].B
        if kind == "hash":
            for i, ns in enumerate(acked):
                assert all(b.get(f"{i}-{n}") is not None for n in ns)
        elif kind == "blob":
            assert all(b.info(x) for ns in acked for x in ns)
        # every acknowledged write is there; a write that heard ClosedError may be, or not
        assert sum(len(ns) for ns in acked) <= b.length() <= sum(len(ns) for ns in acked) + len(acked)


def test_two_threads_opening_one_directory_at_once_one_wins_and_the_others_hear_this_process(tmp_path):
    data = tmp_path / "data"
    hoarddb.open(data).close()
    for _ in range(20):
        # a stale pid note from another process: a loser reading it before the winner
        # writes its own would blame that process
        (data / "LOCK").write_bytes(b"999999\n".ljust(32))
        barrier = threading.Barrier(6)
        opened, refused = [], []

        def open_():
            barrier.wait()
            try:
                opened.append(hoarddb.open(data))
            except errors.DataDirLockedError as e:
                refused.append(e.message)

        threads = [threading.Thread(target=open_) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(opened) == 1 and len(refused) == 5
        assert all("open already in this process" in m for m in refused), refused
        opened[0].close()


# -- os.fork() -------------------------------------------------------------------------------------

FORK = """
    import os, sys, hoarddb
    from hoarddb import errors
    data = sys.argv[1]
    c = hoarddb.open(data)
    db = c["app"]
    db.create_bucket("H", type="hash").insert({"_id_": 1})
    db.create_bucket("Q", type="fifo").push({"n": 1})
    engine = c._executor
    kv = engine._stores[("app", "H")].kv
    readers = kv.env.readers()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: every call refused, saying why; close and exit touch nothing
        os.close(r)
        said = []
        for call in (lambda: db.H.get(1), lambda: db.H.insert({"_id_": 2}), lambda: db.Q.pop(),
                     lambda: c.databases(), lambda: db.create_bucket("X")):
            try:
                call()
                said.append("RAN")
            except errors.ClosedError as e:
                said.append("forked" if "forked" in e.message else e.message)
        try:
            hoarddb.open(data)
            said.append("OPENED")
        except errors.DataDirLockedError as e:
            said.append("inherited" if f"open in process {os.getppid()} when it forked" in e.message else e.message)
        c.close()
        os.write(w, "|".join(said).encode())
        os.close(w)
        sys.exit(0)  # a normal exit: the interpreter finalizes, atexit runs
    os.close(w)
    said = b""
    while chunk := os.read(r, 4096):
        said += chunk
    os.waitpid(pid, 0)
    print("child:", said.decode())
    assert kv.env.readers() == readers, (readers, kv.env.readers())  # the parent's pinned snapshot is intact
    db.H.insert({"_id_": 3})
    assert db.Q.pop() == {"n": 1}
    # a child forked now and kept alive keeps no hold on the directory once the parent
    # closes; and it may never open it itself (py-lmdb counts what it inherited as open)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.read(r, 1)  # the parent has closed
        try:
            hoarddb.open(data)
            os._exit(1)
        except errors.DataDirLockedError as e:
            os._exit(0 if "forked this process" in e.message else 2)
    os.close(r)
    c.close()
    with hoarddb.open(data) as again:
        assert again["app"].H.length() == 2 and again["app"].H.get(2) is None
        print("reopened while the child lives")
    os.write(w, b"x")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    print("parent ok")
    """


def test_a_forked_child_cannot_use_the_parents_database_and_the_parent_is_unaffected(tmp_path):
    out = run_child(FORK, tmp_path / "data")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "child: forked|forked|forked|forked|forked|inherited" in out.stdout, out.stdout + out.stderr
    assert "reopened while the child lives" in out.stdout and "parent ok" in out.stdout
    with hoarddb.open(tmp_path / "data") as c:
        assert c["app"].H.length() == 2
