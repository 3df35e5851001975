"""Ending the background asyncio tasks of a node's cluster parts (watches, keepalive, mover, join) when they stop.

Each part starts its tasks itself and ends them in its ``stop`` with :func:`cancel_and_wait`, so
that a stopped node leaves no task of its own running behind it.
"""

from __future__ import annotations

import asyncio


async def cancel_and_wait(*tasks: asyncio.Task | None) -> None:
    """Cancel every task given, then wait for each in turn until it has ended; ``None`` is skipped.

    All are cancelled before the first is awaited, so they wind down together. Whatever a task
    ends with is swallowed: its cancellation, or an exception it raised. So is a cancellation
    of the caller while it waits here: a stop goes on to its end. A task already done is
    awaited as well (so its exception counts as retrieved); a caller that must leave a done
    task alone checks :meth:`asyncio.Task.done` itself.
    """
    present = [task for task in tasks if task is not None]
    for task in present:
        task.cancel()
    for task in present:
        try:
            await task
        except (asyncio.CancelledError, Exception):
            pass
