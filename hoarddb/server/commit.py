"""Group commit: the writes of one turn of the event loop run together, share one fsync, and are answered after it.

The engine runs with ``Options(sync=False)``: a write is applied (visible) without an
fsync. The server hands each write to :meth:`GroupCommitter.submit` as it reads it,
and writes that ran elsewhere (the thread pools) to :meth:`after_durable`. Once per
turn of the event loop — after every connection has handed in what it read — one
*flush* runs, as Redis does with ``appendfsync always``:

    turn k      connections read requests; writes are submitted (nothing runs yet)
    turn k+1    flush: Engine.execute_group(all of them, in order)   one LMDB commit per bucket
                       Engine.sync()                                  one fsync per file written
                       answer every write of the group, refusals included
    meanwhile   writes read while a flush runs wait for the next one

so under load each fsync covers everything that arrived during the previous one, and a
lone client pays one fsync and no hand-off beyond the flush thread's.

The flush runs on a thread of its own, and the event loop waits for it only a little
(``WAIT``): a flush that takes longer — a slow disk, a big batch — finishes in the
background and the loop goes back to serving reads, so reads are never held behind a
slow fsync. Except when the server has one connection (``alone``): nobody else is
waiting to be served, and the flush runs on the event loop itself, as Redis runs its
fsync — the hand-off to the flush thread and back costs more than the rest of the
write (measured: ~50 us of a 400 us durable write, a fifth of the server's CPU). A
connection that arrives meanwhile waits for that one flush. A refusal is answered with
its group: a refused write wrote nothing, and the sync of a group that wrote nothing
costs nothing.

Writes that may take long (``may_be_long``: an update or delete that scans, a batch of
many documents) run on the flush thread even for a lone connection, so that the loop
keeps serving connections that arrive meanwhile, /metrics and /healthz.

A lone flush of one write, with nothing else in flight (``quiet``: no request of that
connection read and waiting behind it, no task in the server's pools), holds its LMDB
commit until its answer is sent (``Engine.commits_deferred``). Its log record is
flushed before the answer, so it is exactly as durable; LMDB's commit (a dozen pages
copied into the page cache) then runs while the client reads the answer, instead of
before it: 4–16% off a lone client's durable insert, hash insert or heap push over the
wire (docs/benchmarks.md). No one can read in between: the write, its flush, its answer
and the commit run in one callback of the event loop, and no request is running in the
server's pools.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from typing import Callable, ContextManager

from .. import operations
from ..errors import HoardError, InternalError, StorageError

log = logging.getLogger("hoarddb.server")

#: Seconds the event loop waits for a flush before it goes on serving and lets the flush
#: finish in the background. Long enough for a group and its fsync on a healthy disk
#: (a fraction of a millisecond to a few), short enough that a read never notices.
WAIT = 0.002


class GroupCommitter:
    """GroupCommitter runs submitted writes in groups, one fsync each, and answers them once durable.

    :param engine: the Engine (``execute_group`` and ``sync``).
    :param executor: a one-thread pool the flushes run on.
    :param metrics: ServerMetrics (fsyncs, operations per fsync, fsync seconds), or None.
    :param answering: a context manager the answers of one group are sent inside (the
        server holds each connection's answers and writes them with one send).
    :param alone: whether one connection is all there is (its flushes run on the loop).
    :param quiet: whether nothing is in flight but the flush's writes (see above).
    :param limits: a context manager each group's writes run inside (the server's limits
        on a request's evaluation, such as its regex_timeout).
    """

    def __init__(self, engine, executor: concurrent.futures.ThreadPoolExecutor, metrics=None,
                 answering: Callable[[], ContextManager] = contextlib.nullcontext,
                 alone: Callable[[], bool] = lambda: False, quiet: Callable[[], bool] = lambda: False,
                 limits: Callable[[], ContextManager] = contextlib.nullcontext):
        self._answering = answering
        self._limits = limits
        self._alone = alone
        self._quiet = quiet
        self._commits_deferred = engine.commits_deferred
        self._execute_group = engine.execute_group
        self._sync = engine.sync
        self._executor = executor
        self._metrics = metrics
        self._writes: list[tuple[dict, Callable]] = []  # submitted, not run yet
        self._long = False  # whether one of them may take long (may_be_long)
        self._waiting: list[Callable[[HoardError | None], None]] = []  # ran elsewhere, waiting for a sync
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled = False
        self._running = False
        self._idle: asyncio.Event | None = None
        self.fsyncs = 0
        self.operations = 0
        self.inline = 0  # flushes run on the event loop (one connection)
        self.deferred = 0  # ... of one write whose LMDB commit came after its answer

    # -- handing work in (on the event loop)

    def submit(self, request: dict, callback: Callable[[dict | HoardError], None]) -> None:
        """Run ``request`` in the next group; ``callback(answer)`` once it is durable, or
        ``callback(error)`` if it was refused (or its group could not be made durable)."""
        self._writes.append((request, callback))
        if not self._long and may_be_long(request):
            self._long = True  # (looked at here, once per write, not at the flush: see _flush)
        self._schedule()

    def after_durable(self, callback: Callable[[HoardError | None], None]) -> None:
        """Call ``callback(None)`` once a sync that began after now has returned
        (``callback(error)`` if it failed)."""
        self._waiting.append(callback)
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled and not self._running:
            self._scheduled = True
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
                self._idle = asyncio.Event()
            self._idle.clear()
            self._loop.call_soon(self._flush)

    # -- one flush

    def _flush(self) -> None:
        self._scheduled = False
        if self._running or not (self._writes or self._waiting):
            return
        writes, self._writes = self._writes, []
        waiting, self._waiting = self._waiting, []
        long, self._long = self._long, False
        self._running = True
        # nobody to serve meanwhile: no hand-off (unless a write may take long, see may_be_long)
        if self._alone() and not long:
            self.inline += 1
            if len(writes) == 1 and not waiting and self._quiet():  # its commit after its answer
                self.deferred += 1
                with self._commits_deferred():
                    self._finish(writes, waiting, self._group([writes[0][0]]))
                return
            self._finish(writes, waiting, self._group([request for request, _ in writes]))
            return
        future = self._executor.submit(self._group, [request for request, _ in writes])
        try:
            outcome = future.result(WAIT)
        except concurrent.futures.TimeoutError:  # a slow one: finish it when it is done, serve meanwhile
            future.add_done_callback(
                lambda f: self._loop.call_soon_threadsafe(self._finish, writes, waiting, f.result()))
            return
        self._finish(writes, waiting, outcome)

    def _group(self, requests: list[dict]) -> tuple[list, HoardError | None, int, float]:
        """On the flush thread: run the writes, then make everything written durable."""
        try:
            with self._limits():
                # (every request passed check_request in the server's dispatch)
                results = self._execute_group(requests, checked=True) if requests else []
        except BaseException as exc:  # a bug: every write of the group hears of it
            log.exception("a group of %d writes failed", len(requests))
            results = [InternalError(f"{type(exc).__name__}: {exc} (please report this)")] * len(requests)
        started = time.perf_counter()
        error: HoardError | None = None
        try:
            self._sync()
        except Exception as exc:  # the writes happened but are not known to be on disk
            log.critical("fsync failed; %d writes are applied but may not be durable: %s", len(requests), exc)
            error = StorageError(
                f"the write was applied but could not be made durable: fsync failed ({exc}); "
                "check the disk, then read the data back before relying on it")
        return results, error, sum(1 for r in results if not isinstance(r, HoardError)), time.perf_counter() - started

    def _finish(self, writes: list, waiting: list, outcome: tuple) -> None:
        """On the event loop: answer the group, then start the next if work came in meanwhile."""
        results, error, written, seconds = outcome
        self._running = False
        durable = written + len(waiting)
        if durable:
            self.fsyncs += 1
            self.operations += durable
            if self._metrics is not None:
                self._metrics.committed(durable, seconds)
        with self._answering():
            for (_, callback), result in zip(writes, results):
                try:
                    callback(error if error is not None and not isinstance(result, HoardError) else result)
                except Exception:
                    log.exception("answering a write failed")
            for callback in waiting:
                try:
                    callback(error)
                except Exception:
                    log.exception("answering a durable write failed")
        if self._writes or self._waiting:
            self._schedule()
        elif self._idle is not None:
            self._idle.set()

    async def flush(self) -> None:
        """Return once every write handed in so far has run, been made durable and been answered."""
        while self._scheduled or self._running or self._writes or self._waiting:
            self._schedule()
            await self._idle.wait()


#: Verbs that write many documents given in the request: long when they are given many.
_BATCHES = frozenset(n for n, op in operations.VERBS.items() if op.cost == operations.BATCH)
#: Verbs that write what a filter (or a target) finds: long unless it names one key.
_FILTERED = {n: op.params[0].name for n, op in operations.VERBS.items() if op.cost == operations.FILTERED_WRITE}
#: More documents than this in one batch make it a long write.
LONG_BATCH = 100


def may_be_long(request: dict) -> bool:
    """Whether a write may take long: an update or delete by a filter other than one key
    (it scans), or a batch of many documents. Even a lone connection's flush then runs on
    the flush thread, not the event loop: an update of a whole bucket took seconds there,
    and a connection arriving meanwhile, /metrics and /healthz, waited for all of it."""
    op = request.get("op")
    args = request.get("args")
    if not isinstance(args, dict):
        return False
    if op in _FILTERED:
        return not _one_key(args.get(_FILTERED[op]))
    if op in _BATCHES:
        docs = args.get("docs")
        return isinstance(docs, list) and len(docs) > LONG_BATCH
    return False


def _one_key(target) -> bool:
    """A delete's target or an update's filter that names one document by its key."""
    if not isinstance(target, dict):
        return True  # a key (or no target: refused at once)
    return list(target) == ["_id_"] and not isinstance(target["_id_"], dict)
