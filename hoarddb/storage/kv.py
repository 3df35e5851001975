"""The KV engine: one LMDB environment, its write transactions and write-ahead log,
checkpoints, and growing its map.

On disk a ``kv/`` folder is LMDB's ``data.mdb`` and ``lock.mdb`` and the log ``wal.0``, ``wal.1``
(its format, and why LMDB can run without its own syncs, in :mod:`.wal`).

Before the log, ``data.mdb`` was kept written ahead with zeros so that each durable
commit's fdatasync overwrote blocks instead of growing the file; with one fdatasync of
``data.mdb`` per checkpoint instead of one per commit that no longer paid (it cost a
relaxed insert a quarter of its time), and files written that way open unchanged.

:class:`KV` is written in four files, each of what a reader needs at once: this one
(a write and its commit, held commits, reads, growing the map, close),
:mod:`.kv_recovery` (opening: the files checked and mended, the checkpoint restored,
the log replayed), :mod:`.kv_checkpoint` (checkpoints, and the used size they follow)
and :mod:`.kv_group` (group transactions); LMDB's own files, as hoardDB checks them, are
:mod:`.lmdb_files`'s.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import mmap
import os
import resource
import threading
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import lmdb

from ..errors import CorruptDataError, StorageError
from .kv_checkpoint import KVCheckpoints
from .kv_group import KVGroups
from .kv_recovery import KVRecovery
from .lmdb_files import DAMAGE_ERRORS, damage_hint
from .oserrors import DiskFullError, reason, storage_error
from .wal import PUT, Recording, WriteAheadLog, decode_ops, encode_ops, record_exceeds
# Where callers (stores, catalog, tools, tests) import them from, as before the split:
from .kv_checkpoint import _CHECKPOINTS  # noqa: F401
from .lmdb_files import COMPACTING, check_meta_pages, read_only  # noqa: F401

T = TypeVar("T")

log = logging.getLogger("hoarddb.kv")

#: A checkpoint is made after this many commits since the last one ... (the pinned
#: snapshot keeps LMDB from reusing the pages freed meanwhile, so every commit takes new
#: ones; a count of commits, unlike a size the file grew by, bounds that: each checkpoint
#: frees the previous interval's pages for the next, and the file settles at its data
#: plus about two intervals' worth of copied pages)
CHECKPOINT_COMMITS = 1000
#: ... or LMDB's used pages grew this much since it (a few big commits) ...
CHECKPOINT_GROWTH = 32 << 20
#: ... or the log's records reach this size.
CHECKPOINT_LOG = 64 << 20
#: The map is doubled before a write transaction begins once LMDB uses this share of it,
#: so that a group of writes seldom finds it full midway (see _write_in_group).
GROW_AT = 0.75
#: A transaction of more puts and deletes than this is not logged: it is committed and
#: checkpointed at once (one flush of its pages instead of writing them twice, and no
#: copy of it all in memory) ...
BIG_OPS = 20_000
#: ... nor, when it is to be durable at once (a synced write, a server's group), one whose
#: record would be bigger than this: a checkpoint's flushes then cost less than writing
#: and flushing the record (and flushing its pages again at the next checkpoint).
BIG_RECORD = 256 << 10


class _Deferring(threading.local):
    #: The environments whose commit this thread holds back: inside a commits_deferred() block.
    kvs: list | None = None


_deferring = _Deferring()


@contextlib.contextmanager
def commits_deferred() -> Iterator[None]:
    """Inside the block, a write on this thread logs its record and keeps its LMDB
    transaction open; the block's end commits it. A server wraps one write, its flush
    and its answer in it, so that LMDB's commit (copying a dozen pages into the page
    cache) happens after the answer has left, while the client reads it::

        with commits_deferred():
            kv.write(fn)        # record appended, transaction held (and the commit lock)
            kv.sync()           # the record is durable: the write may be acknowledged
            send(answer)
        # here: LMDB commits; a crash before it loses nothing, the log replays the record

    Until the block ends the write is invisible to other threads' reads, and their
    writes to the same environment wait, so it is only for a caller that serves no one
    else meanwhile. On this thread, a later write or :meth:`KV.read` of the environment
    commits the held transaction first. A held commit that LMDB then refuses (a full
    disk) cannot be answered any more: its record is applied again before the next write
    (writes are refused until that works), or by the next open (:meth:`KV._commit_held`).
    """
    if _deferring.kvs is not None:  # nested: the outer block commits
        yield
        return
    _deferring.kvs = held = []
    try:
        yield
    finally:
        _deferring.kvs = None
        for kv in held:
            kv._commit_held()


class KV(KVRecovery, KVCheckpoints, KVGroups):
    """KV is one LMDB environment (a ``kv/`` folder) and its write-ahead log: ACID, and
    recovered on open after a crash.

    LMDB runs without its own syncs (``MDB_NOSYNC``); the log (:mod:`.wal`) makes commits
    durable with one append and one fdatasync, and a checkpoint (:meth:`checkpoint`)
    flushes LMDB's file now and then so that the log can start over. With ``sync`` every
    write's record is flushed before ``write`` returns: an acknowledged write survives a
    killed process and a power cut. Without it (group commit, or ``hoarddb.open(path,
    sync=False)``) records are flushed by :meth:`sync`, a checkpoint or :meth:`close`: a
    power cut may undo the last commits, never corrupt the database. The map starts at
    ``map_size`` and doubles whenever a write finds it full, so no one has to guess a
    database's size up front.
    """

    def __init__(self, path: Path, map_size: int, sync: bool = True, reserve: int = 0):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.sync_each = sync
        # Bytes of data.mdb kept allocated past LMDB's last page, so that the next commits
        # land on blocks the file has, even on a full disk (see _keep_reserve).
        self.reserve = reserve
        self._reserved_to = 0
        # Held from a write transaction's start to its commit and log record (and through a
        # checkpoint): records go to the log in commit order, and a checkpoint sees no commit.
        self._commit_lock = threading.Lock()
        self._outer: lmdb.Transaction | None = None  # a group's outer transaction (begin_group)
        self._outer_ops: list = []
        self._outer_thread: int | None = None
        self._group_error: StorageError | None = None  # a group whose earlier writes were lost
        self._commits = 0  # commits since the last checkpoint
        self._inflight: concurrent.futures.Future | None = None  # a checkpoint flushing in the background
        self._next_pin: lmdb.Transaction | None = None  # its snapshot, the pin once it is done
        self._broken: StorageError | None = None  # a checkpoint's flush failed: writes are refused
        self._held: lmdb.Transaction | None = None  # logged, not committed yet (commits_deferred)
        self._held_by: int | None = None  # the thread that holds it (and the commit lock)
        self._held_body: bytes | None = None  # its record's body
        self._pin: lmdb.Transaction | None = None
        # The record of an acknowledged write whose held commit LMDB refused (a full disk):
        # it is in the log, not in LMDB, and is applied before anything else (_catch_up).
        self._unapplied: bytes | None = None
        self.wal: WriteAheadLog | None = None
        self.env: lmdb.Environment | None = None
        self._data_fd: int | None = None
        # LMDB's two meta pages, mapped read-only, from which the used size is read (see _used);
        # None where that cannot be trusted, and env.info() is asked instead.
        self._metas: mmap.mmap | None = None
        self._map_size = 0  # the map's size (LMDB's; changed only by _grow)
        self._psize = resource.getpagesize()
        try:
            self._open_and_recover(map_size)
        except BaseException as exc:
            # Nothing stays open (an environment left open in this process could never be
            # opened again by it), and nothing on disk was changed that the next open
            # does not redo: the log's header still names the checkpoint to recover from.
            self._abandon()
            if isinstance(exc, DAMAGE_ERRORS):
                raise CorruptDataError(
                    f"{self.path / 'data.mdb'} is damaged: LMDB says {exc}. {damage_hint(self.path)}") from None
            if isinstance(exc, (lmdb.Error, OSError)):
                raise storage_error(f"opening {self.path}", exc, "the bucket was not opened; nothing "
                                    "acknowledged was lost: open it again once this is fixed", self.path) from None
            raise


    # -- writing ---------------------------------------------------------------------------

    def write(self, fn: Callable[[lmdb.Transaction], T]) -> T:
        """Run ``fn(txn)`` in one write transaction and commit it; all of it or none.

        If the map is full, the transaction is aborted, the map doubled and ``fn`` run
        again from the start, so ``fn`` must not keep effects outside the transaction.
        Inside a group (:meth:`begin_group`, on the group's thread) the transaction is a
        child of the group's: its commit costs no fsync, and its abort undoes only it.
        """
        if self._outer_thread is not None and self._outer_thread == threading.get_ident():  # (even if it failed)
            return self._write_in_group(fn)
        if self._held_by is not None:
            self._commit_held_here()
        made_room = False
        while True:
            self._commit_lock.acquire()
            held = False
            try:
                if self._broken is not None:
                    raise self._broken
                if self._unapplied is not None:
                    self._catch_up()
                self._note_used()
                try:
                    txn = self.env.begin(write=True)
                except lmdb.Error as exc:
                    raise storage_error(f"writing {self.path}", exc, path=self.path) from None
                try:
                    recording = Recording(txn)
                    result = fn(recording)
                except lmdb.MapFullError:
                    txn.abort()
                    self._grow()
                    continue
                except BaseException:
                    txn.abort()
                    raise
                try:
                    held = self._commit(txn, recording.ops, self.sync_each, may_hold=True)
                except lmdb.MapFullError:  # the commit's own pages did not fit
                    self._grow()
                    continue
                except DiskFullError:
                    if made_room or not self._make_room():
                        raise
                    made_room = True
                    continue
            finally:
                if not held:
                    self._commit_lock.release()
            if self.sync_each:
                self.sync()
            return result

    def _commit(self, txn: lmdb.Transaction, ops: list, durable: bool, may_hold: bool = False) -> bool:
        """Log and commit a write transaction (holding the commit lock); checkpoint if due.
        True if the commit is held instead (``may_hold``, inside :func:`commits_deferred`):
        the transaction and the commit lock are kept until the block ends.

        The record goes to the log before LMDB commits, so that the log's order is the
        commit order; a commit that fails takes its record back. A transaction too big to
        be worth logging is committed and checkpointed at once instead — when it is to be
        made ``durable`` now (a synced write, a group): a checkpoint flushes its pages once,
        where a record would be written and flushed and its pages flushed again later.
        Unsynced, a big record costs one write to the page cache and is kept.
        """
        if not ops:
            txn.abort()
            return False
        # Sized before it is encoded: a record that will not be written is not built (it
        # took 4 of a durable 1,000-document batch's 25 ms).
        big = len(ops) > BIG_OPS or (durable and record_exceeds(ops, BIG_RECORD))
        body = None if big else encode_ops(ops)
        try:
            at = None if big else self.wal.append(body)
        except BaseException:  # the disk refused the record (nothing of it stays): nor does the write
            txn.abort()
            raise
        if may_hold and at is not None:
            holders = _deferring.kvs
            if holders is not None:
                self._held, self._held_body, self._held_by = txn, body, threading.get_ident()
                holders.append(self)
                return True
        try:
            txn.commit()
        except lmdb.Error as exc:
            # LMDB wrote none of it that counts (its meta page is written last), and the
            # record is zeroed: nothing of the write stays, in memory or on disk.
            if at is not None:
                self.wal.take_back(at)
            if isinstance(exc, lmdb.MapFullError):
                raise
            if isinstance(exc, DAMAGE_ERRORS):  # LMDB met a page that is not what it wrote
                raise CorruptDataError(f"writing {self.path / 'data.mdb'} failed: the file is damaged (LMDB says "
                                       f"{exc}); nothing of this write was kept. {damage_hint(self.path)}") from None
            raise storage_error(f"writing {self.path / 'data.mdb'}", exc, path=self.path) from None
        if big:  # durable only once checkpointed: a checkpoint that fails refuses this write too
            self._commits += 1
            self._checkpoint()
        else:
            self._after_commit()
        return False

    def _after_commit(self) -> None:
        """After a commit whose record is in the log: count it, finish a checkpoint that is
        done, begin one that is due. The write stands whatever happens to the checkpoint (a
        failed one refuses the writes after it)."""
        self._commits += 1
        try:
            if self._inflight is not None:
                self._settle()
            if self._inflight is None and (
                    self._commits >= CHECKPOINT_COMMITS
                    or self._last_used - self._used_at_checkpoint > CHECKPOINT_GROWTH
                    or self.wal.end - self.wal.records_at > CHECKPOINT_LOG):
                self._begin_checkpoint()
        except Exception:
            log.exception("%s: a checkpoint after a commit failed", self.path)
        if self.reserve:
            self._keep_reserve()

    def _keep_reserve(self) -> None:
        """Keep :attr:`reserve` bytes of data.mdb allocated past LMDB's last page (when there is room).

        LMDB writes a commit's new pages past its last one; where the file already has
        blocks there (allocated, never written: ``posix_fallocate``) the write needs none,
        so a few small commits still fit on a full disk. The catalog keeps such a reserve:
        dropping a bucket, which is how a full disk is given room back, must never be
        refused for want of the room it would give::

            data.mdb: | meta | meta | pages LMDB uses ... | allocated, unused (reserve) |
                                                          ^ last page + 1

        LMDB reads nothing past its last page, so what lies there is never data: a crash
        leaves it as it leaves any page past the last checkpoint's. Refilled when half is used.
        """
        if not self.reserve:
            return
        used = self._used()
        if self._reserved_to - used >= self.reserve // 2:
            return
        want = used + self.reserve
        try:
            os.posix_fallocate(self._data_fd, 0, want)
        except OSError:  # no room for it now: the next commit tries again
            return
        self._reserved_to = want

    def _commit_held(self) -> None:
        """Commit the transaction a :func:`commits_deferred` block held, and release the
        commit lock (on the thread that holds them; nothing to do if none is held).

        Its record is in the log, and was acknowledged once flushed: a commit that fails
        now (a disk too full for LMDB's new pages) cannot be taken back or answered. The
        record is kept (:attr:`_unapplied`) and applied again before any other write, as
        the replay of an open would (:meth:`_catch_up`): once the disk has room, writes
        go on; until then they are refused, and reads miss that write. No checkpoint runs
        meanwhile, close included, so the record stays in the log's current generation
        and the next open replays it if no catch-up did.
        """
        txn, body = self._held, self._held_body
        self._held, self._held_body, self._held_by = None, None, None
        if txn is None:
            return
        try:
            try:
                txn.commit()
            except lmdb.Error as exc:
                self._unapplied = body
                log.critical("%s: an acknowledged write could not be committed (%s); it is kept in the "
                             "write-ahead log and applied before the next write once there is room; until "
                             "then writes are refused and reads miss it", self.path, reason(exc))
                return
            self._after_commit()
        finally:
            self._commit_lock.release()

    def _catch_up(self) -> None:
        """Apply the record of an acknowledged write whose held commit failed (holding the
        commit lock); StorageError if LMDB still refuses it (the write that asked is refused).

        The record is applied as an open's replay applies it: its puts and deletes in one
        transaction, with no new record (it is in the log already). A full map cannot be
        grown here: growing checkpoints, and a checkpoint now would leave the record
        behind in the older generation; only reopening, whose replay grows the map, helps then.
        """
        if self._unapplied is None:
            return
        txn = None
        try:
            txn = self.env.begin(write=True)
            for op in decode_ops(memoryview(self._unapplied)):
                if op[0] == PUT:
                    txn.put(op[1], op[2])
                else:
                    txn.delete(op[1])
            txn.commit()
        except lmdb.Error as exc:
            if txn is not None:
                txn.abort()  # (nothing to do after a commit that failed: LMDB aborted it)
            outcome = ("writes are refused until it is applied: free space, then retry (or reopen the "
                       "database, which applies it)")
            if isinstance(exc, lmdb.MapFullError):
                outcome = "writes are refused until the database is opened again, which applies it"
            raise storage_error(f"{self.path}: applying an acknowledged write that LMDB refused before",
                                exc, outcome, self.path) from None
        self._unapplied = None
        log.warning("%s: the acknowledged write LMDB had refused is applied now", self.path)
        self._after_commit()

    def behind(self) -> bool:
        """Whether LMDB lacks an acknowledged write: a held commit it refused, whose record
        :meth:`_catch_up` applies before the next write (or a read), or the next open does."""
        return self._unapplied is not None

    def _commit_held_here(self) -> None:
        """Commit this thread's held transaction, if it holds one (before it writes or reads again)."""
        if self._held_by is not None and self._held_by == threading.get_ident():
            self._commit_held()


    def sync(self) -> None:
        """Make every commit so far durable: flush the log (nothing to do if it is).

        A flush that fails refuses every later write until the environment is opened
        again: after a failed fdatasync the kernel may have dropped the records it could
        not write, and a later flush that succeeds would not say so.
        """
        try:
            self.wal.flush()
        except StorageError as exc:
            raise self._break(f"flushing its write-ahead log failed ({exc.message})") from None


    def read(self) -> lmdb.Transaction:
        """A read transaction (a snapshot); use as a context manager. It sees this thread's
        held write (:func:`commits_deferred`): that is committed first."""
        self._commit_held_here()
        if self._unapplied is not None and self._commit_lock.acquire(blocking=False):
            try:  # the disk may have room again: the read then sees the acknowledged write
                self._catch_up()
            except StorageError:
                pass
            finally:
                self._commit_lock.release()
        return self.env.begin(write=False, buffers=False)

    def _note_used(self) -> None:
        """Before a write transaction (holding the commit lock): remember LMDB's used size,
        which checkpoints follow, and double the map if most of it is used."""
        self._last_used = used = self._used()
        if used > self._map_size * GROW_AT:
            self._grow()

    def _grow(self) -> None:
        """Double the map (holding the commit lock, no write transaction open).

        py-lmdb ends every transaction of the environment on a new map size, the pin too;
        a checkpoint pins again before any commit could reuse the pinned pages.
        """
        self._settle(wait=True)
        size = self.env.info()["map_size"]
        self.env.set_mapsize(size * 2)
        self._map_size = self.env.info()["map_size"]
        self._pin = None
        self._checkpoint()

    def close(self) -> None:
        """Checkpoint (so the next open replays nothing), then close the files."""
        if self._data_fd is None:
            return
        self._commit_held_here()
        try:
            with self._commit_lock:
                try:
                    self._settle(wait=True)
                finally:
                    if self._broken is None:
                        try:
                            self._catch_up()
                        except StorageError as exc:  # no checkpoint: the next open replays the write
                            log.warning("%s", exc.message)
                        if self._unapplied is None:
                            self._checkpoint(closed=True)
        finally:
            for pin in (self._pin, self._next_pin):
                if pin is not None:
                    pin.abort()
            self._pin = self._next_pin = None
            self._unmap_metas()
            self.env.close()
            self.wal.close()
            os.close(self._data_fd)
            self._data_fd = None
