"""hoardDB on a disk that is really full: a small tmpfs mounted for each test and filled up.

Every test mounts a 16 MiB tmpfs in its ``tmp_path`` (the ``disk`` fixture), fills most of
it with a filler file, and frees space again by truncating that file. Mounting needs root
with CAP_SYS_ADMIN; where it is not permitted (a container, a user account) the tests skip
and say so. The mount is undone whatever the test did.

What each test holds hoardDB to (DESIGN.md's promises, on a full disk):

- a refused write is answered with STORAGE_ERROR and a hint that the disk is full and what
  to do — never a raw OSError or LMDB error, a hang, or a dead process or server;
- nothing of a refused write is visible: counts, indexes, queue lengths, blob files;
- every acknowledged write is there, byte for byte, also after reopening;
- once space is freed, writes work again without reopening.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import hoarddb
from hoarddb import errors
from hoarddb.engine import Engine
from hoarddb.options import Options
from hoarddb.storage import kv as kvmod
from hoarddb.storage.kv import KV
from tests.killing import REPO, SAY_READY, child_env, run_script

SIZE = 16 << 20
MOUNT_REFUSED = ("mounting a tmpfs is not permitted here ({why}): the disk-full tests need a real, small file "
                 "system, and mounting one needs root with CAP_SYS_ADMIN, which containers often lack")


class Disk:
    """A mounted tmpfs of SIZE bytes at ``path``, with a filler file that takes what a test asks."""

    def __init__(self, path: Path):
        self.path = path
        self.filler = path / "filler"

    def available(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self, leave: int = 0) -> None:
        """Grow (or shrink) the filler until ``leave`` bytes are free (to a page)."""
        size = self.filler.stat().st_size if self.filler.exists() else 0
        target = max(0, size + self.available() - leave)
        fd = os.open(self.filler, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if target > size:
                os.posix_fallocate(fd, size, target - size)
            else:
                os.ftruncate(fd, target)
        finally:
            os.close(fd)

    def free(self) -> None:
        """Give the filler's space back."""
        if self.filler.exists():
            os.truncate(self.filler, 0)


@pytest.fixture
def disk(tmp_path):
    """A 16 MiB tmpfs mounted at ``tmp_path / "disk"``, unmounted after the test (skips where mounting is refused)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip(MOUNT_REFUSED.format(why="not root"))
    if shutil.which("mount") is None:
        pytest.skip(MOUNT_REFUSED.format(why="no mount command"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(MOUNT_REFUSED.format(why=done.stderr.strip() or f"mount exited with {done.returncode}"))
    try:
        yield Disk(mnt)
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], check=True)  # files still open (a failed test): detach


def assert_disk_full(exc: BaseException) -> None:
    """A refusal as a user should see it: STORAGE_ERROR, saying the disk is full and what to do."""
    assert isinstance(exc, errors.StorageError), f"{type(exc).__name__}: {exc}"
    assert exc.codeName == "STORAGE_ERROR" and exc.code == 23
    assert "the disk is full" in exc.message and "free space" in exc.message, exc.message


def until_refused(write, limit: int = 5000) -> tuple[list, BaseException]:
    """Call ``write(i)`` for i = 0, 1, ... until it raises; the results so far and the error."""
    results = []
    for i in range(limit):
        try:
            results.append(write(i))
        except Exception as exc:
            return results, exc
    raise AssertionError(f"{limit} writes and the disk is not full")


# -- one bucket of each type, embedded --------------------------------------------------------

PAD = "x" * 300


def _doc(i: int) -> dict:
    return {"_id_": f"k{i}", "n": i, "email": f"e{i}@example.com", "city": f"c{i % 5}", "priority": i % 7,
            "pad": PAD}


class Kind:
    """How to create, write, count and read back one kind of bucket."""

    def __init__(self, name: str):
        self.name = name

    def create(self, db):
        if self.name == "hash":
            return db.create_bucket("B", type="hash", indices=[{"fields": ["email"], "unique": True},
                                                                {"fields": ["city"]}])
        if self.name == "field":
            b = db.create_bucket("B", type="hash", store_fields=[{"name": "L", "type": "fifo"}])
            b.insert({"_id_": "owner"})
            return b
        if self.name == "btree":
            return db.create_bucket("B", type="btree", key="n")
        if self.name in ("fifo", "lifo"):
            return db.create_bucket("B", type=self.name, segment_size=64 << 10)
        return db.create_bucket("B", type=self.name)

    def write(self, b, i: int):
        if self.name in ("hash", "btree"):
            return b.insert(_doc(i))
        if self.name in ("fifo", "lifo", "heap"):
            return b.push(_doc(i))
        if self.name == "field":
            return b["owner"].L.push(_doc(i))
        return b.put(bytes([i % 251]) * (24 << 10), name=f"b{i}")

    def length(self, b) -> int:
        return b["owner"].L.length() if self.name == "field" else b.length()

    def check(self, b, acked: list, refused: int) -> None:
        """Every acknowledged write there, exactly; the refused one nowhere."""
        assert self.length(b) == len(acked)
        if self.name == "hash":
            for i in range(len(acked)):
                assert b.get(f"k{i}") == _doc(i)
            assert b.get(f"k{refused}") is None
            assert b.search({"email": f"e{refused}@example.com"}) == []  # its unique index entry too
            assert len(b.search({"city": "c1"})) == sum(1 for i in range(len(acked)) if i % 5 == 1)
        elif self.name == "btree":
            assert [d["n"] for d in b.list(limit=1000)] == list(range(len(acked)))
        elif self.name in ("fifo", "heap"):
            got = b.peek(limit=1000)
            got = got if isinstance(got, list) else got["result"]
            assert sorted(d["n"] for d in got) == list(range(len(acked)))
        elif self.name == "lifo":
            assert [d["n"] for d in b.list(limit=1000)] == list(range(len(acked)))
        elif self.name == "field":
            assert [d["n"] for d in b["owner"].L.peek(limit=1000)] == list(range(len(acked)))
        else:  # blob: each put's bytes, and no file of the refused put
            for i, blob_id in enumerate(acked):
                assert b.get(blob_id)["data"] == bytes([i % 251]) * (24 << 10)


KINDS = ["hash", "btree", "heap", "fifo", "lifo", "blob", "field"]


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "relaxed"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_full_disk_refuses_writes_cleanly_keeps_the_acknowledged_and_takes_writes_again_once_freed(disk, kind,
                                                                                                        sync):
    k = Kind(kind)
    data = disk.path / "data"
    with hoarddb.open(data, sync=sync) as client:
        b = k.create(client["app"])
        disk.fill(leave=160 << 10)
        acked, exc = until_refused(lambda i: k.write(b, i))
        assert acked, "the disk took not one write: the log wants room ahead it need not have"
        assert_disk_full(exc)
        with pytest.raises(errors.StorageError) as again:  # still full: refused the same way
            k.write(b, len(acked))
        assert_disk_full(again.value)
        k.check(b, acked, len(acked))
        if kind == "blob":
            left = {p.name for p in (data / "app" / "B").iterdir()}
            assert not [n for n in left if n.startswith(".tmp-")] and len(left) == len(acked) + 1  # + _index.bson
        disk.free()
        acked.append(k.write(b, len(acked)))  # no reopen needed
        k.check(b, acked, len(acked))
    with hoarddb.open(data, sync=sync) as client:
        k.check(client["app"].B, acked, len(acked))


def test_a_blob_is_deleted_on_a_full_disk_even_when_its_record_needs_a_new_block(disk):
    data = disk.path / "data"
    with hoarddb.open(data) as client:
        b = client["app"].create_bucket("B", type="blob")
        index = data / "app" / "B" / "_index.bson"
        ids = []

        def put(name=None):
            ids.append(b.put(os.urandom(64 << 10), name=name))

        put()
        unnamed = index.stat().st_size  # one put record, no name; a name of n letters adds 5 + n
        while True:  # end the index a few bytes short of a block: a del record (~70 bytes) needs the next
            room = 4096 - index.stat().st_size % 4096
            if room <= 30:
                break
            n = room - unnamed - 5 - 20
            put("n" * n if 0 <= n <= 1000 else None)
        disk.fill(leave=0)
        before = disk.available()
        assert b.delete(ids[0]) == {"deleted": 1}
        assert disk.available() > before and b.length() == len(ids) - 1
        with pytest.raises(errors.NotFoundError):
            b.get(ids[0])
        b.delete(ids[1])  # and the next, as usual
    with hoarddb.open(data) as client:
        assert client["app"].B.length() == len(ids) - 2
        assert all(client["app"].B.info(i)["size"] == 64 << 10 for i in ids[2:])


# -- the write-ahead log and checkpoints of an LMDB environment --------------------------------

def test_the_log_keeps_no_room_ahead_on_a_disk_too_full_for_it(disk):
    kv = KV(disk.path / "kv", map_size=1 << 20)
    disk.fill(leave=256 << 10)  # less than the 1 MiB of zeros the log keeps ahead of its records
    for i in range(10):
        kv.write(lambda txn: txn.put(b"k%03d" % i, b"v" * 100))
    with kv.read() as txn:
        assert txn.get(b"k009") == b"v" * 100
    kv.close()


def test_a_record_the_disk_cuts_short_leaves_nothing_and_the_log_goes_on(disk):
    # Unsynced, a record of any size is logged (see BIG_RECORD), here one past the zeros the log has ahead.
    kv = KV(disk.path / "kv", map_size=8 << 20, sync=False)
    kv.write(lambda txn: txn.put(b"a", b"1"))
    disk.fill(leave=0)
    with pytest.raises(errors.StorageError) as refused:
        kv.write(lambda txn: txn.put(b"big", os.urandom(3 << 19)))
    assert_disk_full(refused.value)
    with kv.read() as txn:
        assert txn.get(b"big") is None
    disk.free()
    kv.write(lambda txn: txn.put(b"b", b"2"))  # the environment is usable: its transaction was not left open
    kv._pin.abort()  # abandoned as if killed (no checkpoint): the next open replays the log
    kv.env.close()
    kv.wal.close()
    os.close(kv._data_fd)
    kv = KV(disk.path / "kv", map_size=8 << 20)
    with kv.read() as txn:
        assert (txn.get(b"a"), txn.get(b"b"), txn.get(b"big")) == (b"1", b"2", None)
    kv.close()


def test_a_checkpoint_on_a_full_disk_finishes(disk):
    kv = KV(disk.path / "kv", map_size=1 << 20)  # its open checkpointed into wal.1: wal.0 has no header yet
    kv.write(lambda txn: txn.put(b"a", b"1"))
    disk.fill(leave=0)
    kv.checkpoint()  # writes wal.0's header: room it must have had from the start
    disk.free()
    kv.write(lambda txn: txn.put(b"b", b"2"))
    kv.close()


def test_a_checkpoint_in_the_background_on_a_full_disk_does_not_stop_writes(disk, monkeypatch):
    monkeypatch.setattr(kvmod, "CHECKPOINT_COMMITS", 3)
    kv = KV(disk.path / "kv", map_size=1 << 20)  # wal.0 has no header yet (see above)
    kv.write(lambda txn: txn.put(b"a", b"1"))
    kv.write(lambda txn: txn.put(b"b", b"2"))
    disk.fill(leave=8 << 10)  # room for the commit that begins a checkpoint, not for wal.0's header too
    written = 0
    for i in range(10):
        try:
            kv.write(lambda txn: txn.put(b"k%02d" % i, b"v" * 100))
            written += 1
        except errors.StorageError as exc:
            assert_disk_full(exc)
            assert "opened again" not in exc.message, exc.message
    assert written >= 1  # one commit began a checkpoint on the full disk
    disk.free()
    for i in range(10):  # and the writes after it are not refused
        kv.write(lambda txn: txn.put(b"z%02d" % i, b"1"))
    kv.close()


def test_the_map_grows_and_checkpoints_on_a_full_disk(disk):
    data = disk.path / "data"
    with hoarddb.open(data, map_size=1 << 20) as client:
        b = client["app"].create_bucket("B", type="hash")
        kv = client._executor._stores[("app", "B")].kv
        n = 0
        while (kv.env.info()["last_pgno"] + 1) * kv._psize <= 0.75 * kv.env.info()["map_size"]:
            b.insert({"_id_": n, "pad": PAD})  # until 3/4 of the map is used: the next write grows it
            n += 1
        assert kv.env.info()["map_size"] == 1 << 20
        disk.fill(leave=0)
        acked, exc = until_refused(lambda i: b.insert({"_id_": n + i, "pad": PAD}))
        assert_disk_full(exc)
        assert "opened again" not in exc.message, exc.message
        assert kv.env.info()["map_size"] > 1 << 20  # it grew on the full disk
        disk.free()
        b.batch_insert([{"_id_": n + len(acked) + j, "pad": PAD} for j in range(200)])  # grows on, writes on
        total = n + len(acked) + 200
        assert b.length() == total
    with hoarddb.open(data) as client:
        assert client["app"].B.length() == total
        assert client["app"].B.get(total - 1) == {"_id_": total - 1, "pad": PAD}


NEW_ENVIRONMENT = r"""
import sys
from pathlib import Path
from hoarddb.errors import StorageError
from hoarddb.storage.kv import KV
try:
    KV(Path(sys.argv[1]), map_size=1 << 20)
except StorageError as exc:
    print(exc.message)
"""


def test_a_new_environment_on_a_full_disk_is_refused_and_does_not_kill_the_process(disk):
    """LMDB maps its lock file, which it makes with holes: on a full disk the first write to
    it was a page fault with no block to give, and the kernel killed the process (SIGBUS)."""
    disk.fill(leave=0)
    done = run_script(NEW_ENVIRONMENT, disk.path / "kv")  # in a child: the crash it was would end pytest
    assert done.returncode == 0, f"exit status {done.returncode}: {done.stderr[-2000:]}"
    assert "the disk is full" in done.stdout, done.stdout
    disk.free()
    KV(disk.path / "kv", map_size=1 << 20).close()


def test_an_environment_that_cannot_open_leaves_nothing_open(disk):
    """An open that fails halfway (LMDB open, the log not made) closes what it had opened: an
    environment left open in this process could never be opened again by it."""
    kept = []  # the errors, kept as a caller may keep them (with their tracebacks)
    for leave in range(0, 96 << 10, 4 << 10):  # at some of these, LMDB opens and the log does not
        disk.fill(leave=leave)
        try:
            KV(disk.path / f"kv{leave}", map_size=1 << 20).close()
        except errors.StorageError as exc:
            assert_disk_full(exc)
            kept.append((leave, exc))
    assert kept
    disk.free()
    for leave, _exc in kept:
        KV(disk.path / f"kv{leave}", map_size=1 << 20).close()


def test_a_first_claim_on_a_full_disk_is_refused_and_the_queue_stays_usable(disk):
    """A fifo's first claim makes its claim environment: at any amount of free space, it is
    made or refused, and once there is room the queue claims, and opens, as ever."""
    data = disk.path / "data"
    with hoarddb.open(data) as client:
        leaves = range(0, 96 << 10, 16 << 10)  # (each claim environment takes ~1 MiB: its log's zeros)
        for leave in leaves:
            q = client["app"].create_bucket(f"Q{leave}", type="fifo", segment_size=4096)
            q.batch_push([{"n": 1}, {"n": 2}])
            disk.fill(leave=leave)
            try:
                q.claim()
                claimed = 1
            except errors.StorageError as exc:
                assert_disk_full(exc)
                claimed = 0
            disk.free()
            assert len(q.claim(limit=2)) == 2 - claimed
    with hoarddb.open(data) as client:
        for leave in leaves:
            assert client["app"][f"Q{leave}"].stats()["claimed"] == 2


def test_a_recovery_that_needs_room_on_a_full_disk_says_so_and_loses_nothing(disk):
    """After a power cut LMDB's file may be back at its size of the last checkpoint (its growth
    since was never flushed): the replay must write those pages again, which a full disk refuses."""
    path = disk.path / "kv"
    kv = KV(path, map_size=4 << 20)
    at_checkpoint = (path / "data.mdb").stat().st_size
    for i in range(100):
        kv.write(lambda txn: txn.put(b"k%03d" % i, os.urandom(1000)))  # logged and flushed: acknowledged
    with kv.read() as txn:
        values = {k: v for k, v in txn.cursor()}
    kv._pin.abort()  # a power cut: no checkpoint, and data.mdb loses what it grew by
    kv.env.close()
    kv.wal.close()
    os.close(kv._data_fd)
    os.truncate(path / "data.mdb", at_checkpoint)
    disk.fill(leave=0)
    with pytest.raises(errors.StorageError) as refused:
        KV(path, map_size=4 << 20)
    assert_disk_full(refused.value)
    assert "nothing acknowledged was lost" in refused.value.message
    disk.free()
    kv = KV(path, map_size=4 << 20)
    with kv.read() as txn:
        assert {k: v for k, v in txn.cursor()} == values
    kv.close()


# -- groups (a server's group commit, run by the engine) --------------------------------------

def _count_documents(engine: Engine, bucket: str) -> int:
    n, cursor = 0, None
    while True:
        page = engine.execute({"op": "export", "db": "app", "bucket": bucket,
                               "args": {"cursor": cursor, "limit": 1000}})["result"]
        n += len(page["docs"])
        cursor = page["next"]
        if cursor is None:
            return n


@pytest.mark.parametrize("kind", ["hash", "heap"])
def test_a_group_the_disk_refuses_leaves_the_count_and_the_queue_as_they_were(disk, kind):
    data = disk.path / "data"
    engine = Engine(data, Options(sync=False))
    try:
        engine.execute({"op": "create_bucket", "db": "app", "bucket": "B", "options": {"type": kind}})
        disk.fill(leave=160 << 10)
        acked, failed = 0, 0
        for g in range(200):
            group = [{"op": "push" if kind == "heap" else "insert", "db": "app", "bucket": "B",
                      "args": {"doc": _doc(g * 10 + j)}} for j in range(10)]
            answers = engine.execute_group(group)
            engine.sync()
            if all(isinstance(a, dict) for a in answers):
                acked += 10
                continue
            assert all(isinstance(a, errors.HoardError) for a in answers), answers  # the group, whole
            assert_disk_full(answers[0])
            failed += 1
            if failed == 3:
                break
        assert acked and failed == 3
        length = engine.execute({"op": "length", "db": "app", "bucket": "B"})["result"]
        assert length == acked == _count_documents(engine, "B")
        disk.free()
        if kind == "heap":  # the in-memory heap holds no element of a group that was not kept
            popped = engine.execute({"op": "pop", "db": "app", "bucket": "B", "args": {"limit": 100}})["result"]
            assert len(popped) == min(100, acked) and all(d is not None for d in popped)
            acked -= len(popped)
        engine.execute_group([{"op": "push" if kind == "heap" else "insert", "db": "app", "bucket": "B",
                               "args": {"doc": {"_id_": "after", "priority": 1}}}] * 1)
        acked += 1
        assert engine.execute({"op": "length", "db": "app", "bucket": "B"})["result"] == acked
    finally:
        engine.close()
    engine = Engine(data, Options())
    try:
        assert engine.execute({"op": "length", "db": "app", "bucket": "B"})["result"] == acked
        assert _count_documents(engine, "B") == acked
    finally:
        engine.close()


# -- a held commit the disk refused, applied late ----------------------------------------------

@pytest.mark.parametrize("kind", ["hash", "btree", "heap", "fifo"])
def test_an_acknowledged_write_whose_commit_the_disk_refused_is_counted_before_and_after_it_is_applied(disk, kind):
    """A server's lone write is answered once its record is flushed, and LMDB commits it after
    the answer (commits_deferred); a full disk can refuse that commit. The write is applied
    late, from its record (KV._catch_up), by the first read or write once there is room.

    Regression test: a write refused meanwhile (the late apply refused first: still full) made
    the store read what it keeps in memory again from LMDB, which had not got the acknowledged
    write: length() was one short after the late apply, until the next write, and a heap
    never popped that element and gave its sequence number to the next push of its priority,
    which overwrote it. A fifo's claims (its claim environment) are checked the same way; a
    lifo, and a fifo's pushes, never commit late (segment files, written before the answer)."""
    data = disk.path / "data"
    engine = Engine(data, Options(sync=False))  # as a server runs it

    def run(op, **args):
        return engine.execute({"op": op, "db": "app", "bucket": "B", "args": args})["result"]

    def write(i: int):
        if kind == "fifo":
            return run("claim", lease=600)
        if kind == "heap":
            return run("push", doc={**_doc(i), "priority": 1})  # one priority: pushes told apart by sequence alone
        return run("insert", doc=_doc(i))

    def length() -> int:
        n = run("length")
        return n if kind != "fifo" else n + engine.execute({"op": "stats", "db": "app", "bucket": "B"})["result"][
            "claimed"]

    try:
        engine.execute({"op": "create_bucket", "db": "app", "bucket": "B", "options": {"type": kind}})
        acked = 20 if kind == "fifo" else 3
        if kind == "fifo":
            run("batch_push", docs=[_doc(i) for i in range(acked)])
        for i in range(3):
            write(i)
        store = engine._stores[("app", "B")]
        kv = store._claims_kv if kind == "fifo" else store.kv
        disk.fill(leave=0)
        for i in range(3, 20):  # until LMDB refuses a held commit: the write is answered, and not in LMDB
            with engine.commits_deferred():
                write(i)
                engine.sync()
                acked += kind != "fifo"
            if kv.behind():
                break
        assert kv.behind(), "the full disk refused no held commit"
        assert length() == acked
        with pytest.raises(errors.StorageError) as refused:  # still full: the late apply, and so this write, refused
            write(100)
        assert_disk_full(refused.value)
        assert length() == acked and kv.behind()
        disk.free()
        if kind in ("hash", "btree"):  # a get by key, the fastest read, sees it too
            assert run("get", key=f"k{i}")["n"] == i
        _count_documents(engine, "B")  # a read, which applies it now that there is room
        assert not kv.behind()
        assert length() == acked == _count_documents(engine, "B")
        write(101)  # the next write, as ever
        acked += kind != "fifo"
        assert length() == acked == _count_documents(engine, "B")
        if kind == "heap":  # every element pops, once, in push order (one priority)
            assert [d["n"] for d in run("pop", limit=100)] == list(range(acked - 1)) + [101]
            acked = 0
    finally:
        engine.close()
    engine = Engine(data, Options())
    try:
        assert length() == acked == _count_documents(engine, "B")
    finally:
        engine.close()


# -- through a server ----------------------------------------------------------------------

@pytest.mark.parametrize("clients", [1, 4])
@pytest.mark.parametrize("kind", ["hash", "fifo"])
def test_a_server_on_a_full_disk_refuses_cleanly_and_writes_again_once_freed(disk, kind, clients):
    from hoarddb.testing import ServerThread

    data = disk.path / "data"
    acked: dict[int, list] = {t: [] for t in range(clients)}
    refusals: list = []
    with ServerThread(data, insecure=True) as server:
        admin = hoarddb.connect(server.url())
        try:
            if kind == "hash":
                admin["app"].create_bucket("B", type="hash", indices=[{"fields": ["email"], "unique": True}])
            else:
                admin["app"].create_bucket("B", type="fifo", segment_size=64 << 10)
            disk.fill(leave=160 << 10)

            def work(t: int) -> None:
                client = hoarddb.connect(server.url()) if clients > 1 else admin
                b = client["app"].B
                try:
                    for i in range(3000):
                        doc = _doc(t * 10_000 + i)
                        try:
                            b.insert(doc) if kind == "hash" else b.push(doc)
                            acked[t].append(doc["n"])
                        except errors.HoardError as exc:
                            refusals.append(exc)
                            if sum(1 for r in refusals) >= 3 * clients:
                                return
                finally:
                    if client is not admin:
                        client.close()

            threads = [threading.Thread(target=work, args=(t,)) for t in range(clients)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(60)
            assert not any(th.is_alive() for th in threads), "a write hung on the full disk"
            assert refusals
            for exc in refusals:
                assert_disk_full(exc)
            b = admin["app"].B
            total = sum(len(v) for v in acked.values())
            # (one client: its last acknowledged write may wait in the log for room, and is counted)
            assert b.length() == total
            disk.free()
            b.insert({"_id_": "after", "email": "after"}) if kind == "hash" else b.push({"n": -1})
            assert b.length() == total + 1
        finally:
            admin.close()
    with hoarddb.open(data) as client:
        b = client["app"].B
        assert b.length() == total + 1
        if kind == "hash":
            for t, ns in acked.items():
                for n in ns:
                    assert b.get(f"k{n}") == _doc(n)
        else:
            got = [d["n"] for d in b.peek(limit=1000)]
            for t, ns in acked.items():
                mine = [n for n in got if t * 10_000 <= n < (t + 1) * 10_000]
                assert mine == ns  # each client's pushes, in its order


# -- opening, creating, and a process killed on a full disk -----------------------------------

def test_a_database_opens_and_reads_on_a_full_disk(disk):
    data = disk.path / "data"
    with hoarddb.open(data) as client:
        client["app"].create_bucket("H", type="hash").insert({"_id_": 1, "v": "one"})
        client["app"].create_bucket("Q", type="fifo").push({"v": "q"})
    disk.fill(leave=0)
    with hoarddb.open(data) as client:
        assert client["app"].H.get(1) == {"_id_": 1, "v": "one"}
        assert client["app"].Q.peek() == {"v": "q"}
        with pytest.raises(errors.StorageError) as refused:
            client["app"].create_bucket("N", type="hash")
        assert_disk_full(refused.value)
        assert client["app"].buckets() == ["H", "Q"] and not (data / "app" / "N").exists()
        with pytest.raises(errors.StorageError) as refused:
            client["other"].create_bucket("N", type="fifo")
        assert_disk_full(refused.value)
        assert client.databases() == ["app"]  # the new database was not kept either
        disk.free()
        client["app"].create_bucket("N", type="hash").insert({"_id_": 2})
    with hoarddb.open(data) as client:
        assert client["app"].buckets() == ["H", "N", "Q"] and client["app"].N.get(2) == {"_id_": 2}


def test_space_is_freed_on_a_full_disk_by_deleting_documents_and_dropping_a_bucket(disk):
    """The ways a user makes room must work on a disk with none: an LMDB commit takes new
    pages (those freed since the last checkpoint are kept for a power cut), so a commit the
    disk refuses checkpoints, which lets LMDB reuse them, and tries again."""
    data = disk.path / "data"
    with hoarddb.open(data) as client:
        for name in ("A", "B"):
            client["app"].create_bucket(name).batch_insert([{"_id_": i, "pad": PAD} for i in range(500)])
        for i in range(0, 500, 2):  # a bucket with a history: LMDB's file holds pages it may reuse
            client["app"].A.put({"_id_": i, "pad": PAD})
        disk.fill(leave=0)
        for i in range(100):
            assert client["app"].A.delete({"_id_": i}) == {"deleted": 1}, i
        assert client["app"].A.length() == 400
        before = disk.available()
        client["app"].drop_bucket("B")
        assert disk.available() > before and client["app"].buckets() == ["A"]
    with hoarddb.open(data) as client:
        assert client["app"].buckets() == ["A"] and client["app"].A.length() == 400
        assert client["app"].A.get(99) is None and client["app"].A.get(100) == {"_id_": 100, "pad": PAD}


def test_a_new_data_directory_on_a_full_disk_is_refused_and_opens_once_there_is_room(disk):
    disk.fill(leave=0)
    with pytest.raises(errors.StorageError) as refused:
        hoarddb.open(disk.path / "data")
    assert_disk_full(refused.value)
    disk.free()
    with hoarddb.open(disk.path / "data") as client:  # the refused open holds no lock (in this process either)
        client["app"].create_bucket("H").insert({"_id_": 1})
    with hoarddb.open(disk.path / "data") as client:
        assert client["app"].H.get(1) == {"_id_": 1}


@pytest.mark.parametrize("kind", ["hash", "heap", "fifo", "blob"])
def test_a_bucket_the_disk_has_no_room_for_is_not_created(disk, kind):
    """At every amount of free space up to a few hundred KiB: created, or refused and not declared."""
    data = disk.path / "data"
    with hoarddb.open(data) as client:
        client["app"].create_bucket("H", type="hash")
        outcomes = set()
        for leave in range(0, 400 << 10, 8 << 10):
            disk.fill(leave=leave)
            try:
                client["app"].create_bucket("N", type=kind)
            except errors.HoardError as exc:
                assert_disk_full(exc)
                assert "N" not in client["app"].buckets() and not (data / "app" / "N").exists(), leave
                outcomes.add("refused")
                continue
            outcomes.add("created")
            disk.free()
            b = client["app"].N
            if kind == "blob":
                b.put(b"x")
            elif kind in ("fifo", "heap"):
                b.push({"priority": 1})
            else:
                b.insert({"_id_": 1})
            assert b.length() == 1
            client["app"].drop_bucket("N")
        # (a blob bucket needs no room of its own: an empty index, and the catalog's reserve)
        assert outcomes == ({"created"} if kind == "blob" else {"refused", "created"})
        disk.free()
        client["app"].create_bucket("N", type=kind)  # nothing of the refused ones stands in the way
    with hoarddb.open(data) as client:
        assert client["app"].buckets() == ["H", "N"]


KILLED_ON_A_FULL_DISK = SAY_READY + r"""
import os
import hoarddb
from hoarddb.errors import StorageError
data, kind, filler, i = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
client = hoarddb.open(data)
b = client["app"].B
st = os.statvfs(os.path.dirname(filler))
fd = os.open(filler, os.O_RDWR | os.O_CREAT)
os.posix_fallocate(fd, 0, max(4096, st.f_bavail * st.f_frsize - (160 << 10)))
os.close(fd)
while True:
    doc = {"_id_": "k%d" % i, "n": i, "pad": "x" * 300}
    try:
        b.insert(doc) if kind == "hash" else b.push(doc)
        say("A %d" % i)
        i += 1
    except StorageError as exc:
        say("R %d" % i)
"""
SLOW = os.environ.get("HOARDDB_SLOW") == "1"


@pytest.mark.parametrize("rounds", [pytest.param(20, marks=pytest.mark.slow) if SLOW else 1])
@pytest.mark.parametrize("kind", ["hash", "fifo"])
def test_a_process_killed_while_the_disk_is_full_loses_nothing_acknowledged(disk, kind, rounds):
    """A child writes until the disk is full and is SIGKILLed while it is refused; opening
    again, still full or with room, finds every acknowledged write (HOARDDB_SLOW=1: 20 rounds)."""
    data = disk.path / "data"
    with hoarddb.open(data) as client:
        client["app"].create_bucket("B", type=kind)
    n = 0  # writes there so far (acknowledged, or in flight at a kill and kept)
    for round_ in range(rounds):
        out = disk.path.parent / "child.out"
        with open(out, "wb") as f:
            child = subprocess.Popen([sys.executable, "-c", "import sys\n" + KILLED_ON_A_FULL_DISK, str(data), kind,
                                      str(disk.filler), str(n)], stdout=f, stderr=subprocess.PIPE, cwd=REPO,
                                     env=child_env())
        try:
            deadline = time.monotonic() + 30
            while out.read_bytes().count(b"\nR ") < 1 + round_ % 7:  # refused at least once: the disk is full
                assert child.poll() is None, child.stderr.read().decode()
                assert time.monotonic() < deadline, "the child never met the full disk"
                time.sleep(0.005)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
            child.stderr.close()
        lines = out.read_text().split("\n")[:-1]
        acked = [int(line[2:]) for line in lines if line.startswith("A ")]
        assert acked == list(range(n, n + len(acked)))
        if not round_:
            assert acked

        def check(client) -> int:
            # Every acknowledged write; and perhaps the one in flight when the kill came (a retry
            # of a refused write may find room: the disk's last bytes went to the attempts before).
            b = client["app"].B
            there = b.length()
            assert there in (n + len(acked), n + len(acked) + 1)
            if kind == "hash":
                assert all(b.get(f"k{i}") == {"_id_": f"k{i}", "n": i, "pad": "x" * 300} for i in range(there))
            else:
                assert [d["n"] for d in b.list(after=max(0, there - 1000), limit=1000)] == \
                    list(range(max(0, there - 1000), there))
            return there

        # Still full: the open recovers (replaying the log) or says clearly that it cannot yet.
        try:
            with hoarddb.open(data) as client:
                check(client)
        except errors.StorageError as exc:
            assert_disk_full(exc)
            assert "nothing acknowledged was lost" in exc.message
        disk.free()
        with hoarddb.open(data) as client:
            n = check(client)
        os.unlink(disk.filler)
