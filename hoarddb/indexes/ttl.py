"""The TTL sweeper: a background thread that deletes expired documents of TTL-indexed buckets.

Every ``interval`` seconds (Options.ttl_sweep_seconds, from HOARDDB_TTL_SWEEP_SECONDS;
0 turns it off) it visits each hash bucket with a TTL index and lets the store delete
what has expired, for at most ``budget`` seconds a pass (HOARDDB_TTL_SWEEP_BUDGET_SECONDS).
Deleting is the store's job (each expiry is checked again in the deleting
transaction); the sweeper only paces the work and counts it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Iterable

log = logging.getLogger("hoarddb.ttl")


class Sweeper:
    """Sweeper runs sweep passes on a daemon thread until stopped.

    ``stores()`` gives the stores to sweep, or None once their owner is gone: the thread
    then ends. The engine gives a function that holds it weakly, so that the thread never
    keeps an engine its user dropped alive (its finalizer stops the sweeper).
    """

    def __init__(self, stores: Callable[[], Iterable], metrics, interval: float, budget: float):
        self.stores = stores
        self.metrics = metrics
        self.interval = interval
        self.budget = budget
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pass_lock = threading.Lock()

    def start(self) -> None:
        if self.interval > 0:
            self._thread = threading.Thread(target=self._run, name="hoarddb-ttl-sweeper", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop sweeping, and wait for a pass under way to end (unless called from the
        sweeper's own thread: an engine freed as a pass ends is closed there)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sweep()
            except Exception:  # keep sweeping next time; a closed store mid-pass lands here at shutdown
                if not self._stop.is_set():
                    log.exception("TTL sweep failed; trying again in %ss", self.interval)

    def sweep(self, now: float | None = None) -> dict:
        """One pass over every TTL bucket; ``{expired, skipped, backlog, exhausted, failed}`` summed
        (``failed``: buckets whose sweep raised; logged, and tried again next pass)."""
        with self._pass_lock:
            deadline = time.monotonic() + self.budget
            total = {"expired": 0, "skipped": 0, "backlog": 0, "exhausted": False, "failed": 0}
            stores = self.stores()
            if stores is None:  # the engine is gone: nothing to sweep, ever again
                self._stop.set()
                return total
            for store in stores:
                if self._stop.is_set():
                    break
                try:
                    got = store.sweep(time.time() if now is None else now, deadline)
                except Exception:
                    # One bucket that cannot be swept (a declaration an older version let
                    # through, a store closed under us) must not stop the others' expiry.
                    if self._stop.is_set():
                        break
                    log.exception("TTL sweep of bucket %s failed; the other buckets are swept, "
                                  "and it is tried again next pass", getattr(store, "name", store))
                    total["failed"] += 1
                    continue
                if got["expired"] or got["exhausted"]:
                    log.info("TTL sweep of %s: %d documents expired%s", _where(store), got["expired"],
                             f", {got['backlog']} more due (the pass's budget ran out)" if got["exhausted"] else "")
                for key in ("expired", "skipped", "backlog"):
                    total[key] += got[key]
                total["exhausted"] |= got["exhausted"]
            self.metrics.ttl_documents.labels("expired").inc(total["expired"])
            self.metrics.ttl_documents.labels("skipped").inc(total["skipped"])
            self.metrics.ttl_backlog.set(total["backlog"])
            if total["exhausted"]:
                self.metrics.ttl_budget_exhausted.inc()
            return total


def _where(store) -> str:
    """A bucket as the log names it: DB.BUCKET, from its directory (DATA/DB/BUCKET)."""
    directory = getattr(store, "directory", None)
    return f"{directory.parent.name}.{directory.name}" if directory is not None else str(getattr(store, "name", store))
