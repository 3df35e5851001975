"""The fifo store type: a queue in segment files, popped oldest first; and the verbs fifo and lifo share.

Both types keep their elements in a :class:`~hoarddb.storage.segment.SegmentLog` (see
that module for the files, the state slots and what a crash leaves). They differ only
in which end ``pop`` and ``peek`` take from, so :class:`SegmentStore` holds every verb
and each type names its end: :class:`FifoStore` here, ``LifoStore`` in
:mod:`hoarddb.stores.lifo`.

    >>> q = FifoStore(directory, {"type": "fifo", "options": {}}, Options())
    >>> q.batch_push([{"n": 1}, {"n": 2}, {"n": 3}])
    3
    >>> q.pop()
    {'n': 1}
    >>> q.peek(5)
    [{'n': 2}, {'n': 3}]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Mapping

from ..errors import BadValueError, InvalidArgumentError
from ..options import Options
from ..storage.segment import SegmentLog
from ..values.codec import decode
from .base import Store, check_limit, directory_bytes, encode_document

#: The smallest segment a bucket may declare: a page.
MIN_SEGMENT_SIZE = 4096


class SegmentStore(Store):
    """SegmentStore is a bucket of elements in segment files; subclasses say which end ``pop`` takes.

    ``push`` and ``batch_push`` add at the tail; ``list`` reads in storage order (oldest
    first) for both types; ``pop`` and ``peek`` read in the subclass's order.
    """

    verbs: ClassVar[frozenset[str]] = frozenset({"push", "batch_push", "pop", "peek", "length", "list"})
    bucket_options: ClassVar[dict[str, str]] = {"segment_size": "bytes per segment file (default 64 MiB)"}

    def __init__(self, directory: Path, declaration: Mapping[str, Any], options: Options):
        super().__init__(directory, declaration, options)
        bucket_options = self.validate_options((declaration or {}).get("options") or {})
        segment_size = bucket_options.get("segment_size", options.segment_size)
        self.log = SegmentLog(self.directory, self.type_name, segment_size, sync=options.sync)

    @classmethod
    def validate_options(cls, bucket_options: Mapping[str, Any]) -> dict:
        """The bucket options; ``segment_size`` must be an integer of at least 4096 bytes."""
        checked = dict(bucket_options)
        size = checked.get("segment_size")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < MIN_SEGMENT_SIZE):
            raise BadValueError(
                f"segment_size is the bytes of one segment file, an integer of at least {MIN_SEGMENT_SIZE} "
                f"(the default is 64 MiB = 67108864); got {size!r}"
            )
        return checked

    # -- the end each type takes from ------------------------------------------------------

    def _take(self, n: int) -> list[bytes]:
        raise NotImplementedError

    def _look(self, n: int) -> list[bytes]:
        raise NotImplementedError

    # -- writes -------------------------------------------------------------------------------

    def push(self, doc: Mapping) -> None:
        """Add one element at the tail; durable when this returns."""
        self.log.append([encode_document(doc)])

    def batch_push(self, docs: list) -> int:
        """Add every element at the tail in one durable write and return how many.

        A document that cannot be stored refuses the whole batch, naming its position
        (from 0); nothing is written then. An empty list adds nothing and returns 0.
        """
        if not isinstance(docs, (list, tuple)):
            raise InvalidArgumentError(
                f"batch_push takes a list of documents, got {type(docs).__name__}: {docs!r:.80}"
            )
        payloads = [encode_document(d, f"document at position {i} of the batch") for i, d in enumerate(docs)]
        self.log.append(payloads)
        return len(payloads)

    def pop(self, limit: int | None = None):
        """Remove and return the next element, or None when empty.

        With a ``limit`` (1 to ``max_pop``, 100 by default), remove up to that many in one
        durable write and return them as a list in pop order (empty when there are none).
        """
        n = 1 if limit is None else check_limit(limit, self.options.max_pop, "pop")
        docs = [decode(p) for p in self._take(n)]
        if limit is None:
            return docs[0] if docs else None
        return docs

    # -- reads --------------------------------------------------------------------------------

    def peek(self, limit: int | None = None):
        """The element pop would return, without removing it (None when empty).

        With a ``limit`` (1 to ``max_peek``, 1000 by default), a list of the next ones in pop order.
        """
        n = 1 if limit is None else check_limit(limit, self.options.max_peek, "peek")
        docs = [decode(p) for p in self._look(n)]
        if limit is None:
            return docs[0] if docs else None
        return docs

    def length(self) -> int:
        """How many elements the bucket holds (O(1))."""
        return len(self.log)

    def list(self, after: int = 0, limit: int = 100) -> list[dict]:
        """Up to ``limit`` elements in storage order, oldest first, skipping the first ``after``.

        On a lifo bucket this is the reverse of pop order. Nothing is removed.
        """
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise BadValueError(f"list's after is how many elements to skip, an integer ≥ 0; got {after!r}")
        check_limit(limit, self.options.max_peek, "list")
        return [decode(p) for p in self.log.read_range(after, limit)]

    def stats(self) -> dict:
        """``{"entries": n, "bytes": bytes on disk, "segments": segment files}``."""
        return {"entries": len(self.log), "bytes": directory_bytes(self.directory), "segments": self.log.segments}

    def close(self) -> None:
        """Close the segment files; later calls raise ClosedError."""
        self.log.close()


class FifoStore(SegmentStore):
    """FifoStore is a queue: ``pop`` and ``peek`` take the oldest element first."""

    type_name: ClassVar[str] = "fifo"

    def _take(self, n: int) -> list[bytes]:
        return self.log.take_head(n)

    def _look(self, n: int) -> list[bytes]:
        return self.log.read_head(n)
