"""The lifo store type: a stack in segment files, popped newest first.

Every verb is :class:`~hoarddb.stores.fifo.QueueVerbs`' (a bucket's and a store field's
alike); a lifo only takes from the tail, where a bucket's pop is one truncation of the
last segment (see :mod:`hoarddb.storage.segment`). ``list`` still reads oldest first, the
reverse of pop order.
"""

from __future__ import annotations

from typing import ClassVar

from .fifo import FifoField, SegmentStore


class LifoStore(SegmentStore):
    """LifoStore is a stack: ``pop`` and ``peek`` take the newest element first."""

    type_name: ClassVar[str] = "lifo"

    def _take(self, n: int) -> list[bytes]:
        return self.log.take_tail(n)

    def _look(self, n: int) -> list[bytes]:
        return self.log.read_tail(n)


class LifoField(FifoField):
    """LifoField is a document's lifo store field: ``pop`` and ``peek`` take the newest element first."""

    def _take(self, n: int) -> list[bytes]:
        return self.log.take_tail(n)

    def _look(self, n: int) -> list[bytes]:
        return self.log.read_tail(n)
