"""Opening a KV environment: LMDB's files checked and made openable, the last checkpoint restored, the log replayed.

:class:`KVRecovery` is a mixin of :class:`hoarddb.storage.kv.KV`: its methods run when
the environment opens and set the KV's own fields (the environment, its log, the pin,
the map's size), so they are the KV's methods, kept here so that a reader of its writes
need not hold them. What a crash leaves, and why replaying the log from the last
checkpoint's meta pages recovers every acknowledged write, is told in :mod:`.wal`; the
files checked here are drawn beside the methods that make or mend them, and LMDB's meta
page in :mod:`.lmdb_files`.
"""

from __future__ import annotations

import logging
import os

import lmdb

from ..errors import CorruptDataError
from .lmdb_files import COMPACTING, DAMAGE_ERRORS, LOCK_FILE_BYTES, MAX_READERS, check_meta_pages, damage_hint
from .oserrors import reason, storage_error
from .wal import PUT, WriteAheadLog, newest_header

log = logging.getLogger("hoarddb.kv")

_datasync = getattr(os, "fdatasync", os.fsync)


class KVRecovery:
    """KVRecovery opens an environment: checks, repairs what a crash or a full disk left, restores, replays."""

    def _open_and_recover(self, map_size: int) -> None:
        self._forget_unfinished_compaction()
        self._check_data_file()
        restored = self._restore_checkpoint()
        if restored is not None:  # the map must hold the file, whatever the meta pages say
            map_size = max(map_size, (self.path / "data.mdb").stat().st_size)
        while True:
            self.env = self._open(map_size)
            # The pin: a snapshot held until the next checkpoint, so that LMDB reuses none
            # of its pages (the module's docstring of .wal says why).
            self._pin = self.env.begin(write=False)
            try:
                if restored is not None:
                    self._replay()
                break
            except lmdb.MapFullError:  # start again from the checkpoint with a bigger map
                self._pin.abort()
                self._pin = None
                self.env.close()
                self.env = None
                map_size *= 2
                self._restore_checkpoint()
        self._psize = self.env.stat()["psize"]
        self._data_fd = os.open(self.path / "data.mdb", os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        if self.wal is None or self.wal.psize != self._psize:
            if self.wal is not None:
                self.wal.close()
            self.wal = WriteAheadLog(self.path, self._psize)
        self._map_size = self.env.info()["map_size"]
        self._map_metas()
        self._last_used = self._used_at_checkpoint = self._used()
        self._keep_reserve()
        # Always a fresh log whose header is the state on disk now: after a crash even
        # when nothing was replayed, since the log may hold records past a gap (a power
        # cut), which appending on in the same generation could line up with and replay.
        self._checkpoint()

    def _abandon(self) -> None:
        """Close what a failed open had opened (and write nothing)."""
        for pin in (self._pin, self._next_pin):
            if pin is not None:
                pin.abort()
        self._pin = self._next_pin = None
        self._unmap_metas()
        if self.env is not None:
            self.env.close()
        if self.wal is not None:
            self.wal.close()
        if self._data_fd is not None:
            os.close(self._data_fd)
            self._data_fd = None

    def _open(self, map_size: int) -> lmdb.Environment:
        try:
            self._allocate_lock_file()
            self._forget_unfinished_creation()
            self._check_meta_pages()
            return lmdb.open(
                str(self.path), map_size=map_size, subdir=True, sync=False, metasync=False,
                max_dbs=0, max_readers=MAX_READERS, readahead=False, lock=True,
            )
        except (lmdb.Error, OSError) as exc:
            if self.wal is not None:
                self.wal.close()
            if isinstance(exc, DAMAGE_ERRORS):
                raise
            raise storage_error(f"opening {self.path}", exc, "the bucket was not opened", self.path) from None

    def _check_data_file(self) -> None:
        """Refuse a ``data.mdb`` that is missing, empty or shorter than its two meta pages
        when the log beside it has a whole header: LMDB would make a new, empty file, and
        the bucket would open empty, as if its data had never been.

        A header is written only after a checkpoint flushed ``data.mdb`` with both meta
        pages (at the latest when the environment was created), so no crash leaves a log
        with a header and no data file: such a file was deleted, or cut (a careless copy,
        a half-restored backup). Without a header, a missing or short file is a creation
        that never finished (see :meth:`_forget_unfinished_creation`).
        """
        data = self.path / "data.mdb"
        try:
            size = data.stat().st_size
        except FileNotFoundError:
            size = None
        if size is not None and size >= 2 * self._psize:
            return
        if newest_header(self.path) is None:
            return
        what = "is missing" if size is None else f"has {size} bytes, less than its two meta pages"
        raise CorruptDataError(
            f"{data} {what}, but the write-ahead log beside it (wal.0, wal.1) shows that it held data: the file "
            f"was deleted or cut short, not by a crash. Nothing was changed. {damage_hint(self.path)}")

    def _forget_unfinished_compaction(self) -> None:
        """Remove what a compaction cut short left in :data:`COMPACTING`, before anything reads
        ``data.mdb``: a copy that never took the place of ``data.mdb`` (the compaction is
        undone: ``data.mdb`` is the old file, whole), or the empty folder of one that did
        (it is finished: ``data.mdb`` is the new file, whole, and its log's header says it
        was closed cleanly, so it is opened as found). hoarddb/tools/compact.py draws the steps.
        """
        staging = self.path / COMPACTING
        if not staging.is_dir():
            return
        try:
            copy = staging / "data.mdb"
            if copy.exists():
                log.warning("%s: a compaction did not finish; its copy is removed, and the environment "
                            "opens as it was before it", self.path)
                copy.unlink()
            staging.rmdir()
        except OSError as exc:  # only room it takes: the next open, or compaction, tries again
            log.warning("%s: could not remove %s left by a compaction: %s", self.path, staging, reason(exc))

    def _check_meta_pages(self) -> None:
        """Check LMDB's two meta pages before LMDB maps ``data.mdb`` (:func:`check_meta_pages`)."""
        check_meta_pages(self.path, self._psize)

    def _forget_unfinished_creation(self) -> None:
        """Empty a ``data.mdb`` shorter than LMDB's two meta pages, so that LMDB makes it anew.

        LMDB creates an environment by writing its two meta pages; a disk that filled up (or
        a crash) in the middle leaves a file with less than both, which LMDB then refuses
        for good ("MDB_INVALID: File is not an LMDB file"): a bucket created on a nearly
        full disk could never be opened again, even with space. Such a file never held a
        commit (the first commit writes past the two meta pages), so nothing is lost::

            data.mdb: | meta 0 (part) |        -> emptied -> LMDB writes | meta 0 | meta 1 | again
        """
        data = self.path / "data.mdb"
        try:
            size = data.stat().st_size
        except FileNotFoundError:
            return
        if 0 < size < 2 * self._psize:
            log.warning("%s: data.mdb has %d bytes, less than LMDB's two meta pages: its creation did not "
                        "finish (a full disk, or a crash); it is made anew", self.path, size)
            os.truncate(data, 0)

    def _allocate_lock_file(self) -> None:
        """Give ``lock.mdb`` real blocks for its whole reader table before LMDB maps it.

        LMDB sizes a new lock file with ``ftruncate`` (a file of holes) and then writes its
        header and reader slots through a shared memory map. A write to a hole of a mapped
        file needs a block, and on a full disk the kernel answers a page fault with no
        block by killing the process (SIGBUS): creating a bucket, or opening one whose
        lock file had never been written that far, crashed the process on a full disk.
        With the blocks allocated first, a full disk is an ENOSPC here instead, and LMDB
        (which keeps a lock file at least its size) never writes a hole::

            lock.mdb: | header | reader 0 | reader 1 | ... | reader MAX_READERS - 1 |  every byte allocated

        Nothing in it outlives the processes that have it open; zeros are what LMDB starts from.
        """
        fd = os.open(self.path / "lock.mdb", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            size = -(-LOCK_FILE_BYTES // self._psize) * self._psize
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)

    def _restore_checkpoint(self) -> bool | None:
        """Before LMDB opens: put the last checkpoint's meta pages back into ``data.mdb``.

        None when there is nothing to recover: no log header (a new environment, or one
        last written by a hoardDB without the log, whose commits LMDB synced itself), or
        one a clean close wrote (LMDB's file was flushed then, and is taken as found: LMDB's
        own tools may have changed it since). Otherwise whether the meta pages on disk
        differed from the checkpoint's (commits since it, to be replayed from the log).
        """
        data = self.path / "data.mdb"
        if not data.exists():
            return None
        if self.wal is not None:  # a second try, with a bigger map
            self.wal.close()
        self.wal = wal = WriteAheadLog.open_existing(self.path, self._psize)
        if wal is None:
            return None
        if wal.closed:
            return None
        try:
            fd = os.open(data, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
            try:
                if os.pread(fd, len(wal.metas), 0) == wal.metas:
                    return False
                os.pwrite(fd, wal.metas, 0)
                _datasync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            wal.close()
            raise storage_error(f"recovering {data}", exc, "the bucket was not opened; nothing acknowledged "
                                "was lost: open it again once this is fixed") from None
        log.info("%s: recovering from the checkpoint of generation %d", self.path, wal.generation)
        return True

    def _replay(self) -> int:
        """Apply the log's records since the checkpoint, in order; how many there were."""
        count, batch = 0, []
        for ops in self.wal.records():
            batch.append(ops)
            count += 1
            if len(batch) >= 1000:
                self._apply(batch)
                batch = []
        if batch:
            self._apply(batch)
        if count:
            log.info("%s: replayed %d records of the write-ahead log", self.path, count)
        return count

    def _apply(self, batch: list) -> None:
        # No growing here: a new map size ends the pin (py-lmdb ends every transaction),
        # and until the replay's checkpoint the pinned pages are the only durable ones. A
        # full map ends the replay, and the caller starts over with a bigger one.
        with self.env.begin(write=True) as txn:
            for ops in batch:
                for op in ops:
                    if op[0] == PUT:
                        txn.put(op[1], op[2])
                    else:
                        txn.delete(op[1])
