"""Group commit: many writes, one fsync, and no write answered before it is durable.

The engine runs with ``Options(sync=False)``: a write is committed (visible) without
an fsync. Each finished write hands its answer to :meth:`GroupCommitter.after_durable`;
one task calls ``Engine.sync()`` (fsync of everything written so far) and, when it
returns, sends the answers of every write that had finished *before that sync began*.
Writes that finish while a sync runs wait for the next one, so under load each fsync
covers all the writes that arrived during the previous one: throughput grows with the
number of clients instead of being one fsync per write. Reads never come here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from ..errors import HoardError, StorageError

log = logging.getLogger("hoarddb.server")


class GroupCommitter:
    """GroupCommitter batches the answers of finished writes behind shared fsyncs.

    :param sync: the blocking call that makes every committed write durable.
    :param executor: where ``sync`` runs (one thread of its own, so reads never wait).
    """

    def __init__(self, sync: Callable[[], None], executor, metrics=None):
        self._sync = sync
        self._executor = executor
        self._metrics = metrics
        self._waiting: list[Callable[[HoardError | None], None]] = []
        self._task: asyncio.Task | None = None
        self.fsyncs = 0
        self.operations = 0

    def after_durable(self, callback: Callable[[HoardError | None], None]) -> None:
        """Call ``callback(None)`` once a sync that began after now has returned
        (``callback(error)`` if it failed)."""
        self._waiting.append(callback)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self._waiting:
            batch, self._waiting = self._waiting, []
            started = time.perf_counter()
            error: HoardError | None = None
            try:
                await loop.run_in_executor(self._executor, self._sync)
            except Exception as exc:  # the writes happened but are not known to be on disk
                log.critical("fsync failed; %d writes are applied but may not be durable: %s", len(batch), exc)
                error = StorageError(
                    f"the write was applied but could not be made durable: fsync failed ({exc}); "
                    "check the disk, then read the data back before relying on it")
            self.fsyncs += 1
            self.operations += len(batch)
            if self._metrics is not None:
                self._metrics.fsyncs.inc()
                self._metrics.ops_per_fsync.observe(len(batch))
                self._metrics.fsync_seconds.observe(time.perf_counter() - started)
            for callback in batch:
                try:
                    callback(error)
                except Exception:
                    log.exception("answering a durable write failed")

    async def flush(self) -> None:
        """Return once every write handed in so far has been made durable and answered."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)
