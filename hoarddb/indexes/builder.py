"""The index builder: a background thread that rebuilds, after the database opens, the indexes that need it.

An index needs a rebuild when its entries were written in an older format, or when it
is ``conflicted`` (one unique value in two documents: the rebuild finds whether that
is still so). The bucket opens at once with the index ``building``; search refuses it
(INDEX_NOT_READY, with the progress), while find, count, dump and writes go on. The
store rebuilds it a batch of documents at a time, each batch one write transaction,
so other writes of the bucket run between batches (hoarddb.stores.hash, build_indexes).

Building is the store's job; the thread only walks the buckets and persists each
bucket's new declarations when it is done. It stops between batches when the engine
closes: what it had written is thrown away by the rebuild at the next open, as the
catalog still records the old format.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable

log = logging.getLogger("hoarddb.indexes")


class Builder:
    """Builder runs one pass over the buckets whose indexes need a rebuild, on a daemon thread.

    ``jobs()`` gives ``(store, done)`` pairs — ``done(declarations)`` persists a bucket's
    index declarations (as the rebuild begins, and once it is done) — or None once the
    engine is gone (held weakly, as the TTL sweeper holds it).
    """

    def __init__(self, jobs: Callable[[], Iterable | None]):
        self.jobs = jobs
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="hoarddb-index-builder", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop at the next batch, and wait for the thread (unless called from it)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        try:
            jobs = self.jobs()
            if jobs is None:
                return
            for store, done in jobs:
                if self._stop.is_set():
                    return
                try:
                    declarations = store.build_indexes(self._stop, done)
                except Exception:
                    if self._stop.is_set():
                        return  # a store closed under us at shutdown
                    log.exception("rebuilding the indexes of bucket %s failed; they stay building, and are rebuilt "
                                  "at the next open", getattr(store, "name", store))
                    continue
                if declarations is not None and not self._stop.is_set():
                    done(declarations)
        except Exception:
            if not self._stop.is_set():
                log.exception("the index builder stopped; indexes still building are rebuilt at the next open")
