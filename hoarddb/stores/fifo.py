"""The fifo store type: a queue popped oldest first; and the verbs fifo and lifo share, as a bucket and as a store field.

:class:`QueueVerbs` is what a queue does, once, over its storage ``log``. A bucket keeps
its elements in a :class:`~hoarddb.storage.segment.SegmentLog` (see that module for the
files, the state slots and what a crash leaves): :class:`SegmentStore`. A document's
store field keeps them as keys in its bucket's LMDB environment, a
:class:`~hoarddb.stores.keyspace.KeyLog` with the same methods: :class:`FifoField`. The
two types differ only in which end ``pop`` and ``peek`` take from, so each names its end:
:class:`FifoStore` and :class:`FifoField` here, ``LifoStore`` and ``LifoField`` in
:mod:`hoarddb.stores.lifo`.

    >>> q = FifoStore(directory, {"type": "fifo", "options": {}}, Options())
    >>> q.batch_push([{"n": 1}, {"n": 2}, {"n": 3}])
    3
    >>> q.pop()
    {'n': 1}
    >>> q.peek(5)
    [{'n': 2}, {'n': 3}]

A fifo bucket can also be consumed by workers with claim/ack (:class:`FifoStore`, whose
docstring draws the claim environment and what a crash leaves; docs/user/queues.md).
"""

from __future__ import annotations

from abc import abstractmethod

import logging
import threading
from pathlib import Path
from typing import Any, ClassVar, Mapping

from ..errors import BadValueError, ClosedError, CorruptDataError, HoardError, InvalidArgumentError, StorageError
from ..options import MIN_SEGMENT_SIZE, Options
from ..storage.oserrors import fsync_directory
from ..storage import segment
from ..storage.segment import SegmentLog
from ..values.codec import DECODE_ERRORS, RAW_CODEC_OPTIONS, decode
from bson.raw_bson import RawBSONDocument
from . import claims
from .base import REBUILD, Problem, Problems, Reply, Store, check_limit, check_namespaces, directory_bytes, \
    encode_document, scan
from .claims import CLAIM, CLAIM_OPTIONS, ClaimTable, ClaimVerbs, load_records, validate_claim_options
from .keyspace import KeyLog, Keyspace

log = logging.getLogger("hoarddb.segment")



class QueueVerbs:
    """QueueVerbs is what a fifo or lifo does, over its storage ``self.log``: a SegmentLog
    (a bucket) or a :class:`~hoarddb.stores.keyspace.KeyLog` (a document's store field).

    ``push`` and ``batch_push`` add at the tail; ``list`` reads in storage order (oldest
    first) for both types; ``pop`` and ``peek`` read in the order of ``_take`` and ``_look``,
    which each type gives. ``options`` gives ``max_pop`` and ``max_peek``.
    """

    #: What an element is called in a refusal, alone and in a batch (a bucket says
    #: "document", a store field "element": the two kept the words they always had).
    ONE: ClassVar[str] = "document"
    NTH: ClassVar[str] = "document at position {} of the batch"

    # -- the end each type takes from ------------------------------------------------------

    @abstractmethod
    def _take(self, n: int) -> list[bytes]:
        """Remove and return up to ``n`` payloads from the end pop takes from (fifo: head, lifo: tail)."""

    @abstractmethod
    def _look(self, n: int) -> list[bytes]:
        """Up to ``n`` payloads from that end, not removed."""

    # -- writes -------------------------------------------------------------------------------

    def push(self, doc: Mapping) -> None:
        """Add one element at the tail; durable when this returns."""
        self.log.append([encode_document(doc, self.ONE)])

    def batch_push(self, docs: list) -> int:
        """Add every element at the tail in one durable write and return how many.

        A document that cannot be stored refuses the whole batch, naming its position
        (from 0); nothing is written then. An empty list adds nothing and returns 0.
        """
        if not isinstance(docs, (list, tuple)):
            raise InvalidArgumentError(
                f"batch_push takes a list of documents, got {type(docs).__name__}: {docs!r:.80}"
            )
        payloads = [encode_document(d, self.NTH.format(i)) for i, d in enumerate(docs)]
        self.log.append(payloads)
        return len(payloads)

    def pop(self, limit: int | None = None):
        """Remove and return the next element, or None when empty.

        With a ``limit`` (1 to ``max_pop``, 100 by default), remove up to that many in one
        durable write and return them as a list in pop order (empty when there are none).
        """
        n = 1 if limit is None else check_limit(limit, self.options.max_pop, "pop")
        docs = [decode(p) for p in self._pop_payloads(n)]
        if limit is None:
            return docs[0] if docs else None
        return docs

    def _pop_payloads(self, n: int) -> list[bytes]:
        """What a pop of ``n`` removes, as stored (BSON)."""
        return self._take(n)

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
        """How many elements the queue holds."""
        return len(self.log)

    def list(self, after: int = 0, limit: int = 100) -> list[dict]:
        """Up to ``limit`` elements in storage order, oldest first, skipping the first ``after``.

        On a lifo bucket this is the reverse of pop order. Nothing is removed.
        """
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise BadValueError(f"list's after is how many elements to skip, an integer ≥ 0; got {after!r}")
        check_limit(limit, self.options.max_peek, "list")
        return [decode(p) for p in self.log.read_range(after, limit)]


class FifoField(QueueVerbs):
    """FifoField is a document's fifo store field: the queue's verbs over a keyspace of its
    bucket's LMDB environment (:class:`~hoarddb.stores.keyspace.KeyLog`), popped oldest first."""

    ONE, NTH = "element", "element {} of the batch"

    def __init__(self, space: Keyspace, options: Options):
        self.log, self.options = KeyLog(space), options

    def _take(self, n: int) -> list[bytes]:
        return self.log.take_head(n)

    def _look(self, n: int) -> list[bytes]:
        return self.log.read_head(n)


class SegmentStore(QueueVerbs, Store):
    """SegmentStore is a fifo or lifo bucket: the queue's verbs (:class:`QueueVerbs`) over
    segment files, and what only a bucket has (group commit's batches, dumps, stats)."""

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

    @classmethod
    def check(cls, directory, declaration):
        """Every entry of every segment from the head on passes its crc and decodes, each
        segment file names this queue and its own number, and the segment files are what
        the state's clean close counted (:func:`hoarddb.storage.segment.verify`)."""
        problems = Problems()
        for name, what in segment.verify(Path(directory), cls.type_name):
            problems.append(Problem(name, what))
        return problems

    def check_open(self, declaration: Mapping[str, Any]) -> list[Problem]:
        """:meth:`check` on the open bucket, while it serves: the same walk over one moment of
        the log (its state and where its segments' entries end, taken under its lock), read
        while pushes and pops go on (:mod:`hoarddb.storage.segment_check`): what is pushed
        after that moment is not read, and a segment popped meanwhile is not reported."""
        problems = Problems()
        for name, what in self.log.check_open():
            problems.append(Problem(name, what))
        return problems

    # -- what only a bucket has -------------------------------------------------------------

    def push_each(self, docs: list) -> list:
        """Push each document as ``push`` would, in one append: per document None (pushed)
        or the error that refused it alone. A server's group of pushes to one queue."""
        outcomes: list = []
        payloads = []
        for doc in docs:
            try:
                payloads.append(encode_document(doc))
                outcomes.append(None)
            except HoardError as exc:
                outcomes.append(exc)
        self.log.append(payloads)
        return outcomes

    def pop_each(self, n: int) -> list:
        """What ``n`` pops in a row would return (a document or None each), taken
        ``max_pop`` at a time. A server's group of pops of one queue: the documents are
        read-only ``RawBSONDocument`` views of the stored bytes, which go into the answers
        on the wire as they are, never decoded."""
        out: list = []
        while len(out) < n:
            payloads = self._pop_payloads(min(n - len(out), self.options.max_pop))
            out += [RawBSONDocument(p, RAW_CODEC_OPTIONS) for p in payloads]
            if not payloads:
                break
        return out + [None] * (n - len(out))

    def export(self, cursor: Any = None, limit: int = 1000) -> dict:
        """A page of every element in storage order, for dumps: ``{docs, next}``; pass ``next`` back as ``cursor``.

        ``next`` is None on the last page. The cursor is an element's number counted from
        the first element ever pushed, so paging stays right while a fifo is being popped.
        """
        if cursor is not None and (isinstance(cursor, bool) or not isinstance(cursor, int) or cursor < 0):
            raise BadValueError(f"export's cursor is the next of the previous page, an integer ≥ 0; got {cursor!r}")
        check_limit(limit, 10_000, "export")
        payloads, position = self.log.read_page(cursor or 0, limit)
        docs = [decode(p) for p in payloads]
        return {"docs": docs, "next": position + len(docs) if len(docs) == limit else None}

    def load(self, docs: list) -> dict:
        """Restore elements as a dump holds them, oldest first (as batch_push): ``{loaded}``."""
        return {"loaded": self.batch_push(docs)}

    def sync(self, logs: list | None = None) -> None:
        """Make every write so far durable; with ``options.sync`` on each write already was."""
        if not self.options.sync:
            self._sync_log(logs)

    def _sync_log(self, logs: list | None) -> None:
        if logs is None:
            self.log.flush()
        else:
            logs.append(self.log)  # (flushed with the group's other logs: Store.sync)

    def backup(self, target: Path) -> None:
        """The segment files and ``state.bson``, copied byte for byte with the log held still
        (pushes and pops wait for the copy: a big queue holds them for as long as its files take)."""
        with self.log.held():
            self._copy_log(target)

    def _copy_log(self, target: Path) -> None:
        import shutil

        target.mkdir(parents=True)
        for path in sorted(self.directory.iterdir()):
            if path.is_file():
                shutil.copyfile(path, target / path.name)

    def stats(self) -> dict:
        """``{"entries": n, "bytes": bytes on disk, "data_bytes": bytes of its entries, "segments": segment files}``."""
        return {"entries": len(self.log), "bytes": directory_bytes(self.directory), "data_bytes": self.log.data_bytes,
                "segments": self.log.segments}

    def close(self) -> None:
        """Close the segment files; later calls raise ClosedError."""
        self.log.close()


class FifoStore(ClaimVerbs, SegmentStore):
    """FifoStore is a queue: ``pop`` and ``peek`` take the oldest element first; workers may claim and ack.

    The claim table (:mod:`hoarddb.stores.claims`) lives in its own LMDB environment,
    ``claims/`` in the bucket directory, made by the first claim; a fifo never claimed
    from has none and answers ``length`` and ``peek`` as a plain queue. In ``claims/``:

        b"L" + position (u64 BE)  ->  claim header (token, deliveries, expires)
        b"E" + position           ->  the element's BSON, copied out of the segment log
        b"Mtaken"                 ->  u64 BE: entries the log's head must have passed

    A position is the element's number from the first ever pushed (the export cursor's
    count: ``log.popped`` + its place in the log), so claimed elements keep their push
    order. Claiming new elements moves them from the log's head into the table, in
    two writes ordered so that a crash can only repeat the second, never lose the
    first:

        1. read n entries at the head            (nothing written)
        2. LMDB commit: E+pos -> BSON, L+pos -> header, Mtaken = head + n    <- the commit (durable)
        3. log.take_head(n, durable=False): state.bson's next slot = head + n (no fsync)

        crash before 2 ends: nothing claimed, the entries are still at the head
        crash after 2:       the claims are durable and the head may be behind Mtaken;
                             the opener moves the head up to Mtaken ("reconcile"), so no
                             claimed position is handed out twice
        power cut after 3:   the slot write may be lost, the LMDB commit is not; same as above

    A pop that takes expired claims commits the same way (delete their records and raise
    Mtaken in one LMDB commit, then move the head without fsync); a pop from a bucket
    whose table has nothing ready is the plain log pop. ack, release and extend touch
    only LMDB. A claim or an ack therefore costs one LMDB commit (one fdatasync of the
    data and one synchronous write of the meta page) and a claim of n elements the same
    as a claim of one. With ``sync`` off (group commit) step 2 is not durable by itself,
    so a claim that takes new elements syncs the claim environment before step 3: the
    head's move must never reach the disk before the claims do.
    """

    type_name: ClassVar[str] = "fifo"
    bucket_options: ClassVar[dict[str, str]] = {**SegmentStore.bucket_options, **CLAIM_OPTIONS}

    def __init__(self, directory: Path, declaration: Mapping[str, Any], options: Options):
        super().__init__(directory, declaration, options)
        bucket_options = self.validate_options((declaration or {}).get("options") or {})
        self._max_deliveries = bucket_options.get("max_deliveries")
        self._bucket_name = (declaration or {}).get("name") or self.directory.name
        self._claim_lock = threading.RLock()
        self._claims: ClaimTable | None = None
        self._claims_kv = None
        self._closed = False
        if (self.directory / CLAIMS_DIR).exists():
            try:
                self._open_claims()
            except BaseException:
                self.log.close()
                raise

    @classmethod
    def validate_options(cls, bucket_options: Mapping[str, Any]) -> dict:
        """The bucket options: ``segment_size`` as a lifo's, ``max_deliveries`` with ``dead_letter``."""
        checked = super().validate_options(bucket_options)
        validate_claim_options(checked)
        return checked

    @classmethod
    def check(cls, directory, declaration):
        """The segments (:meth:`SegmentStore.check`), then the claim environment, if the
        bucket has one: every claim record whole and beside its element, every element
        decoding and claimed, none at a position the head has not passed (``Mtaken``)."""
        from ..storage.kv import DAMAGE_ERRORS, read_only

        problems = super().check(directory, declaration)
        path = Path(directory) / CLAIMS_DIR
        if not path.exists():
            return problems
        try:
            with read_only(path) as txn:
                cls._check_claims(txn, problems)
        except (CorruptDataError, StorageError) as exc:
            problems.append(Problem(CLAIMS_FILE, exc.message))
        except DAMAGE_ERRORS as exc:
            problems.append(Problem(CLAIMS_FILE, f"LMDB found its pages are not what it wrote ({exc})"))
        return problems

    def check_open(self, declaration: Mapping[str, Any]) -> list[Problem]:
        """:meth:`check` on the open bucket, while it serves: the log's (:meth:`SegmentStore.check_open`),
        then the claim table's, in one read transaction of the claim environment."""
        from ..storage.kv import DAMAGE_ERRORS

        problems = super().check_open(declaration)
        kv = self._claims_kv
        if kv is None:
            return problems
        try:
            with kv.read() as txn:
                self._check_claims(txn, problems)
        except DAMAGE_ERRORS as exc:
            problems.append(Problem(CLAIMS_FILE, f"LMDB found its pages are not what it wrote ({exc})"))
        return problems

    @classmethod
    def _check_claims(cls, txn, problems: list[Problem]) -> None:
        """Every claim record whole and beside its element, every element decoding and claimed,
        none at a position the head has not passed (``Mtaken``): one read transaction's."""
        file = CLAIMS_FILE
        check_namespaces(txn, CLAIM + ELEMENT + b"M", file, problems)
        raw = txn.get(TAKEN)
        taken = int.from_bytes(raw, "big") if raw else 0
        for key, raw in scan(txn, CLAIM):
            position = int.from_bytes(key[1:], "big")
            if len(key) != 9 or len(raw) != claims.HEADER.size:
                problems.append(Problem(file, f"the claim record {bytes(key)[:40]!r} is not one"))
            elif txn.get(ELEMENT + key[1:]) is None:
                problems.append(Problem(file, f"the claim of element {position} has no element", REBUILD))
            elif position >= taken:
                problems.append(Problem(file, f"element {position} is claimed, and the queue's head has not "
                                              f"passed it (Mtaken {taken})", REBUILD))
        for key, raw in scan(txn, ELEMENT):
            try:
                decode(raw)
            except DECODE_ERRORS as exc:
                problems.append(Problem(file, f"claimed element {int.from_bytes(key[1:], 'big')} does not "
                                              f"decode ({exc})"))
            if txn.get(CLAIM + key[1:]) is None:
                problems.append(Problem(file, f"element {int.from_bytes(key[1:], 'big')} was taken by a "
                                              "claim that is not there", REBUILD))

    def _take(self, n: int) -> list[bytes]:
        return self.log.take_head(n)

    def _look(self, n: int) -> list[bytes]:
        return self.log.read_head(n)

    # -- the claim environment ------------------------------------------------------------------

    def _open_claims(self) -> None:
        """Open (or make) ``claims/``, load the table, and move the log's head up to Mtaken."""
        from ..storage.kv import KV

        path = self.directory / CLAIMS_DIR
        created = not path.exists()
        kv = KV(path, map_size=min(self.options.map_size, CLAIMS_MAP_SIZE), sync=self.options.sync)
        try:
            if created:  # the new folder's name must survive a power cut with the claims in it
                fsync_directory(path)
                fsync_directory(self.directory)
            with kv.read() as txn:
                records = load_records(txn)
                raw = txn.get(TAKEN)
            taken = int.from_bytes(raw, "big") if raw else 0
            behind = taken - self.log.popped
            if behind > 0:
                # A claim (or pop) committed in LMDB, then was killed before the head moved.
                got = self.log.take_head(behind)
                log.warning(
                    "%s: moved the queue's head past %d entries a claim had taken before a crash%s",
                    self.directory, len(got),
                    "" if len(got) == behind else f" ({behind - len(got)} were not in the log: sync off and a power cut)",
                )
        except BaseException:
            kv.close()
            raise
        table = ClaimTable(self._max_deliveries)
        table.load(records)
        self._claims_kv, self._claims = kv, table

    def _claims_table(self, create: bool) -> ClaimTable | None:
        if self._closed:
            raise ClosedError(f"the fifo bucket at {self.directory} is closed; open the database again")
        if self._claims is None and create:
            self._open_claims()
        return self._claims

    def _claims_write(self, fn):
        return self._claims_kv.write(lambda txn: fn(txn)[0])

    def _claims_read(self):
        return self._claims_kv.read()

    def _element_key(self, key: bytes) -> bytes:
        return ELEMENT + key

    def _fresh(self, n: int) -> list[tuple[bytes, bytes]]:
        if n <= 0:
            return []
        base = self.log.popped
        return [((base + i).to_bytes(8, "big"), p) for i, p in enumerate(self.log.read_head(n))]

    def _take_fresh(self, txn, fresh: list[tuple[bytes, bytes]]) -> None:
        for key, payload in fresh:
            txn.put(ELEMENT + key, payload)
        if fresh:
            txn.put(TAKEN, (int.from_bytes(fresh[-1][0], "big") + 1).to_bytes(8, "big"))

    def _took_fresh(self, fresh: list) -> None:
        if fresh:
            if not self.options.sync:
                # With sync off the kernel may write state.bson before the claim's commit; a
                # power cut between would lose the claimed elements. So the claims go first.
                self._claims_kv.sync()
            self.log.take_head(len(fresh), durable=False)

    # -- verbs that see the claim table -------------------------------------------------------------

    def _pop_payloads(self, n: int) -> list[bytes]:
        """What a pop takes: the next *ready* elements. Elements whose lease ran out come
        first (in push order), then the log's head; claimed elements are never popped."""
        with self._claim_lock:
            table = self._claims_table(create=False)
            if table is not None:
                table.advance(claims.clock())
            if table is None or not table.ready:
                payloads = self.log.take_head(n)
            else:
                again = table.ready[:n]
                fresh = self._fresh(n - len(again))

                def write(txn):
                    out = [txn.get(ELEMENT + k) for k in again]
                    for key in again:
                        txn.delete(CLAIM + key)
                        txn.delete(ELEMENT + key)
                    if fresh:
                        txn.put(TAKEN, (int.from_bytes(fresh[-1][0], "big") + 1).to_bytes(8, "big"))
                    return out

                payloads = self._claims_kv.write(write)
                for key in again:
                    table.drop(key)
                self._took_fresh(fresh)
                payloads += [p for _, p in fresh]
        return payloads

    def peek(self, limit: int | None = None):
        """The element pop would return, without removing it (None when none is ready).

        With a ``limit`` (1 to ``max_peek``), a list of the next ones in pop order. Once the
        bucket has a claim table the answer also says ``claimed``: how many are held.
        """
        n = 1 if limit is None else check_limit(limit, self.options.max_peek, "peek")
        with self._claim_lock:
            table = self._claims_table(create=False)
            if table is None:
                return super().peek(limit)
            table.advance(claims.clock())
            again = table.ready[:n]
            with self._claims_kv.read() as txn:
                payloads = [txn.get(ELEMENT + k) for k in again]
            if n > len(again):
                payloads += self.log.read_head(n - len(again))
            held = table.held
        docs = [decode(p) for p in payloads]
        return Reply(docs if limit is not None else (docs[0] if docs else None), claimed=held)

    def length(self):
        """How many elements are ready (O(1)); with a claim table, also ``ready`` and ``claimed``."""
        if self._claims is None:
            return len(self.log)
        again, held = self._claim_counts()
        ready = len(self.log) + again
        return Reply(ready, ready=ready, claimed=held)

    def export(self, cursor: Any = None, limit: int = 1000) -> dict:
        """A page of every element, claimed ones included, in push order: ``{docs, next}``.

        As the plain fifo's export, the cursor is an element's position; claimed elements
        (in ``claims/``) sit before the log's head, so a page holds them first. A restore
        pushes them all as ready elements.
        """
        with self._claim_lock:
            if self._claims is None:
                return super().export(cursor, limit)
            if cursor is not None and (isinstance(cursor, bool) or not isinstance(cursor, int) or cursor < 0):
                raise BadValueError(f"export's cursor is the next of the previous page, an integer ≥ 0; got {cursor!r}")
            check_limit(limit, 10_000, "export")
            start = cursor or 0
            payloads, next_position = [], None
            with self._claims_kv.read() as txn:
                c = txn.cursor()
                if c.set_range(ELEMENT + min(start, 2**64 - 1).to_bytes(8, "big")):
                    for key, raw in c:
                        if not key.startswith(ELEMENT) or len(payloads) >= limit:
                            break
                        payloads.append(raw)
                        next_position = int.from_bytes(key[1:], "big") + 1
            if len(payloads) < limit:
                more, position = self.log.read_page(start, limit - len(payloads))
                payloads += more
                if more:
                    next_position = position + len(more)
        docs = [decode(p) for p in payloads]
        return {"docs": docs, "next": next_position if len(docs) == limit else None}

    def backup(self, target: Path) -> None:
        """The log (as :meth:`SegmentStore.backup`) and the claims' LMDB environment, copied
        together with claims and the log held still, so the claims match the log."""
        with self._claim_lock, self.log.held():
            self._copy_log(target)
            if self._claims_kv is not None:
                (target / CLAIMS_DIR).mkdir()
                self._claims_kv.env.copy(str(target / CLAIMS_DIR), compact=True)

    def backup_changed(self, target: Path, unchanged: set[str]) -> list[str]:
        """:meth:`backup` without the files named in ``unchanged``: segments an earlier backup of this open
        bucket copied that were not its last. Those never change while the log stays open (appends go to the
        last segment; a pop moves the head in ``state.bson`` and unlinks the segments it left), so that earlier
        copy of them and this backup make the bucket as it is now. Returns the name of every file the bucket's
        folder has now (those left out included); ``claims/`` is copied whole. A cluster's move of a whole fifo
        sends the bucket this way twice: all of it while it serves, then what may have changed under the fence
        (hoarddb/cluster/queue_moves.py)."""
        import shutil

        with self._claim_lock, self.log.held():
            target.mkdir(parents=True)
            names = []
            for path in sorted(self.directory.iterdir()):
                if path.is_file():
                    names.append(path.name)
                    if path.name not in unchanged:
                        shutil.copyfile(path, target / path.name)
            if self._claims_kv is not None:
                (target / CLAIMS_DIR).mkdir()
                self._claims_kv.env.copy(str(target / CLAIMS_DIR), compact=True)
        return names

    def stats(self) -> dict:
        """``{"entries": ready, "claimed": held, "bytes": bytes on disk, "data_bytes": bytes of its entries
        (claimed ones included), "segments": segment files}``."""
        again, held = self._claim_counts() if self._claims is not None else (0, 0)
        return {"entries": len(self.log) + again, "claimed": held, "bytes": directory_bytes(self.directory),
                "data_bytes": self.log.data_bytes, "segments": self.log.segments}

    def sync(self, logs: list | None = None) -> None:
        """Make every write so far durable: the claim table first, then the log (as the claim order)."""
        if not self.options.sync:
            if self._claims_kv is not None:
                self._claims_kv.sync()
            self._sync_log(logs)

    def close(self) -> None:
        """Close the claim environment and the segment files; later calls raise ClosedError."""
        with self._claim_lock:
            self._closed = True
            if self._claims_kv is not None:
                self._claims_kv.close()
                self._claims_kv = None
        super().close()


#: The claim environment's folder in a fifo bucket, its keys, and its first map size (it grows).
CLAIMS_DIR = "claims"
CLAIMS_FILE = f"{CLAIMS_DIR}/data.mdb"
ELEMENT = b"E"
TAKEN = b"Mtaken"
CLAIMS_MAP_SIZE = 64 * 1024 * 1024


