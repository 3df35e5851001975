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
        """
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    return fn(txn)
            except lmdb.MapFullError:
                self._grow()
            except lmdb.DiskError as exc:
                raise StorageError(f"write to {self.path} failed: {exc}; check free disk space") from None

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
