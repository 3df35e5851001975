"""The slow log: the last requests that took longer than ``slow_ms``, kept in memory as MongoDB's
profiler and Redis's SLOWLOG keep them, for ``hoarddb slowlog`` and the ``slowlog`` operation.

Each entry says what ran and for whom, never its arguments (a filter may hold what a
user would not want in a log): ``{id, time, micros, op, db, bucket, field, peer, user,
code}``. ``id`` grows by one per entry from the server's start, so a reader who polls
sees which entries it has not seen yet; ``code`` is the refusal's codeName, or None.
"""

from __future__ import annotations

import datetime
import itertools
from collections import deque


class SlowLog:
    """SlowLog keeps the newest ``length`` requests slower than ``threshold_ns`` (on the loop's thread)."""

    def __init__(self, threshold_ms: float, length: int):
        #: Requests at least this slow are kept (and logged); 0 keeps every request.
        self.threshold_ns = int(threshold_ms * 1_000_000)
        self.entries: deque[dict] = deque(maxlen=length)
        self._ids = itertools.count(1)

    def add(self, nanoseconds: int, doc: dict, peer: str, user: str | None, code: str | None) -> dict:
        """Keep one slow request; the entry kept."""
        entry = {"id": next(self._ids), "time": datetime.datetime.now(datetime.timezone.utc),
                 "micros": nanoseconds // 1000, "op": _text(doc.get("op")), "db": _text(doc.get("db")),
                 "bucket": _text(doc.get("bucket")), "field": _text(_field_address(doc)), "peer": peer, "user": user,
                 "code": code}
        self.entries.append(entry)
        return entry

    def newest(self, limit: int | None = None) -> list[dict]:
        """The entries kept, newest first (at most ``limit``); from any thread (list() of a
        deque runs in C, whole, while the loop's thread may append)."""
        out = list(self.entries)[::-1]
        return out if limit is None else out[:limit]

    def reset(self) -> int:
        """Forget every entry; how many there were."""
        n = len(self.entries)
        self.entries.clear()
        return n


def _field_address(doc: dict):
    """The store field a request names, by its declared address: ``Friends``, a level deeper
    ``Friends.Messages`` (never the keys: a document's key may be what a log must not hold)."""
    field, path = doc.get("field"), doc.get("path")
    if isinstance(field, str) and isinstance(path, list):
        return ".".join([field] + [step["field"] for step in path
                                   if isinstance(step, dict) and isinstance(step.get("field"), str)])
    return field


def _text(value) -> str | None:
    """A request's name field as it may be shown: a string cut at 100 characters, else None."""
    return value[:100] if isinstance(value, str) else None
