"""A KV environment's checkpoints: LMDB's file flushed, the log started over, and the used size they follow.

:class:`KVCheckpoints` is a mixin of :class:`hoarddb.storage.kv.KV`: checkpoints hold
the KV's commit lock, move its pin and switch its log, so they are the KV's methods,
kept here so that a reader of its writes need not hold them. When one is due is decided
after each commit (``KV._after_commit``, by :data:`hoarddb.storage.kv.CHECKPOINT_COMMITS`
and its neighbours); what a crash at each step leaves is told below and in :mod:`.wal`.

A checkpoint, in three steps, holding the commit lock for the first and the last:

1. Copy LMDB's meta pages (the state after the last commit), pin that snapshot, and
   switch the log to the next generation (in the other file).
2. fdatasync data.mdb, then write the new generation's header with the copied meta
   pages and flush it (_seal): from then on a recovery starts there. A crash before
   recovers from the previous header (the previous pin still protects its pages)
   and replays both generations' records.
3. The new pin replaces the previous one, whose pages may now be reused.

Normally step 2 runs on the checkpoint thread while writes go on (_begin_checkpoint,
then _settle at a later commit); at open, close, a map growth and after a big
transaction, all three run at once (_checkpoint).
"""

from __future__ import annotations

import concurrent.futures
import logging
import mmap
import os
import struct

import lmdb

from ..errors import StorageError
from .oserrors import reason, storage_error

log = logging.getLogger("hoarddb.kv")

#: Where, in the meta pages' first 2 pages, each one's last page number and transaction id are
#: (offset 136 of each page, drawn in lmdb_files.py): LMDB's used size, read as mdb_env_info reads it
#: (see KV._used); made per environment, since the second page starts one page size in.
_META_USED = "<136xQQ{}xQQ"
#: Where checkpoints flush LMDB's files, one at a time for every environment of the process,
#: while their writers go on.
_CHECKPOINTS = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="hoarddb-checkpoint")


class KVCheckpoints:
    """KVCheckpoints makes checkpoints, whole or with their flush in the background, and reads LMDB's used size."""

    def checkpoint(self) -> None:
        """Flush LMDB's file and start the log over (it is then empty)."""
        self._commit_held_here()
        with self._commit_lock:
            if self._broken is not None:
                raise self._broken
            self._catch_up()
            self._checkpoint()

    def _break(self, why: str) -> StorageError:
        """Refuse every later write until the environment is opened again (whose recovery
        replays the log from the last checkpoint that finished); the error they hear."""
        if self._broken is None:
            self._broken = StorageError(
                f"{self.path}: {why}; writes to it are refused until the database is opened again, "
                "which recovers every acknowledged write")
            log.critical("%s", self._broken.message)
        return self._broken

    def _begin_checkpoint(self) -> None:
        # What can fail without changing anything comes first (a later commit tries again).
        try:
            metas = os.pread(self._data_fd, 2 * self._psize, 0)
            next_pin = self.env.begin(write=False)
        except (OSError, lmdb.Error) as exc:
            log.warning("%s: could not begin a checkpoint (%s); the next commit tries again", self.path, reason(exc))
            return
        try:
            # From the switch on, the next generation's records go to the other file, whose
            # header only the flush in the background makes the recovery's start: until it
            # is written no other checkpoint may begin (it would reuse this generation's file).
            self.wal.switch()
            self._inflight = _CHECKPOINTS.submit(self._seal, metas)
        except BaseException as exc:
            next_pin.abort()
            raise self._break(f"a checkpoint could not begin ({getattr(exc, 'message', None) or reason(exc)})") from None
        self._next_pin = next_pin
        self._commits = 0
        self._used_at_checkpoint = self._used_checked()

    def _seal(self, metas: bytes, closed: bool = False) -> None:
        try:
            self.env.sync(True)
        except lmdb.Error as exc:
            raise storage_error(f"flushing {self.path / 'data.mdb'}", exc, "a checkpoint did not finish",
                                self.path) from None
        self.wal.commit_generation(metas, closed)

    def _settle(self, wait: bool = False) -> None:
        """Finish a background checkpoint that is done (or wait for it): move the pin."""
        inflight = self._inflight
        if inflight is None or not (wait or inflight.done()):
            return
        self._inflight = None
        try:
            inflight.result()
        except Exception as exc:  # the disk refused a flush: recovery must start from the older header
            raise self._break(f"a checkpoint could not flush ({getattr(exc, 'message', None) or exc})") from None
        pin, self._pin, self._next_pin = self._pin, self._next_pin, None
        if pin is not None:
            pin.abort()

    def _checkpoint(self, closed: bool = False) -> None:
        """A whole checkpoint now (holding the commit lock): no commit happens meanwhile.

        One that fails refuses every later write (:meth:`_break`): the log may have been
        switched to the next generation, whose header is not written, and another
        checkpoint would reuse the file the recovery still needs; and after a map growth
        no pin protects the last checkpoint's pages until this one pins again.
        """
        self._settle(wait=True)
        try:
            metas = os.pread(self._data_fd, 2 * self._psize, 0)
            self.wal.switch()
            self._seal(metas, closed)
            pin, self._pin = self._pin, self.env.begin(write=False)
        except (OSError, lmdb.Error, StorageError) as exc:
            raise self._break(f"a checkpoint could not finish ({getattr(exc, 'message', None) or reason(exc)})") \
                from None
        if pin is not None:
            pin.abort()
        self._used_at_checkpoint = self._used_checked()
        self._commits = 0

    def _make_room(self) -> bool:
        """After a commit the disk had no room for (holding the commit lock): checkpoint, if
        anything was committed since the last one; whether it did (and the write may try again).

        Until a checkpoint, the pin keeps LMDB from reusing the pages the commits since
        the last one freed, so each commit takes new pages, which a full disk does not
        have. A checkpoint moves the pin: those pages may be reused, and a small write (a
        delete, a bucket's drop in the catalog) often fits in them. The checkpoint itself
        needs no room (the log's headers have theirs from the start).
        """
        if self._commits == 0 and self._inflight is None:
            return False
        try:
            self._checkpoint()
        except StorageError as exc:  # (it has made writes refused: the caller hears its own error)
            log.warning("%s: could not checkpoint to make room: %s", self.path, exc.message)
            return False
        return True

    def _used(self) -> int:
        """LMDB's used size, ``(last page + 1) * page size``, as ``env.info()`` gives it:
        read from the newer of the two meta pages (the one with the higher transaction id,
        meta 0 on a tie: LMDB's ``mdb_env_pick_meta``), through :attr:`_metas`.

        ``env.info()`` costs ~7,000 instructions (py-lmdb builds a dict of six fields), and
        every write asks for the used size before it begins (:meth:`_note_used`); this is a
        few hundred. It reads the same bytes ``mdb_env_info`` reads: LMDB keeps no copy of
        its meta pages, it reads them through its own read-only shared map of ``data.mdb``,
        and (without ``MDB_WRITEMAP``) writes them with ``pwrite``; a shared map of the same
        file sees those writes at once (the page cache, which LMDB itself requires to be
        unified). Asked holding the commit lock, or with no writer (open), so no commit
        writes the meta pages meanwhile. Where the map could not be made, or at open did not
        agree with ``env.info()`` (another LMDB's layout), ``env.info()`` is asked
        (:meth:`_map_metas`).
        """
        metas = self._metas
        if metas is None:
            return (self.env.info()["last_pgno"] + 1) * self._psize
        last0, txnid0, last1, txnid1 = self._meta_used.unpack_from(metas)
        return ((last1 if txnid0 < txnid1 else last0) + 1) * self._psize

    def _used_checked(self) -> int:
        """:meth:`_used` asked of ``env.info()`` (at each checkpoint: once per up to 1,000
        commits), and compared with what the meta map says: should they ever differ, the map
        is dropped and every later write asks ``env.info()``, as before the map."""
        used = (self.env.info()["last_pgno"] + 1) * self._psize
        if self._metas is not None and self._used() != used:
            log.warning("%s: the used size read from LMDB's meta pages (%d) is not LMDB's (%d); it is asked "
                        "of env.info() before every write from now on (slower)", self.path, self._used(), used)
            self._unmap_metas()
        return used

    def _map_metas(self) -> None:
        """Map LMDB's two meta pages read-only for :meth:`_used` (at open, LMDB open, no
        write transaction), if the used size read there is ``env.info()``'s."""
        self._unmap_metas()
        try:
            if os.fstat(self._data_fd).st_size < 2 * self._psize:  # (LMDB wrote both when it opened)
                raise ValueError("data.mdb is shorter than its two meta pages")
            self._meta_used = struct.Struct(_META_USED.format(self._psize - 16))
            self._metas = mmap.mmap(self._data_fd, 2 * self._psize, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
            if self._used() == (self.env.info()["last_pgno"] + 1) * self._psize:
                return
            why = "the used size read from its meta pages is not LMDB's"
        except (OSError, ValueError, struct.error) as exc:
            why = str(exc)
        self._unmap_metas()
        log.warning("%s: LMDB's used size is asked of env.info() before every write (slower): %s", self.path, why)

    def _unmap_metas(self) -> None:
        metas, self._metas = self._metas, None
        if metas is not None:
            metas.close()
