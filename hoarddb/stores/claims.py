"""The claim table: which elements of a fifo or heap bucket are handed out to workers, until when, how often.

A worker that must not lose work consumes a queue bucket with ``claim`` and ``ack``
instead of ``pop``: ``claim`` hands an element out under a lease and hides it from
other claimers, from ``pop`` and from ``peek``; ``ack`` removes it for good; a lease
that runs out (a crashed worker) makes the element claimable again, first and in its
original order, with its count of deliveries. docs/user/queues.md is the user's page.

The table lives in LMDB, one record per claimed element, under its own prefix:

    b"L" + element key  ->  | token: 8 bytes | deliveries: u32 BE | expires: f64 BE |   (20 bytes)

The element key orders the table as the bucket orders its elements: a fifo's key is
the element's position (u64 BE, counted from the first element ever pushed, as the
export cursor counts), a heap's is its ready key without the b"D" (inverted priority,
then seq). ``token`` is random per hand-out, so a claimId (``<key hex>.<token hex>``)
names one delivery: when a lease ran out and someone else claimed the element, the old
claimId no longer matches and is refused (ClaimExpiredError). ``expires`` is wall-clock
seconds (the module's :data:`clock`, which tests replace), so leases survive a restart.

Where the element itself lives is the store's business: the heap keeps it at its
ready key (the claim record only hides it), the fifo copies it into its claim
environment as ``b"E" + position`` (the segment log's head moves past it). Both
stores share the verbs through :class:`ClaimVerbs`.

An element is in one of four states, and :class:`ClaimTable` knows which in memory
(rebuilt from the records when the store opens):

    never claimed  in the bucket's own storage; ``pop``, ``peek`` and ``claim`` take it in order
    leased         claimed, lease running: hidden from everyone but ``ack``/``release``/``extend``
    ready again    its lease ran out (or was released): taken first by ``claim`` and ``pop``, in order
    dead           its lease ran out after ``max_deliveries`` hand-outs: waits for the engine to
                   move it into the bucket's ``dead_letter`` bucket (not claimable, not poppable)

"Claimed" in answers (``length``'s and ``peek``'s ``claimed``, ``stats``) counts leased
and dead elements: everything in the table that is not ready.
"""

from __future__ import annotations

import bisect
import datetime
import heapq
import logging
import math
import os
import struct
import time
from contextlib import AbstractContextManager
from typing import Any, Callable, Iterable, Mapping

from ..errors import (BadValueError, ClaimExpiredError, HoardError, InvalidArgumentError, NotFoundError,
                      VerbNotSupportedError)
from ..values.codec import decode
from .base import check_limit

#: Dead letters that stay held are logged where docs/user/queues.md says: on the engine's logger.
log = logging.getLogger("hoarddb.engine")

#: The clock leases are measured on: wall-clock seconds, persisted across restarts.
#: Tests replace it (``claims.clock = fake``); stores call it through this module.
clock: Callable[[], float] = time.time

#: A claim's lease when the caller names none, in seconds.
DEFAULT_LEASE = 30.0
#: The longest lease one claim or extend may ask for: a day. Longer jobs heartbeat with extend.
MAX_LEASE = 86_400.0
#: The shortest: a millisecond. A shorter one (1e-9, 1e-300) vanishes when added to the wall
#: clock's ~1.7e9 seconds, so the element would be claimable again the moment it was handed out.
MIN_LEASE = 0.001
#: The most claimIds one ack or release takes in one write.
MAX_IDS = 1000
#: How many dead elements one claim hands to the engine to move.
DEAD_BATCH = 100

CLAIM = b"L"
HEADER = struct.Struct(">8sId")

#: Bucket options of a claimable bucket (fifo, heap), each with its meaning.
CLAIM_OPTIONS = {
    "max_deliveries": "hand an element out at most this many times; then move it to dead_letter (needs dead_letter)",
    "dead_letter": "the bucket (fifo, lifo or heap, same database) that receives elements past max_deliveries",
}


def validate_claim_options(options: Mapping[str, Any]) -> None:
    """Refuse a bad ``max_deliveries`` or ``dead_letter``; the two go together."""
    from ..catalog import check_name

    md = options.get("max_deliveries")
    dl = options.get("dead_letter")
    if md is not None and (isinstance(md, bool) or not isinstance(md, int) or md < 1):
        raise BadValueError(f"max_deliveries is how many times an element may be handed out, an integer ≥ 1; got {md!r}")
    if dl is not None:
        check_name(dl, "dead_letter bucket")
    if (md is None) != (dl is None):
        raise BadValueError(
            "max_deliveries and dead_letter go together: an element handed out max_deliveries times moves to the "
            "dead_letter bucket instead of being dropped; declare both, such as "
            "{type: \"fifo\", max_deliveries: 5, dead_letter: \"JobsFailed\"}, or neither"
        )


def check_lease(seconds: Any, what: str = "lease") -> float:
    """A lease in seconds: a number from a millisecond up to a day; None is the default 30 s."""
    if seconds is None:
        return DEFAULT_LEASE
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or (
            isinstance(seconds, float) and not math.isfinite(seconds)) or not MIN_LEASE <= seconds <= MAX_LEASE:
        raise BadValueError(
            f"{what} is a number of seconds, at least {MIN_LEASE} and at most {MAX_LEASE:.0f} (a day; heartbeat "
            f"longer jobs with extend); got {seconds!r:.80}"
        )
    return float(seconds)


def claim_id(key: bytes, token: bytes) -> str:
    """The claimId of one hand-out: ``<element key hex>.<token hex>``."""
    return f"{key.hex()}.{token.hex()}"


def parse_claim_id(value: Any) -> tuple[bytes, bytes] | None:
    """``(element key, token)`` of a claimId string, or None when it is not one.

    Only the exact string :func:`claim_id` made is one: ``bytes.fromhex`` also reads
    upper case and spaces, and such a second spelling of one claimId in an ack's list
    would ack the element twice over (a heap's count of elements would drop by two).
    """
    if not isinstance(value, str) or value.count(".") != 1:
        return None
    key, token = value.split(".")
    try:
        key_b, token_b = bytes.fromhex(key), bytes.fromhex(token)
    except ValueError:
        return None
    if not key_b or len(token_b) != 8 or claim_id(key_b, token_b) != value:
        return None
    return key_b, token_b


def claim_ids(value: Any, verb: str) -> tuple[list[str], bool]:
    """The claimIds an ack or release names (one string, or a list of them) and whether it was one."""
    if isinstance(value, str):
        return [value], True
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        if len(value) > MAX_IDS:
            check_limit(len(value), MAX_IDS, f"{verb}'s list of claimIds")
        return list(dict.fromkeys(value)), False
    raise InvalidArgumentError(
        f"{verb} takes the claimId that claim returned (a string), or a list of them; got {type(value).__name__}: {value!r:.80}"
    )


class Claim:
    """Claim is one record of the table: the hand-out's token, how many hand-outs so far, and when the lease ends."""

    __slots__ = ("token", "deliveries", "expires")

    def __init__(self, token: bytes, deliveries: int, expires: float):
        self.token = token
        self.deliveries = deliveries
        self.expires = expires

    @classmethod
    def new(cls, deliveries: int, expires: float) -> "Claim":
        return cls(os.urandom(8), deliveries, expires)

    @classmethod
    def unpack(cls, raw: bytes) -> "Claim":
        return cls(*HEADER.unpack(bytes(raw[:HEADER.size])))

    def pack(self) -> bytes:
        return HEADER.pack(self.token, self.deliveries, self.expires)

    def with_expiry(self, expires: float) -> "Claim":
        return Claim(self.token, self.deliveries, expires)


class ClaimTable:
    """ClaimTable is the in-memory index of one bucket's claim records: their states, in element order.

    It does no I/O: a store writes records in its LMDB transaction, and tells the table
    after the commit (:meth:`hold`, :meth:`drop`). ``max_deliveries`` (or None) decides
    which expired records are dead rather than ready again. Not thread-safe: the store
    calls it under its own lock.
    """

    def __init__(self, max_deliveries: int | None = None):
        self.max_deliveries = max_deliveries
        self.records: dict[bytes, Claim] = {}
        self._leases: list[tuple[float, bytes]] = []  # (expires, key), lazily cleaned
        self.ready: list[bytes] = []  # expired or released, claimable again; sorted
        self.dead: list[bytes] = []  # expired at max_deliveries, waiting for the engine; sorted
        self.moving: set[bytes] = set()  # dead ones handed to the engine, not yet confirmed

    def __len__(self) -> int:
        return len(self.records)

    @property
    def held(self) -> int:
        """Records that are not ready: leased, dead or moving (what answers call ``claimed``)."""
        return len(self.records) - len(self.ready)

    def load(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        """Add the records read from disk on open: ``(element key, header)`` pairs."""
        for key, raw in items:
            self._set(key, Claim.unpack(raw))

    def _set(self, key: bytes, claim: Claim) -> None:
        self.records[key] = claim
        heapq.heappush(self._leases, (claim.expires, key))

    def advance(self, now: float) -> None:
        """Move every record whose lease ran out by ``now`` to ready (or dead)."""
        leases = self._leases
        while leases and leases[0][0] <= now:
            expires, key = heapq.heappop(leases)
            claim = self.records.get(key)
            if claim is None or claim.expires != expires or self.state(key) != "leased":
                continue  # acked, re-leased or extended since: a stale entry
            if self.max_deliveries is not None and claim.deliveries >= self.max_deliveries:
                bisect.insort(self.dead, key)
            else:
                bisect.insort(self.ready, key)

    def state(self, key: bytes) -> str | None:
        """``"leased"``, ``"ready"``, ``"dead"``, ``"moving"``, or None when the key has no record."""
        if key not in self.records:
            return None
        if key in self.moving:
            return "moving"
        if _contains(self.ready, key):
            return "ready"
        if _contains(self.dead, key):
            return "dead"
        return "leased"

    def hold(self, key: bytes, claim: Claim) -> None:
        """Record a (new or renewed) lease on ``key``, after its record was committed."""
        _discard(self.ready, key)
        _discard(self.dead, key)
        self.moving.discard(key)
        self._set(key, claim)

    def drop(self, key: bytes) -> None:
        """Forget ``key`` (acked, popped or dead-lettered), after its record was deleted."""
        if self.records.pop(key, None) is not None:
            _discard(self.ready, key)
            _discard(self.dead, key)
            self.moving.discard(key)

    def take_dead(self, n: int) -> list[bytes]:
        """Up to ``n`` dead keys, now marked moving, for the engine to move."""
        keys = self.dead[:n]
        del self.dead[:n]
        self.moving.update(keys)
        return keys

    def return_dead(self, keys: Iterable[bytes]) -> None:
        """Moving keys whose move failed become dead again (retried at the next claim)."""
        for key in keys:
            if key in self.moving:
                self.moving.discard(key)
                bisect.insort(self.dead, key)

    def find(self, value: Any, bucket: str) -> tuple[bytes, Claim]:
        """The key and record a claimId names; NotFoundError or ClaimExpiredError saying why not."""
        parsed = parse_claim_id(value)
        claim = self.records.get(parsed[0]) if parsed else None
        if claim is None:
            raise NotFoundError(
                f"no claim {value!r} in bucket {bucket!r}: it was acked already, moved to the dead-letter bucket, "
                "popped after its lease ran out, or never was a claimId of this bucket"
            )
        key, token = parsed
        if claim.token != token:
            raise ClaimExpiredError(
                f"claim {value!r} in bucket {bucket!r} is no longer yours: its lease ran out and the element was "
                f"claimed again (delivery {claim.deliveries}, under a new claimId), so another worker may be doing "
                "this work; stop and claim again (extend sooner to keep a lease)"
            )
        if key in self.moving:
            raise ClaimExpiredError(
                f"claim {value!r} in bucket {bucket!r} is no longer yours: its lease ran out after "
                f"{claim.deliveries} deliveries (max_deliveries) and the element is moving to the dead-letter bucket"
            )
        return key, claim


def _contains(keys: list[bytes], key: bytes) -> bool:
    i = bisect.bisect_left(keys, key)
    return i < len(keys) and keys[i] == key


def _discard(keys: list[bytes], key: bytes) -> None:
    i = bisect.bisect_left(keys, key)
    if i < len(keys) and keys[i] == key:
        del keys[i]


def expires_at(seconds: float) -> datetime.datetime:
    """A lease's end as a UTC date, for answers."""
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)


class ClaimVerbs:
    """ClaimVerbs is claim, ack, release and extend over a :class:`ClaimTable`, shared by fifo and heap.

    The store supplies where records and elements live:

    - ``_claim_lock``: what every verb that touches the table holds (``with``): a lock, or for a
      heap its store's write lock and then its mutex (heap.py says why the order);
    - ``_claims_table(create)``: the table (None when the bucket never claimed, unless ``create``);
    - ``_claims_write(fn)``: run ``fn(txn)`` in one durable LMDB transaction of the table's
      environment; ``fn`` returns ``(result, elements removed)``;
    - ``_claims_read()``: a read transaction of that environment;
    - ``_element_key(key)``: where an element held in the table keeps its BSON;
    - ``_fresh(n)``: up to ``n`` never-claimed elements in order, as ``(key, BSON or None)``;
      ``_take_fresh(txn, fresh)`` takes them inside the claim's transaction,
      ``_took_fresh(fresh)`` after its commit, and ``_fresh_failed(fresh)`` undoes what
      ``_fresh`` did when the commit failed;
    - ``_bucket_name``: for messages and dead letters.
    """

    _claim_lock: AbstractContextManager

    # -- claim -----------------------------------------------------------------------------

    def claim(self, limit: int | None = None, lease: Any = None) -> list[dict]:
        """Hand out up to ``limit`` elements (default 1, at most ``max_pop``) for ``lease`` seconds (default 30).

        Elements whose lease ran out come first, in the bucket's order, then never-claimed
        ones from the head (fifo) or top (heap). Answers a list (empty when none is ready)
        of ``{claimId, deliveries, element}``; the claims are durable when it returns.
        Elements past ``max_deliveries`` are not handed out: they wait in the table for the
        engine to move them (:meth:`pending_dead_letters`).
        """
        n = 1 if limit is None else check_limit(limit, self.options.max_pop, "claim")
        seconds = check_lease(lease)
        with self._claim_lock:
            table = self._claims_table(create=True)
            now = clock()
            table.advance(now)
            again = table.ready[:n]
            fresh = self._fresh(n - len(again))
            if not again and not fresh:
                return []
            expires = now + seconds
            leases = [(k, Claim.new(table.records[k].deliveries + 1, expires)) for k in again]
            leases += [(k, Claim.new(1, expires)) for k, _ in fresh]

            def write(txn):
                payloads = [txn.get(self._element_key(k)) for k in again]
                payloads += [p if p is not None else txn.get(self._element_key(k)) for k, p in fresh]
                for key, c in leases:
                    txn.put(CLAIM + key, c.pack())
                self._take_fresh(txn, fresh)
                return payloads, 0

            try:
                payloads = self._claims_write(write)
            except BaseException:
                self._fresh_failed(fresh)
                raise
            for key, c in leases:
                table.hold(key, c)
            self._took_fresh(fresh)
        return [
            {"claimId": claim_id(key, c.token), "deliveries": c.deliveries, "element": decode(p)}
            for (key, c), p in zip(leases, payloads)
        ]

    # -- ack, release, extend ----------------------------------------------------------------

    def ack(self, claimId: Any) -> dict:
        """Remove claimed elements for good: ``{acked: n}``.

        ``claimId`` is one claimId or a list (at most 1000, one durable write, all or none:
        one unknown or lost claim refuses them all). A claim whose lease ran out may still
        be acked while no one else has claimed the element.
        """
        ids, _single = claim_ids(claimId, "ack")
        with self._claim_lock:
            table = self._claims_table(create=False)
            if table is None:
                self._no_claims(ids)
                return {"acked": 0}
            found = [table.find(v, self._bucket_name) for v in ids]

            def write(txn):
                for key, _c in found:
                    txn.delete(CLAIM + key)
                    txn.delete(self._element_key(key))
                return None, len(found)

            if found:
                self._claims_write(write)
            for key, _c in found:
                table.drop(key)
        return {"acked": len(found)}

    def release(self, claimId: Any) -> dict:
        """Give claimed elements back now: ``{released: n}``; they are claimable again first, in order.

        Takes one claimId or a list, as :meth:`ack`. A release counts as a delivery made:
        the next claim of the element says ``deliveries`` one higher.
        """
        ids, _single = claim_ids(claimId, "release")
        with self._claim_lock:
            table = self._claims_table(create=False)
            if table is None:
                self._no_claims(ids)
                return {"released": 0}
            now = clock()
            table.advance(now)
            found = [table.find(v, self._bucket_name) for v in ids]
            renewed = [(key, c.with_expiry(0.0)) for key, c in found]

            def write(txn):
                for key, c in renewed:
                    txn.put(CLAIM + key, c.pack())
                return None, 0

            if renewed:
                self._claims_write(write)
            for key, c in renewed:
                table.hold(key, c)
            table.advance(now)
        return {"released": len(renewed)}

    def extend(self, claimId: Any, seconds: Any) -> dict:
        """Renew a claim's lease to ``seconds`` from now (a heartbeat): ``{extended: 1, expiresAt}``.

        A claim whose lease ran out is renewed while no one else has claimed the element;
        once someone has, its claimId changed and this raises ClaimExpiredError.
        """
        if not isinstance(claimId, str):
            raise InvalidArgumentError(f"extend takes the claimId that claim returned (a string), got {claimId!r:.80}")
        if seconds is None:
            raise InvalidArgumentError("extend takes the claimId and the new lease in seconds: extend(claimId, 60)")
        lease = check_lease(seconds, "extend's seconds")
        with self._claim_lock:
            table = self._claims_table(create=False)
            if table is None:
                self._no_claims([claimId])
            now = clock()
            table.advance(now)
            key, claim = table.find(claimId, self._bucket_name)
            renewed = claim.with_expiry(now + lease)
            self._claims_write(lambda txn: (txn.put(CLAIM + key, renewed.pack()), 0))
            table.hold(key, renewed)
        return {"extended": 1, "expiresAt": expires_at(renewed.expires)}

    def _fresh_failed(self, fresh: list) -> None:
        """Undo ``_fresh`` after a failed commit; nothing to undo unless the store says so."""

    def _no_claims(self, ids: list[str]) -> None:
        """Refuse the first of ``ids`` (if any) of a bucket that was never claimed from."""
        if not ids:
            return
        raise NotFoundError(f"no claim {ids[0]!r} in bucket {self._bucket_name!r}: nothing was ever claimed from it")

    # -- counts ------------------------------------------------------------------------------

    def _claim_counts(self) -> tuple[int, int]:
        """``(ready again, held)``: table records claimable again, and the rest (leased, dead, moving)."""
        with self._claim_lock:
            table = self._claims_table(create=False)
            if table is None:
                return 0, 0
            table.advance(clock())
            return len(table.ready), table.held

    # -- dead letters: move_dead_letters (below) moves them (two steps; see docs/user/queues.md) ---

    def pending_dead_letters(self, limit: int = DEAD_BATCH) -> list[tuple[bytes, dict]]:
        """Elements past ``max_deliveries`` to move, as ``(ref, document)``; each is handed out once.

        The document is the element with ``_deadLetter: {from, deliveries, at}`` added.
        :func:`move_dead_letters` pushes them into the dead-letter bucket, then calls
        :meth:`finish_dead_letters` with ``moved=True`` (they leave this bucket) or
        ``moved=False`` (the push failed; they wait for the next claim).
        """
        with self._claim_lock:
            table = self._claims_table(create=False)
            if table is None:
                return []
            table.advance(clock())
            keys = table.take_dead(limit)
            if not keys:
                return []
            now = expires_at(clock())
            with self._claims_read() as txn:
                docs = [decode(txn.get(self._element_key(k))) for k in keys]
            return [
                (k, {**d, "_deadLetter": {"from": self._bucket_name, "deliveries": table.records[k].deliveries, "at": now}})
                for k, d in zip(keys, docs)
            ]

    def finish_dead_letters(self, refs: list[bytes], moved: bool) -> None:
        """Drop the moved elements from this bucket in one durable write, or put them back to wait."""
        with self._claim_lock:
            table = self._claims_table(create=False)
            if table is None:
                return
            if not moved:
                table.return_dead(refs)
                return
            gone = [k for k in refs if k in table.moving]  # an ack meanwhile took the others

            def write(txn):
                for key in gone:
                    txn.delete(CLAIM + key)
                    txn.delete(self._element_key(key))
                return None, len(gone)

            if gone:
                self._claims_write(write)
            for key in gone:
                table.drop(key)


def load_records(txn) -> list[tuple[bytes, bytes]]:
    """Every claim record of an LMDB environment, as ``(element key, header)``."""
    out = []
    cursor = txn.cursor()
    if cursor.set_range(CLAIM):
        for key, value in cursor:
            if not key.startswith(CLAIM):
                break
            out.append((bytes(key[1:]), bytes(value)))
    return out


def move_dead_letters(store: ClaimVerbs, db: str, bucket: str, target: str, declaration: Callable[[str], dict],
                      open_store: Callable[[str, dict], Any], written: Callable[[Any], None] | None) -> None:
    """After a claim: move what it found past ``max_deliveries`` into the bucket's ``dead_letter`` bucket.

    ``store`` is bucket ``bucket`` of database ``db``, and ``target`` its dead_letter
    bucket. A store never reaches another bucket (nor the engine), so the engine hands
    this its reach: ``declaration(name)`` is the declaration of bucket ``name`` of the same
    database (or raises its error), ``open_store(name, declaration)`` its open store, and
    ``written(store)``, when writes are not durable at once (sync off), notes a store
    written for the next sync.

    It takes two steps: push the elements (each with ``_deadLetter: {from, deliveries,
    at}``) into the dead-letter bucket in one durable batch_push, then have the queue
    drop them in one durable write. A crash between the two leaves an element in both
    buckets: dead-lettering is at least once. A dead_letter bucket that is missing, is
    the queue itself, is not a fifo, lifo or heap, or refuses the elements (a heap needs
    a priority) leaves them held in the queue, logs an error, and the next claim tries
    again (docs/user/queues.md).
    """
    pending = store.pending_dead_letters()
    if not pending:
        return
    moved: list = []  # the refs pushed into the dead-letter bucket
    try:
        if target == bucket:
            raise BadValueError("it is the queue itself")
        target_decl = declaration(target)
        if target_decl["type"] not in ("fifo", "lifo", "heap"):
            raise VerbNotSupportedError(f"it is a {target_decl['type']} bucket, not a fifo, lifo or heap")
        target_store = open_store(target, target_decl)
        try:
            target_store.batch_push([doc for _ref, doc in pending])
            moved = [ref for ref, _doc in pending]
        except HoardError:  # one element the bucket refuses (a heap needs a priority) holds back none of the others
            refused = None
            for ref, doc in pending:
                try:
                    target_store.batch_push([doc])
                    moved.append(ref)
                except HoardError as exc:
                    refused = refused or exc
            if refused is not None:
                log.error("%s.%s: %d element(s) past max_deliveries stay held: the dead_letter bucket %r refuses "
                          "them: %s", db, bucket, len(pending) - len(moved), target, refused.message)
        if moved and written is not None:
            written(target_store)
    except HoardError as exc:
        log.error("%s.%s: %d element(s) past max_deliveries stay held: cannot push them into the dead_letter "
                  "bucket %r: %s", db, bucket, len(pending), target, exc.message)
    finally:
        if moved:
            store.finish_dead_letters(moved, True)
        done = set(moved)  # refs are element keys: one each
        rest = [ref for ref, _doc in pending if ref not in done]
        if rest:
            store.finish_dead_letters(rest, False)
