"""The KV engine: one LMDB environment, its write transactions, and growing its map."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, TypeVar

import lmdb

from ..errors import StorageError

T = TypeVar("T")


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

    def _grow(self) -> None:
        with self._grow_lock:
            size = self.env.info()["map_size"]
            self.env.set_mapsize(size * 2)

    def close(self) -> None:
        self.env.close()
