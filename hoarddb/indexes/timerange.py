"""Time-range indexes: a hash bucket's documents grouped into time windows by a timestamp, with each
window's counts and ranking kept in the writing transaction, and the timestamps hoardDB keeps itself.

An index declared with ``timeRange: {on, range, step, phase, ttl}`` (seconds) has windows of
``range`` seconds starting every ``step`` seconds, at ``phase + k * step`` from the Unix
epoch; a document is in every window that holds the timestamp its ``on`` field holds (a
date; a document whose field holds anything else is in none). Its entries live in the
bucket's LMDB environment beside the documents, under the index's prefix
(``b"I" + id``, as every index's), one letter further for each kind of key; ``start`` is
the window's start in milliseconds since 1970 plus 2**63, as 8 bytes big-endian (so
windows sort by time, those before 1970 included):

    entry      I id W start enc(v2) enc(v3)... enc(_id_)      -> b""
    (unique)   I id W start enc(v2) enc(v3)...                -> enc(_id_)
    count      I id C start                                    -> documents in the window (8 bytes)
    per value  I id V start enc(v2)                            -> documents holding v2 there (8 bytes)
    ranking    I id R start (2**64 - 1 - count) enc(v2)        -> b""

``v2`` is the value of the index's second field (each distinct element of an array); the
per-value counts and the ranking are kept for a ``ranked`` index only. The ranking keys
of one window sort by count, highest first, then by value: the top K are the first K keys
under ``I id R start``. Every write changes these keys in its own transaction, so counts
never disagree with the documents.

A window of an index with a ``ttl`` can be read until ``ttl`` seconds after its start; a
query for an older one is refused. Its keys are removed lazily: each later write into the
index removes at most :data:`EXPIRY_BUDGET` keys of the oldest expired windows (entries
first, the window's count last, so the oldest count key always names the oldest window
with keys left). Nothing is written into a window that has expired, and a document leaving
one leaves its keys to that removal.

Buckets declaring ``timestamps: true`` hold ``$createdAt`` (the insert's time) and
``$updatedAt`` (the last write's) in each document, kept here (:func:`stamped`); a client
can read them and never write them. ``immutable: [fields]`` names fields that a write
cannot change once a document holds them (:func:`check_immutable`).
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from bson.raw_bson import RawBSONDocument

from ..errors import BadValueError, DuplicateKeyError
from ..values.codec import decode, raw_to_front, raw_with
from ..values.keys import decode_key, encode_key, key_end
from ..values.literal import literal

#: The timestamps hoardDB keeps itself when a bucket declares ``timestamps: true``.
CREATED, UPDATED = "$createdAt", "$updatedAt"
KEPT = (CREATED, UPDATED)
#: The keys of ``timeRange``.
ACCEPTED = ("on", "range", "step", "phase", "ttl")
#: The most windows one document may be in (range / step).
MAX_OVERLAP = 24
#: phase is less than one (non-leap) year of seconds.
MAX_PHASE = 31_536_000
#: Our upper bound of ttl: the longest calendar year, 366 days (docs/dev/time-range-indexes.md).
MAX_TTL = 31_622_400
#: The longest window, 100 years of seconds: window starts stay far inside 64-bit milliseconds.
MAX_RANGE = 3_155_760_000
#: The most keys of expired windows one write removes.
EXPIRY_BUDGET = 256
#: The index format of a time-range index (hoarddb.indexes.declaration lists them).
FORMAT = 5

_BIAS = 1 << 63
_TOP = (1 << 64) - 1
ENTRY, COUNT, VALUE, RANK = b"W", b"C", b"V", b"R"
_NONE: frozenset = frozenset()
#: The dates BSON and Python share (years 1 to 9999) in milliseconds: byStart's bounds.
_FIRST_MS, _LIMIT_MS = -62_135_596_800_000, 253_402_300_799_999
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_MS = datetime.timedelta(milliseconds=1)


def now_ms() -> int:
    return int(time.time() * 1000)


def to_ms(value: Any) -> int | None:
    """The milliseconds since 1970 of a date; None for anything else."""
    if not isinstance(value, datetime.datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return (value - _EPOCH) // _MS


def to_date(ms: int) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(milliseconds=ms)


def _seconds(tr: dict, key: str, where: str, low: int, required: bool = True) -> int | None:
    value = tr.get(key)
    if value is None and not required:
        return None
    if value is None:
        raise BadValueError(f"{where}: timeRange needs {key}, a whole number of seconds (at least {low})")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if type(value) is not int and not (isinstance(value, int) and not isinstance(value, bool)):
        raise BadValueError(f"{where}: timeRange's {key} is a whole number of seconds (at least {low}), "
                            f"got {value!r}")
    value = int(value)
    if value < low:
        raise BadValueError(f"{where}: timeRange's {key} is at least {low} second{'s' if low != 1 else ''}, "
                            f"got {value}")
    return value


def check(tr: Any, fields: list, unique: bool, ranked: bool, where: str) -> dict:
    """A ``timeRange`` option checked alone (the rules between indexes and with the bucket's
    options are :func:`check_bucket`'s): ``{on, range, step, phase, ttl?}``."""
    if not isinstance(tr, dict):
        raise BadValueError(f"{where}: timeRange is a document such as "
                            "{on: \"$createdAt\", range: 3600, step: 900, ttl: 86400}")
    for key in tr:
        if key not in ACCEPTED:
            raise BadValueError(f"{where}: timeRange has no key {key!r}; it accepts {', '.join(ACCEPTED)}")
    on = tr.get("on")
    if not isinstance(on, str) or not on:
        raise BadValueError(f"{where}: timeRange's on names the timestamp: \"$createdAt\", \"$updatedAt\" "
                            f"or a date field of the documents; got {on!r}")
    if on.startswith("$") and on not in KEPT:
        raise BadValueError(f"{where}: timeRange's on is \"$createdAt\", \"$updatedAt\" or a date field "
                            f"of the documents; got {on!r}")
    if fields[0] != on:
        raise BadValueError(f"{where}: the timestamp {on!r} is the index's first field (fields: "
                            f"[{on!r}, ...]); its fields begin with {fields[0]!r}")
    range_ = _seconds(tr, "range", where, 1)
    step = _seconds(tr, "step", where, 1)
    if range_ > MAX_RANGE:
        raise BadValueError(f"{where}: timeRange's range is at most {MAX_RANGE} seconds (100 years), got {range_}")
    if range_ % step:
        raise BadValueError(f"{where}: timeRange's range ({range_}) is an exact multiple of step ({step}), "
                            f"such as {range_ // step * step or step} or {(range_ // step + 1) * step}")
    if range_ // step > MAX_OVERLAP:
        raise BadValueError(f"{where}: timeRange puts each document in range / step = {range_ // step} windows; "
                            f"at most {MAX_OVERLAP} are accepted (a step of at least "
                            f"{-(-range_ // MAX_OVERLAP)} seconds for this range)")
    phase = _seconds(tr, "phase", where, 0, required=False) or 0
    if phase >= step or phase >= MAX_PHASE:
        raise BadValueError(f"{where}: timeRange's phase is less than step ({step}) and less than one year "
                            f"({MAX_PHASE} seconds), from 0; got {phase}")
    out = {"on": on, "range": range_, "step": step, "phase": phase}
    ttl = _seconds(tr, "ttl", where, 1, required=False)
    if ttl is not None:
        if not range_ <= ttl <= MAX_TTL:
            raise BadValueError(f"{where}: timeRange's ttl is from range ({range_}: a window is readable at least "
                                f"until it ends) to {MAX_TTL} seconds (366 days); got {ttl}. Leave it out for "
                                "windows that never expire")
        out["ttl"] = ttl
    if unique:
        if range_ != step:
            raise BadValueError(f"{where}: a unique time-range index has range equal to step (here {range_} and "
                                f"{step}): with overlapping windows one document would be in several and "
                                "conflict in each")
        if on == UPDATED:
            raise BadValueError(f"{where}: a unique time-range index is on a timestamp that cannot move: "
                                "\"$createdAt\" or a field the bucket declares immutable, not \"$updatedAt\"")
    if ranked and len(fields) < 2:
        raise BadValueError(f"{where}: a single-field time-range index cannot be ranked: the ranking is of the "
                            f"values of the field after the timestamp; declare fields: [{on!r}, \"Field\"]")
    return out


def check_bucket(indexes: list[dict], options: dict) -> None:
    """The rules of time-range indexes between themselves and with the bucket's options."""
    grids: dict = {}
    immutable = options.get("immutable") or []
    for ix in indexes:
        tr = ix.get("timeRange")
        if tr is None:
            continue
        where = f"index {ix['name']!r}"
        if tr["on"] in KEPT and not options.get("timestamps"):
            raise BadValueError(f"{where}: timeRange on {tr['on']!r} needs the bucket to keep its timestamps: "
                                "declare the bucket option timestamps: true")
        if ix.get("unique") and tr["on"] not in (CREATED, *immutable):
            raise BadValueError(f"{where}: a unique time-range index is on a timestamp that cannot move: "
                                f"\"$createdAt\" or a field the bucket declares immutable (immutable: "
                                f"[{tr['on']!r}]); {tr['on']!r} is neither")
        grid = (tr["on"], tr["range"], tr["step"], tr["phase"])
        other = grids.setdefault(grid, ix)
        if other is not ix and other["timeRange"].get("ttl") != tr.get("ttl"):
            raise BadValueError(
                f"{where} and {other['name']!r} bucket {tr['on']!r} on the same grid (range {tr['range']}, "
                f"step {tr['step']}, phase {tr['phase']}) and declare the same ttl, or none; they declare "
                f"{tr.get('ttl')} and {other['timeRange'].get('ttl')}")


def check_options(options: dict) -> dict:
    """A hash bucket's ``timestamps`` and ``immutable`` options, checked."""
    out = dict(options)
    if "timestamps" in out and not isinstance(out["timestamps"], bool):
        raise BadValueError(f"timestamps is true (hoardDB keeps $createdAt and $updatedAt in each document) "
                            f"or false; got {out['timestamps']!r}")
    if "immutable" in out:
        fields = out["immutable"]
        if not isinstance(fields, list) or not fields or not all(
                isinstance(f, str) and f and not f.startswith("$") and "." not in f for f in fields):
            raise BadValueError("immutable is a non-empty list of top-level field names, such as "
                                f"[\"PublishedAt\"], that a write cannot change once set; got {fields!r:.60}")
    return out


def grid_of(decl: dict) -> tuple | None:
    tr = decl.get("timeRange")
    return None if tr is None else (tr["on"], tr["range"], tr["step"], tr["phase"])


def describe(decl: dict) -> str:
    tr = decl["timeRange"]
    text = f"timeRange {tr['on']} range {tr['range']}s step {tr['step']}s"
    if tr.get("phase"):
        text += f" phase {tr['phase']}s"
    if tr.get("ttl") is not None:
        text += f" ttl {tr['ttl']}s"
    return text + (", ranked" if decl.get("ranked") else "")


# -- timestamps kept by hoardDB, and immutable fields --------------------------------------------


def refuse_kept(doc: Any, where: str = "") -> None:
    """Refuse a document a client gives that carries ``$createdAt`` or ``$updatedAt``."""
    names = doc.keys() if not isinstance(doc, RawBSONDocument) else decode(doc.raw).keys()
    for name in KEPT:
        if name in names:
            raise BadValueError(f"{name} is kept by hoardDB on this bucket (timestamps: true) and cannot be "
                                f"written{where}; leave it out of the document")


def without_kept(doc: Any) -> tuple[dict, dict]:
    """A document without ``$createdAt``/``$updatedAt``, and those it held."""
    if isinstance(doc, RawBSONDocument):
        doc = decode(doc.raw)
    kept = {k: doc[k] for k in KEPT if k in doc}
    return ({k: v for k, v in doc.items() if k not in KEPT} if kept else doc), kept


def stamped(doc: dict, data: bytes, created: datetime.datetime, updated: datetime.datetime) -> tuple[dict, bytes]:
    """``doc`` and its BSON with ``$createdAt`` and ``$updatedAt`` set (after ``_id_``; the BSON
    is made by hand, as a document may not hold names beginning with ``$``)."""
    body = raw_to_front(raw_with(raw_with(data, UPDATED, updated), CREATED, created), "_id_")
    out = {"_id_": doc["_id_"], CREATED: created, UPDATED: updated,
           **{k: v for k, v in doc.items() if k != "_id_"}}
    return out, body


def now_date() -> datetime.datetime:
    """The current time as BSON keeps it (milliseconds, UTC)."""
    return to_date(now_ms())


def check_immutable(fields: list, old: dict | None, new: Any, ident: Any) -> None:
    """Refuse a write that changes a field declared immutable in a document that holds it."""
    if old is None:
        return
    for f in fields:
        if f in old and (f not in new or encode_key(new[f]) != encode_key(old[f])):  # as values: 30 == 30.0
            raise BadValueError(f"field {f!r} of document {literal(ident)} is immutable on this bucket "
                                f"(immutable: [{f!r}]) and holds {literal(old[f])}; a write cannot change or "
                                "remove it (delete the document and insert it again)")


# -- the index ---------------------------------------------------------------------------------


def _start(ms: int) -> bytes:
    return (ms + _BIAS).to_bytes(8, "big")


def _start_ms(b: bytes) -> int:
    return int.from_bytes(b, "big") - _BIAS


class TimeRangeIndex:
    """TimeRangeIndex is one time-range index of a bucket: its windows, entries, counts and ranking."""

    def __init__(self, decl: dict, rest_index):
        self.decl = decl
        self.id: int = decl["id"]
        self.name: str = decl["name"]
        self.fields: list[str] = list(decl["fields"])
        self.unique: bool = bool(decl.get("unique"))
        self.ranked: bool = bool(decl.get("ranked"))
        tr = decl["timeRange"]
        self.on: str = tr["on"]
        self.range, self.step, self.phase = tr["range"] * 1000, tr["step"] * 1000, tr.get("phase", 0) * 1000
        self.ttl: int | None = tr["ttl"] * 1000 if tr.get("ttl") is not None else None
        self.prefix = b"I" + bytes([self.id])
        self._entry, self._count = self.prefix + ENTRY, self.prefix + COUNT
        self._value, self._rank = self.prefix + VALUE, self.prefix + RANK
        #: An ordinary index over the fields after the timestamp, whose encodings the entries reuse.
        self.rest = rest_index
        self.state = "unreadable" if decl.get("format", FORMAT) > FORMAT else "ready"
        #: The earliest time (ms) at which a window may be expired with keys left; None: not known.
        self.next_expiry: int | None = None
        self.ttl_index = None  # never swept as a TTL index of documents

    @property
    def maintained(self) -> bool:
        return self.state != "unreadable"

    # windows

    def windows(self, ms: int) -> list[int]:
        """The starts (ms) of the windows holding the time ``ms``, oldest first."""
        last = (ms - self.phase) // self.step
        first = (ms - self.phase - self.range) // self.step + 1
        return [self.phase + k * self.step for k in range(first, last + 1)]

    def expired(self, start: int, now: int) -> bool:
        return self.ttl is not None and start + self.ttl <= now

    def _rest(self, doc: dict, bucket: str) -> list[tuple[bytes, tuple]]:
        if self.rest is None:
            return [(b"", ())]
        return self.rest.value_tuples(doc, bucket)

    def contributions(self, doc: dict | None, dk: bytes, now: int, bucket: str) -> tuple[dict, set, int | None]:
        """``({entry key: (value, values, start)}, {(start, encoded v2 or None)}, the first live
        window's start)`` of a document: its entries, and the counters it adds one to."""
        if doc is None:
            return {}, _NONE, None
        ms = to_ms(doc.get(self.on))
        if ms is None:
            return {}, _NONE, None
        rest = self._rest(doc, bucket)
        firsts = list(dict.fromkeys(encoded[:key_end(encoded, 0)] for encoded, _ in rest)) if self.ranked else ()
        entries: dict = {}
        counts: set = set()
        first = None
        entry = self._entry
        for s in self.windows(ms):
            if self.ttl is not None and s + self.ttl <= now:
                continue
            if first is None:
                first = s
            s8 = (s + _BIAS).to_bytes(8, "big")
            for encoded, values in rest:
                if self.unique:
                    entries[entry + s8 + encoded] = (dk, values, s)
                else:
                    entries[entry + s8 + encoded + dk] = (b"", values, s)
            counts.add((s8, None))
            for v in firsts:
                counts.add((s8, v))
        return entries, counts, first

    def apply(self, txn, dk: bytes, old: dict | None, new: dict | None, now: int, bucket: str, where: str,
              conflicts: dict | None) -> None:
        """Move a document's keys from ``old`` to ``new`` (None: absent), then remove a bounded
        number of keys of expired windows."""
        before, was, _ = self.contributions(old, dk, now, bucket)
        after, will, first = self.contributions(new, dk, now, bucket)
        if before != after or was != will:
            for key in before.keys() - after.keys() if after else before:
                if self.unique:
                    holder = txn.get(key)
                    if holder is None or bytes(holder) != dk:
                        continue
                txn.delete(key)
            for key in after.keys() - before.keys() if before else after:
                value, values, s = after[key]
                if self.unique:
                    holder = txn.get(key)
                    if holder is not None and bytes(holder) != dk:
                        if conflicts is None:
                            raise self.duplicate(bucket, s, values, decode_key(bytes(holder)), where)
                        conflicts.setdefault(self.name, {"window": to_date(s), "values": dict(
                            zip(self.fields[1:], values)), "documents": [decode_key(bytes(holder)), decode_key(dk)]})
                        continue
                txn.put(key, value)
            bump = self._bump
            for s8, v in was - will if will else was:
                bump(txn, s8, v, -1)
            for s8, v in will - was if was else will:
                bump(txn, s8, v, 1)
            if first is not None and self.ttl is not None and self.next_expiry is not None:
                self.next_expiry = min(self.next_expiry, first + self.ttl)
        if self.ttl is not None:
            self.expire(txn, now)

    def _bump(self, txn, s8: bytes, value: bytes | None, delta: int) -> None:
        """Move a window's count (``value`` None) or a value's count in it, and its ranking key, by ``delta``."""
        if value is None:
            key = self._count + s8
            raw = txn.get(key)
            n = (int.from_bytes(raw, "big") if raw is not None else 0) + delta
            txn.put(key, n.to_bytes(8, "big")) if n > 0 else txn.delete(key)
            return
        key = self._value + s8 + value
        raw = txn.get(key)
        rank = self._rank + s8
        if raw is not None:
            was = int.from_bytes(raw, "big")
            txn.delete(rank + (_TOP - was).to_bytes(8, "big") + value)
            n = was + delta
        else:
            n = delta
        if n > 0:
            txn.put(key, n.to_bytes(8, "big"))
            txn.put(rank + (_TOP - n).to_bytes(8, "big") + value, b"")
        else:
            txn.delete(key)

    def expire(self, txn, now: int, budget: int = EXPIRY_BUDGET) -> int:
        """Remove at most ``budget`` keys of windows expired at ``now``, oldest first; how many."""
        if self.next_expiry is not None and now < self.next_expiry:
            return 0
        removed = 0
        cursor = txn.cursor()
        count_prefix = self.prefix + COUNT
        while True:
            if not cursor.set_range(count_prefix) or not bytes(cursor.key()).startswith(count_prefix):
                self.next_expiry = 1 << 62  # no window at all: the next write into one says when
                return removed
            s8 = bytes(cursor.key())[len(count_prefix):]
            start = _start_ms(s8)
            if not self.expired(start, now):
                self.next_expiry = start + self.ttl
                return removed
            for kind in (ENTRY, VALUE, RANK):
                prefix = self.prefix + kind + s8
                doomed = []
                if cursor.set_range(prefix):
                    for key in cursor.iternext(values=False):
                        if not key.startswith(prefix) or len(doomed) >= budget - removed:
                            break
                        doomed.append(bytes(key))
                for key in doomed:
                    txn.delete(key)
                removed += len(doomed)
                if removed >= budget:
                    self.next_expiry = now  # more to remove: the next write goes on
                    return removed
            txn.delete(self.prefix + COUNT + s8)
            removed += 1
            if removed >= budget:
                self.next_expiry = now
                return removed

    def check(self, txn, documents, now: int, bucket: str) -> list[str]:
        """What is wrong with this index's keys in its live windows (those that stay readable a
        minute past ``now``), against the keys the ``documents`` (``(encoded _id_, document)``)
        make: keys missing, keys no document makes, counts that disagree. Expired windows are
        not compared: their keys are on their way out."""
        margin = 60_000
        expected: dict[bytes, bytes] = {}
        counters: dict = {}
        for dk, doc in documents:
            entries, counts, _ = self.contributions(doc, dk, now + margin, bucket)
            for key, (value, _values, _start) in entries.items():
                expected[key] = b"" if self.unique else value
            for item in counts:
                counters[item] = counters.get(item, 0) + 1
        for (s8, v), n in counters.items():
            if v is None:
                expected[self._count + s8] = n.to_bytes(8, "big")
            else:
                expected[self._value + s8 + v] = n.to_bytes(8, "big")
                expected[self._rank + s8 + (_TOP - n).to_bytes(8, "big") + v] = b""
        actual: dict[bytes, bytes] = {}
        cursor = txn.cursor()
        if cursor.set_range(self.prefix):
            for key, value in cursor:
                if not key.startswith(self.prefix):
                    break
                key = bytes(key)
                start = _start_ms(key[len(self.prefix) + 1:len(self.prefix) + 9])
                if not self.expired(start, now + margin):
                    actual[key] = b"" if self.unique and key[len(self.prefix):][:1] == ENTRY else bytes(value)
        missing = expected.keys() - actual.keys()
        stray = actual.keys() - expected.keys()
        wrong = [k for k in expected.keys() & actual.keys() if expected[k] != actual[k]]
        out = []
        for what, keys in (("missing", missing), ("that no document makes", stray), ("with a wrong count", wrong)):
            if keys:
                first = min(keys)
                out.append(f'time-range index "{self.name}" has {len(keys)} key(s) {what} (the first in the window '
                           f"starting {literal(to_date(_start_ms(first[len(self.prefix) + 1:len(self.prefix) + 9])))})")
        return out

    def duplicate(self, bucket: str, start: int, values: tuple, holder: Any, where: str = "") -> DuplicateKeyError:
        window = (f"{self.on} in the window {literal(to_date(start))} to "
                  f"{literal(to_date(start + self.range))}")
        shown = ", ".join([window] + [f"{f} = {literal(v)}" for f, v in zip(self.fields[1:], values)])
        message = (f'Duplicate value for unique index "{self.name}" on bucket "{bucket}": {shown} '
                   f"is already used by document {literal(holder)}. Change the value, update that document "
                   "instead, or delete it first.")
        return DuplicateKeyError(message + where, index=self.name,
                                 values={self.on: {"windowStart": to_date(start), "windowEnd":
                                                   to_date(start + self.range)},
                                         **dict(zip(self.fields[1:], values))}, holder=holder)

    # queries

    def select(self, now: int, newest: Any = None, oldest: Any = None, byStart: Any = None) -> int:  # noqa: N803
        """The start (ms) of the one window a query selects; refused unless exactly one is asked
        for, on the grid, and not expired."""
        chosen = [name for name, v in (("newest", newest), ("oldest", oldest), ("byStart", byStart))
                  if v is not None and v is not False]
        if len(chosen) != 1:
            raise BadValueError(
                f"window selects exactly one window of {self.name!r}: newest: true (the latest started), "
                "oldest: true (the oldest still open: the last full range), or byStart: <the date a window "
                f"starts>; got {', '.join(chosen) if chosen else 'none'}")
        if newest is not None and newest is not False:
            if newest is not True:
                raise BadValueError(f"newest is true, got {newest!r}")
            return self.phase + (now - self.phase) // self.step * self.step
        if oldest is not None and oldest is not False:
            if oldest is not True:
                raise BadValueError(f"oldest is true, got {oldest!r}")
            return self.phase + ((now - self.phase - self.range) // self.step + 1) * self.step
        start = to_ms(byStart)
        if start is None:
            if type(byStart) is int and _FIRST_MS <= byStart <= _LIMIT_MS:
                start = byStart
            else:
                raise BadValueError(f"byStart is the date a window starts (or its milliseconds since 1970), "
                                    f"got {byStart!r:.60}")
        if not _FIRST_MS + self.step <= start <= _LIMIT_MS - self.range - self.step:
            raise BadValueError(f"byStart is a date from year 1 to a window's length before year 10000 (a step inside); "
                                f"got {byStart!r:.60}")
        if (start - self.phase) % self.step:
            below = self.phase + (start - self.phase) // self.step * self.step
            raise BadValueError(
                f"byStart {literal(to_date(start))} is not the start of a window of {self.name!r}: windows start "
                f"every {self.step // 1000} seconds from {literal(to_date(self.phase))}; the nearest are "
                f"{literal(to_date(below))} and {literal(to_date(below + self.step))}")
        if self.expired(start, now):
            raise BadValueError(
                f"the window of {self.name!r} starting {literal(to_date(start))} has expired (ttl "
                f"{self.ttl // 1000} seconds after its start, so until {literal(to_date(start + self.ttl))}); "
                "windows starting after "
                f"{literal(to_date(now - self.ttl))} can be read")
        return start

    def read(self, txn, start: int, top: int | None = None, counts: bool = False) -> dict:
        """A window's answer: ``{index, start, end, count}``, with ``field`` and ``top`` (the top
        K values of the next field by count, then by value) or ``counts`` (every value's)."""
        s8 = _start(start)
        raw = txn.get(self.prefix + COUNT + s8)
        out: dict = {"index": self.name, "start": to_date(start), "end": to_date(start + self.range),
                     "count": int.from_bytes(raw, "big") if raw is not None else 0}
        if top is None and not counts:
            return out
        if not self.ranked:
            raise BadValueError(f"index {self.name!r} keeps no counts per value: declare it with ranked: true "
                                f"(and a field after {self.on!r}) for top and counts")
        out["field"] = self.fields[1]
        cursor = txn.cursor()
        if top is not None:
            if type(top) is not int or top < 1:
                raise BadValueError(f"top is how many values to rank, a whole number from 1; got {top!r}")
            prefix = self.prefix + RANK + s8
            ranked = []
            if cursor.set_range(prefix):
                for key in cursor.iternext(values=False):
                    if not key.startswith(prefix) or len(ranked) >= top:
                        break
                    key = bytes(key)
                    n = _TOP - int.from_bytes(key[len(prefix):len(prefix) + 8], "big")
                    ranked.append({"value": decode_key(key[len(prefix) + 8:]), "count": n})
            out["top"] = ranked
        if counts:
            prefix = self.prefix + VALUE + s8
            every = []
            if cursor.set_range(prefix):
                for key, value in cursor.iternext():
                    if not key.startswith(prefix):
                        break
                    every.append({"value": decode_key(bytes(key[len(prefix):])),
                                  "count": int.from_bytes(value, "big")})
            out["counts"] = every
        return out
