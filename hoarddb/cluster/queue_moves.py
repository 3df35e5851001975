"""A queue bucket's move (fifo, lifo, heap, whole): its files copied under a fence and installed whole on the new owner.

A whole queue is one partition, and a node's local bucket of it is exactly that partition:
its segment log and claim table (fifo, lifo) or its LMDB environment (heap) hold nothing
else. So the move copies the bucket's files as they are — the store's own hot backup
(``Store.backup``: a fifo's segments and ``state.bson`` with the log held still, and its
claim environment; a heap's environment copied from one read transaction) — and the new
owner puts them in place of its own copy, whole. Elements keep their order (the bytes
are the same), and claims move with their tokens, deliveries and deadlines (wall-clock
seconds): a claimId given before the move is acked, released or extended on the new
owner, where a whole bucket's requests go.

A lifo's or a heap's copy runs *under the fence* (``Outgoing.fenced``): no push, pop, claim
or ack of the bucket runs on the old owner while its files are read and sent. Requests
wait up to FENCE_WAIT (5 s), then are refused PARTITION_UNAVAILABLE with ``moved: true``
(retryable) until the hand-over. That fence lasts as long as the copy: the queue's bytes
on disk at MOVE_RATE (32 MiB/s by default), plus one local copy of its files.

A fifo's is sent twice: first all of it while it serves (unfenced; the log is held still only
while its files are copied locally, as for a hot backup), then under the fence
what may have changed since (``FifoStore.backup_changed``): ``state.bson`` (the head), the
claim environment, the segment that was last at the first copy and every newer one. The
segments before that one never change while the log is open (appends go to the last
segment; pops move the head in ``state.bson`` and unlink what it left), so the first copy
of them stands; those the head has passed meanwhile are deleted on B before the install.
The fence then lasts for what was pushed during the first copy, one segment
(``segment_size``, 64 MiB by default, at most), and the claim table.

We chose byte copies over a snapshot of elements and a catch-up because a queue's elements
are not keyed: a catch-up would have to replay pops, claims and acks made on the old owner
after the snapshot, each of which changes state the snapshot holds (a fifo's head and
claim table, a heap's claim records), and only a byte copy keeps a claim's position, token
and the heap's tie order exactly. A lifo is fenced whole because its pops truncate its last
segment and may unlink segments whose numbers a later push takes again (a name does not
mean one content); a heap because its LMDB file changes anywhere.

On the old owner A, and on the new owner B (DATA is the node's data directory)::

    A: DATA/_cluster/qout/<db>/<bucket>/     the backup being sent (made anew by each attempt)
    B: DATA/_cluster/qin/<db>/<bucket>/      the files received so far (emptied at start)
    B: DATA/_cluster/qtrash/<db>/<bucket>/   the bucket's folder as it was, while the new one goes in

    install on B (one move's last request), under the engine's mutex, the store closed:
      1 fsync every received file and folder
      2 rename DATA/<db>/<bucket>  -> qtrash/<db>/<bucket>      (fsync both parents)
      3 rename qin/<db>/<bucket>   -> DATA/<db>/<bucket>        (fsync both parents)   <- the commit
      4 remove qtrash/<db>/<bucket>

What a crash leaves:

- *B killed mid-copy* (before 3; a fifo's first copy or its fenced one): ``qin/`` holds a partial copy, removed at B's start; B's
  own folder is as it was (between 2 and 3: it is in ``qtrash/``, and B's start renames it
  back, :func:`recover`). A's next send fails, so the move is abandoned (fence lifted, A
  serves) and retried when B is back, from a new backup.
- *B killed after 3*: B has the whole copy, but does not hold the partition (no hand-over
  yet): the copy is foreign to B, never served (every request of a whole bucket goes to
  its owner); the retried move installs a new one over it.
- *A killed mid-copy*: A's fence dies with it; A held the partition and its files are
  untouched (``qout/`` is a copy, removed at the next attempt). The partition answers
  PARTITION_UNAVAILABLE naming A until A is back; then A moves it again.
- *A killed after the hand-over, before its clean-up*: its ``cleanup/`` key names the
  partition, and A's start empties its copy (an empty store installed the same way).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import time
from pathlib import Path

from ..catalog import parts_of
from ..catalog_operations import create_part
from ..errors import HoardError
from ..storage.oserrors import fsync_directory
from ..stores import store_class

log = logging.getLogger("hoarddb.cluster.moves")

#: The store types whose buckets move as files (whole: one partition).
QUEUES = ("fifo", "lifo", "heap")
#: A segment file's name (hoarddb/storage/segment_format.py), of a fifo.
SEGMENT = re.compile(r"seg_\d+\.fifo")
#: Bytes of a file sent in one request.
CHUNK = 256 << 10


def _area(node, name: str, db: str, bucket: str) -> Path:
    return Path(node.server.config.data) / "_cluster" / name / db / bucket


def recover(node) -> None:
    """At start: a bucket folder a crash left in ``qtrash/`` goes back where it was (the install did not commit),
    or is removed (it did); the copies half received are removed."""
    root = Path(node.server.config.data) / "_cluster"
    trash = root / "qtrash"
    if trash.is_dir():
        for db_dir in trash.iterdir():
            for old in db_dir.iterdir():
                target = node.server.engine.path / db_dir.name / old.name
                if not target.exists():
                    os.rename(old, target)
                    fsync_directory(target.parent)
                else:
                    shutil.rmtree(old, ignore_errors=True)
    for name in ("qtrash", "qin", "qout", "qempty"):
        shutil.rmtree(root / name, ignore_errors=True)


def install(engine, db: str, bucket: str, source: Path, trash: Path) -> None:
    """Put the bucket folder ``source`` in place of the bucket's own, the store closed meanwhile (a blocking call,
    run on the write pool). The order of the renames, and what a crash between them leaves: the module's docstring."""
    for path in sorted(source.rglob("*"), reverse=True):
        if path.is_file():
            with open(path, "rb+") as f:
                os.fsync(f.fileno())
        else:
            fsync_directory(path)
    fsync_directory(source)
    target = engine.path / db / bucket
    shutil.rmtree(trash, ignore_errors=True)
    trash.parent.mkdir(parents=True, exist_ok=True)
    with engine._mutex:
        engine._hot.pop((db, bucket), None)
        engine._close_store(db, bucket)
        os.rename(target, trash)
        fsync_directory(target.parent)
        fsync_directory(trash.parent)
        os.rename(source, target)  # the commit
        fsync_directory(target.parent)
        fsync_directory(source.parent)
        engine._hot.pop((db, bucket), None)
    shutil.rmtree(trash, ignore_errors=True)


def make_empty(engine, db: str, bucket: str, folder: Path) -> None:
    """An empty bucket folder of this bucket's declaration at ``folder`` (to install over a copy handed over)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    decl = engine.catalog.bucket(db, bucket)
    store = store_class(decl["type"])(folder, decl, engine.options)
    store.close()


async def empty(mover, db: str, bucket: str) -> None:
    """Empty this node's copy of a queue bucket it does not hold (handed over, or an earlier attempt's)."""
    server = mover.node.server
    folder = _area(mover.node, "qempty", db, bucket)

    def run() -> None:
        make_empty(server.engine, db, bucket, folder)
        install(server.engine, db, bucket, folder, _area(mover.node, "qtrash", db, bucket))

    await server.loop.run_in_executor(server._writes, run)


async def copy(mover, out, names: list[str] | None = None) -> None:
    """A whole queue bucket from this node (its old owner) to ``out.to``, its files sent in chunks of CHUNK bytes
    (throttled at MOVE_RATE) and installed there. A fifo's are sent twice: all of them while it serves, then, under
    the fence, what may have changed since (``FifoStore.backup_changed``: every file but the segments the first copy
    had that were not its last); a lifo's or a heap's once, under the fence.

    ``names``: the local buckets moved, each as a whole queue (a partitioned queue's partitions: their hidden
    buckets, hoarddb/cluster/queues.py), all under the one fence of the move; by default the bucket itself."""
    server = mover.node.server
    names = names or [out.bucket]

    def backup(name: str, unchanged: set[str] | None) -> tuple[list[tuple[str, int]], list[str], int]:
        store = server.engine._store(out.db, name)
        staging = _area(mover.node, "qout", out.db, name)
        shutil.rmtree(staging, ignore_errors=True)
        staging.parent.mkdir(parents=True, exist_ok=True)
        if unchanged is None:
            store.backup(staging)
            changed: list[str] = []
        else:
            changed = store.backup_changed(staging, unchanged)
        files = sorted((str(p.relative_to(staging)), p.stat().st_size) for p in staging.rglob("*") if p.is_file())
        stats = store.stats()
        return files, changed, stats.get("entries", 0) + (stats.get("claimed") or 0)

    def tidy() -> None:
        for name in names:
            shutil.rmtree(_area(mover.node, "qout", out.db, name), ignore_errors=True)

    try:
        sealed: dict[str, dict] = {}
        if out.place.get("type") == "fifo":
            out.state = "copying"
            await mover._note(out.db, out.bucket, out.parts, out.to, out.state, out)
            for name in names:
                files, _changed, _n = await server.loop.run_in_executor(server._reads, backup, name, None)
                await mover._send(out, {"kind": "qbegin", "store": name})
                await _send_files(mover, out, _area(mover.node, "qout", out.db, name), files, name)
                segments = sorted((n, size) for n, size in files if SEGMENT.fullmatch(n))
                sealed[name] = dict(segments[:-1])  # (the last one grows: sent again)
        await mover._fence(out)
        for name in names:
            fifo = name in sealed
            files, changed, elements = await server.loop.run_in_executor(
                server._reads, backup, name, set(sealed[name]) if fifo else None)
            keep = [[n, sealed[name][n]] for n in changed if n in sealed[name]] if fifo else []
            if not fifo:
                await mover._send(out, {"kind": "qbegin", "store": name})
            await mover._note(out.db, out.bucket, out.parts, out.to, out.state, out)
            await _send_files(mover, out, _area(mover.node, "qout", out.db, name), files, name)
            await mover._send(out, {"kind": "qinstall", "store": name, "files": [[n, s] for n, s in files],
                                    "keep": keep})
            mover._sent(out, elements, 0)
    finally:
        await server.loop.run_in_executor(server._reads, tidy)


async def _send_files(mover, out, staging: Path, files: list, store: str) -> None:
    from .moves import MOVE_RATE

    server = mover.node.server
    for name, size in files:
        offset = 0
        with open(staging / name, "rb") as f:
            while True:
                started = time.monotonic()
                data = await server.loop.run_in_executor(server._reads, f.read, CHUNK)
                await mover._send(out, {"kind": "qfile", "store": store, "path": name, "offset": offset,
                                        "data": data})
                offset += len(data)
                mover._sent(out, 0, len(data))
                if time.monotonic() - out.noted > 1.0:  # progress in etcd, for cluster status: once a second
                    out.noted = time.monotonic()
                    await mover._note(out.db, out.bucket, out.parts, out.to, out.state, out)
                if MOVE_RATE > 0:
                    await asyncio.sleep(max(0.0, len(data) / MOVE_RATE - (time.monotonic() - started)))
                if len(data) < CHUNK:
                    break
        if offset != size:
            raise HoardError(f"queue move of {out.db}.{out.bucket}: {name} changed while it was sent "
                             f"({offset} bytes sent, {size} backed up)")


async def receive(mover, db: str, bucket: str, move: dict) -> dict:
    """The new owner's side of :func:`copy`: ``qbegin`` (start a copy afresh), ``qfile`` (a chunk of a file),
    ``qinstall`` (every file arrived, their sizes checked: the copy replaces this node's folder of the bucket)."""
    server = mover.node.server
    name = move.get("store") or bucket
    part = parts_of([name], bucket)
    if name != bucket and not part:
        return {"ok": 0, "code": 2, "codeName": "BAD_VALUE", "message": f"a queue move's store {name!r:.80} is not "
                f"{bucket!r} nor one of its partitions"}
    folder = _area(mover.node, "qin", db, name)
    kind = move["kind"]
    if kind == "qbegin":
        await server.loop.run_in_executor(server._writes, lambda: shutil.rmtree(folder, ignore_errors=True))
        if part:  # a partitioned queue's partition: its hidden bucket here, for the copy to go in place of
            await server.loop.run_in_executor(server._writes, create_part, server.engine, db, bucket, part[0][0])
        return {"ok": 1, "result": True}
    if kind == "qfile":
        path = folder / move["path"]
        if folder.resolve() not in path.resolve().parents:
            return {"ok": 0, "code": 2, "codeName": "BAD_VALUE", "message": f"a queue move's file {move['path']!r} "
                    "is not inside the bucket's folder"}
        data = bytes(move["data"])

        def write() -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb" if move["offset"] == 0 else "ab") as f:
                if f.tell() != move["offset"]:
                    raise HoardError(f"queue move of {db}.{bucket}: {move['path']} has {f.tell()} bytes here, "
                                     f"the next chunk starts at {move['offset']}")
                f.write(data)

        await server.loop.run_in_executor(server._writes, write)
        return {"ok": 1, "result": True}
    # qinstall: the files sent last, and those kept from the first copy (a fifo's sealed segments); nothing else
    expected = {fname: size for fname, size in list(move["files"]) + list(move.get("keep") or [])}
    for fname, size in expected.items():
        path = folder / fname
        if not path.is_file() or path.stat().st_size != size:
            return {"ok": 0, "code": 2, "codeName": "BAD_VALUE",
                    "message": f"queue move of {db}.{bucket}: {fname} did not arrive whole"}

    def tidy() -> int:
        folder.mkdir(parents=True, exist_ok=True)
        gone = 0
        for path in list(folder.rglob("*")):
            if path.is_file() and str(path.relative_to(folder)) not in expected:
                path.unlink()  # (a segment the old owner's head has passed since the first copy)
                gone += 1
        return gone

    gone = await server.loop.run_in_executor(server._writes, tidy)
    log.info("installing the copy of %s.%s received: %d file(s), %d of the first copy left out (popped since)",
             db, name, len(expected), gone)
    await server.loop.run_in_executor(server._writes, install, server.engine, db, name, folder,
                                      _area(mover.node, "qtrash", db, name))
    return {"ok": 1, "result": True}
