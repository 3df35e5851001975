"""The KV engine: one LMDB environment, its write transactions, growing its map, and
keeping its data file written ahead of the pages LMDB uses.

On disk a ``kv/`` folder is LMDB's ``data.mdb`` and ``lock.mdb``. ``data.mdb`` is kept
*longer* than the pages LMDB uses: written zeros run from LMDB's last page to some way
past it (:meth:`KV._preallocate`), so the file's size, and the disk it takes, exceed the
data by up to an eighth of the data (at least 1 MiB, at most 64 MiB, never past the map)::

    0                          (last_pgno + 1) * psize                 file size
    +--------+--------+---------+-----------------------------------------+
    | meta 0 | meta 1 | pages LMDB uses          | zeros, written and fsynced |
    +--------+--------+---------+-----------------------------------------+

Why: a durable commit fdatasyncs the data file. A commit whose new pages lie past the end
of the file grows it, and that fdatasync must also commit the new size and block
allocation through the ext4 journal; a commit that overwrites blocks already written
flushes only its pages. Measured on ext4: an LMDB commit of one 1 KB record at a random
key about 20% faster, a hash ``insert`` of a 1 KB document about 14%, of a 200-byte one a
few percent (small records grow the file less often). Blocks that ``fallocate`` reserves
do not do as well (about 10%): writing into them still converts the extent in the
journal, so the zeros are written. Bulk loads are left alone: after a transaction that grew
the data by more than ``BULK_GROWTH`` no fill is made (big commits pay the journal once
for many pages, and the zeros would have them write every byte twice).

Safety: LMDB (without ``MDB_WRITEMAP``, which we never use) never reads a page past its
last one before a commit has written it, and accepts a file longer than its pages and
than its map; zeros are written only past the file's current end and only while this
process holds LMDB's writer lock (inside a write transaction), so they never meet a page
LMDB writes. A crash in the middle of a fill leaves a shorter run of zeros (or a size
with no zeros behind it yet): nothing LMDB reads. Older hoardDB versions and LMDB's own
tools read such a file unchanged; ``mdb_copy`` copies the used pages only.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Callable, TypeVar

import lmdb

from ..errors import StorageError

T = TypeVar("T")

log = logging.getLogger("hoarddb.kv")

#: ``data.mdb`` is kept written this far ahead of LMDB's last page: an eighth of the used
#: size, within these bounds, and refilled when less than half of that is left.
PREALLOC_MIN = 1 << 20
PREALLOC_MAX = 64 << 20
#: A write transaction after one that grew the data this much is taken for a bulk load: no fill.
BULK_GROWTH = 256 << 10
_ZEROS = bytes(1 << 20)
_datasync = getattr(os, "fdatasync", os.fsync)


class KV:
    """KV is one LMDB environment (a ``kv/`` folder): ACID, crash-safe without recovery.

    With ``sync`` every commit is fsynced, data and meta page both, before ``write``
    returns: an acknowledged write survives a killed process and a power cut. Without
    it (group commit, or ``hoarddb.open(path, sync=False)``) a commit still fsyncs its
    data pages but not the meta page that points to them (LMDB's ``metasync=False``):
    a power cut may undo the last commits, but never corrupts the database — LMDB's
    ``sync=False`` would skip the data fsync too, and then a power cut can leave a meta
    page pointing at pages that never reached the disk. :meth:`sync` flushes the meta
    page, making every commit so far durable. The map starts at ``map_size`` and doubles
    whenever a write finds it full, so no one has to guess a database's size up front.
    ``data.mdb`` is kept longer than its pages (zeros past them, the module's docstring
    says why), so that a commit overwrites blocks the file has instead of appending.
    """

    def __init__(self, path: Path, map_size: int, sync: bool = True):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._grow_lock = threading.Lock()
        self._outer: lmdb.Transaction | None = None  # a group's outer transaction (begin_group)
        self._outer_thread: int | None = None
        try:
            self.env = lmdb.open(
                str(self.path), map_size=map_size, subdir=True, sync=True, metasync=sync,
                max_dbs=0, max_readers=254, readahead=False, lock=True,
            )
        except lmdb.Error as exc:
            raise StorageError(f"cannot open {self.path}: {exc}") from None
        self._psize = self.env.stat()["psize"]
        # Our own descriptor of data.mdb, for the zeros written ahead of LMDB's pages.
        try:
            self._last_used = 0  # LMDB's used size at the last write transaction's start
            self._data_fd: int | None = os.open(self.path / "data.mdb", os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
            self._alloc_end = os.fstat(self._data_fd).st_size  # the file's size, as far as we know
        except OSError:
            self._data_fd, self._alloc_end = None, 0  # no preallocation, LMDB works as ever

    def write(self, fn: Callable[[lmdb.Transaction], T]) -> T:
        """Run ``fn(txn)`` in one write transaction and commit it; all of it or none.

        If the map is full, the transaction is aborted, the map doubled and ``fn`` run
        again from the start, so ``fn`` must not keep effects outside the transaction.
        Inside a group (:meth:`begin_group`, on the group's thread) the transaction is a
        child of the group's: its commit costs no fsync, and its abort undoes only it.
        """
        if self._outer is not None and self._outer_thread == threading.get_ident():
            return self._write_in_group(fn)
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    self._preallocate()
                    return fn(txn)
            except lmdb.MapFullError:
                self._grow()
            except lmdb.DiskError as exc:
                raise StorageError(f"write to {self.path} failed: {exc}; check free disk space") from None

    # -- groups: many writes, one commit ---------------------------------------------------
    #
    # A server runs the writes that arrive together as one group: each in a child transaction
    # of one outer transaction, committed (with its fsync) once at the end. Only one thread
    # writes to the environment meanwhile (LMDB's writer lock is held by the outer one).

    def begin_group(self) -> None:
        """Open the outer transaction of a group of writes on this thread."""
        self._outer = self.env.begin(write=True)
        self._outer_thread = threading.get_ident()
        self._preallocate()

    def end_group(self) -> None:
        """Commit the group's writes: one commit (and fsync) for all of them."""
        outer, self._outer, self._outer_thread = self._outer, None, None
        if outer is not None:
            try:
                outer.commit()
            except lmdb.Error as exc:
                raise StorageError(f"write to {self.path} failed: {exc}; check free disk space") from None

    def _write_in_group(self, fn):
        while True:
            child = self.env.begin(write=True, parent=self._outer)
            try:
                result = fn(child)
                child.commit()
                return result
            except lmdb.MapFullError:
                child.abort()
                self.end_group()  # what the group wrote so far is kept; grow, and go on
                self._grow()
                self.begin_group()
            except BaseException:
                child.abort()
                raise

    def sync(self) -> None:
        """Make every commit so far durable (flush the meta page when ``sync`` is off)."""
        self.env.sync(True)

    def read(self) -> lmdb.Transaction:
        """A read transaction (a snapshot); use as a context manager."""
        return self.env.begin(write=False, buffers=False)

    def _preallocate(self) -> None:
        """Keep ``data.mdb`` written ahead of LMDB's last page (see the module's docstring).

        Called at the start of every write transaction, holding LMDB's writer lock, before
        the transaction has written anything: no commit is in flight, and none can start
        until this returns, so the zeros written past the file's end meet no page of LMDB.
        Nearly always one ``env.info()`` and a comparison; about once per half a step of
        growth (512 KiB for a small database), a fill of about 1-5 ms per MiB on an SSD.
        A fill that fails (a full disk) is taken back and not tried again until the data
        grew by another half step: LMDB then appends as it would without this.
        """
        if self._data_fd is None:
            return
        info = self.env.info()
        used = (info["last_pgno"] + 1) * self._psize
        grew, self._last_used = used - self._last_used, used
        step = min(max(used // 8, PREALLOC_MIN), PREALLOC_MAX)
        if self._alloc_end - used >= step // 2 or grew > BULK_GROWTH:
            # Enough ahead; or a bulk load, whose big commits gain nothing from the zeros
            # (the journal commit is one per many pages) and would write every byte twice.
            return
        fd = self._data_fd
        size = os.fstat(fd).st_size  # LMDB may have grown the file past what we wrote
        target = min(used + step, info["map_size"])
        target -= target % self._psize
        if target <= size:
            self._alloc_end = max(size, used + step)
            return
        try:
            offset = size
            while offset < target:
                offset += os.pwrite(fd, memoryview(_ZEROS)[:min(len(_ZEROS), target - offset)], offset)
            _datasync(fd)
            self._alloc_end = target
        except OSError as exc:
            log.warning("%s: could not write %d bytes ahead in data.mdb (%s); LMDB appends instead",
                        self.path, target - size, exc.strerror or exc)
            try:
                os.ftruncate(fd, size)  # only bytes this fill added: LMDB has written none of them
            except OSError:
                pass
            self._alloc_end = used + step  # next try when LMDB used half a step more

    def _grow(self) -> None:
        with self._grow_lock:
            size = self.env.info()["map_size"]
            self.env.set_mapsize(size * 2)

    def close(self) -> None:
        self.env.close()
        if self._data_fd is not None:
            os.close(self._data_fd)
            self._data_fd = None
