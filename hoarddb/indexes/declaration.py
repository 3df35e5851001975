"""Index declarations: turning ``indices:`` and ``unique`` field lines into checked index specs, and every refusal.

A checked declaration, as the catalog keeps it in the bucket's ``indexes`` list:

    {id: 0, name: "Email_1", fields: ["Email"], unique: true,
     expire_after_seconds: null, format: 3, state: "ready"}

``id`` is the index's byte in its entries' keys (``b"I" + bytes([id]) + ...``), fixed at
creation. ``format`` is the version of the index format that wrote the entries
(hoarddb.indexes.maintenance draws them):

    1  entries for documents that have the field (an older hoardDB; never written now)
    2  entries for every document, a missing field recorded as null; an array by its
       distinct elements and as a whole (never written now)
    3  as 2, but a non-empty array by its distinct elements only, an empty one by the
       entry []  (FORMAT, for a plain index)
    4  as 3, for an index whose declaration changes which documents have entries
       (``sparse``, ``partialFilterExpression``) or their order (``desc``); a hoardDB
       that knows only 3 would write every document's entries in ascending order, so it
       must see this index as ``unreadable`` (FORMAT_EXTENDED)
    5  a time-range index (``timeRange``): entries, counts and rankings per window, drawn in
       hoarddb.indexes.timerange; an older hoardDB sees it as ``unreadable``

An index whose format is older than the one this version writes for its declaration
(:func:`format_for`) is rebuilt when its bucket opens (state
``building`` meanwhile): every entry is deleted and written again from the documents.
One newer than FORMAT_FILTERED was declared by a newer hoardDB and is ``unreadable`` here, kept
unchanged. Change FORMAT whenever the entries a document has change, and add its line
above: entries of another format would be wrong to keep (a unique index would refuse
values nobody holds).
"""

from __future__ import annotations

import re
from typing import Any

from bson.regex import Regex

from ..errors import BadValueError, UnknownOptionError
from ..values.filter import compile_filter
from ..values.literal import literal
from . import timerange

#: The index format this version writes for a plain index (the list above).
FORMAT = 3
#: The format of an index that leaves some documents out (sparse or partial) or orders a
#: field descending, and the newest this version can maintain.
FORMAT_EXTENDED = 4
NEWEST_FORMAT = FORMAT_EXTENDED
#: The most indexes one bucket may declare (an index id is one byte).
MAX_INDEXES = 64

ACCEPTED_KEYS = ("field", "fields", "name", "unique", "expire_after_seconds", "type", "desc", "sparse",
                 "partialFilterExpression", "timeRange", "ranked")
#: What a partialFilterExpression may hold (MongoDB's subset), as the refusal of anything else names it.
PARTIAL_ACCEPTED = ("equality ({field: value} or {field: {$eq: value}})", "$exists: true", "$gt", "$gte", "$lt",
                    "$lte", "$type", "$and at the top level")
#: Keys a declaration holds only when they are given (describe, dump and restore carry them over).
OPTIONAL_KEYS = ("sparse", "partialFilterExpression", "desc", "timeRange", "ranked")
PARTIAL_OPERATORS = ("$eq", "$exists", "$gt", "$gte", "$lt", "$lte", "$type")
STATES = ("ready", "building", "conflicted", "unreadable")
#: The longest expire_after_seconds (2**31 - 1 seconds, about 68 years, as MongoDB allows):
#: the sweeper turns ``now - expire_after_seconds`` into a date, which must exist.
MAX_TTL_SECONDS = 2**31 - 1


def index_name(fields: list[str], desc: list[str] | tuple = ()) -> str:
    """The default name: each field followed by ``_1`` (``_-1`` when it descends), joined with ``_``
    (``CustomerID_1_CreatedAt_-1``)."""
    return "_".join(f"{f}_-1" if f in desc else f"{f}_1" for f in fields)


def declare(type_name: str, indices: Any, unique_fields: list[str],
            bucket_options: dict | None = None) -> tuple[list[dict], list[str]]:
    """Checked index declarations from ``indices`` and the fields marked ``unique``, and warnings.

    ``bucket_options`` are the bucket's (``timestamps``, ``immutable``), which time-range
    indexes depend on (hoarddb.indexes.timerange.check_bucket).

    Field-line indexes come first (in field order), then ``indices`` in order; that order
    is "declared first" for the planner's tie-break.
    """
    warnings: list[str] = []
    if indices is None:
        indices = []
    if not isinstance(indices, list):
        raise BadValueError('indices is a list, such as ["Email"] or [{field: "Email", unique: true}]')
    if (indices or unique_fields) and type_name != "hash":
        why = ("a btree bucket is already sorted by its key" if type_name == "btree"
               else "queues, heaps and blobs have no documents to look up by field")
        raise BadValueError(
            f"a {type_name} bucket cannot have indexes: only hash buckets maintain secondary indexes ({why})"
        )
    specs = []
    for f in unique_fields:
        _check_field(f, f"the unique field line {f!r}")
        specs.append({"fields": [f], "unique": True, "expire_after_seconds": None, "name": None, "extra": {}})
    for position, entry in enumerate(indices):
        specs.append(_entry(entry, position, warnings))
    if len(specs) > MAX_INDEXES:
        raise BadValueError(f"a bucket may declare at most {MAX_INDEXES} indexes; this one declares {len(specs)}")
    out: list[dict] = []
    for i, spec in enumerate(specs):
        name = spec["name"] or index_name(spec["fields"], spec["extra"].get("desc", ()))
        for other in out:
            if other["fields"] == spec["fields"] and timerange.grid_of(other) == timerange.grid_of(spec["extra"]):
                raise BadValueError(
                    f"two indexes are on the same fields ({', '.join(spec['fields'])}): {other['name']!r} and {name!r}; "
                    "declare one (a unique index serves searches too)"
                )
            if other["name"] == name:
                raise BadValueError(f"two indexes are named {name!r}; give one of them another name with name:")
        decl = {
            "id": i, "name": name, "fields": spec["fields"], "unique": spec["unique"],
            "expire_after_seconds": spec["expire_after_seconds"], **spec["extra"], "state": "ready",
        }
        decl["format"] = format_for(decl)
        out.append(decl)
    timerange.check_bucket(out, bucket_options or {})
    return out, warnings


def _entry(entry: Any, position: int, warnings: list[str]) -> dict:
    where = f"index {position} of indices"
    if isinstance(entry, str):
        entry = {"field": entry}
    if not isinstance(entry, dict):
        raise BadValueError(f"{where} is a field name or a document such as {{field: \"Email\", unique: true}}; got {entry!r}")
    for key in entry:
        if key not in ACCEPTED_KEYS:
            raise UnknownOptionError(
                f"{where}: unknown key {key!r}; an index accepts: {', '.join(ACCEPTED_KEYS)}"
            )
    if ("field" in entry) == ("fields" in entry):
        raise BadValueError(f"{where} needs exactly one of field: \"Name\" or fields: [\"A\", \"B\"]")
    fields = [entry["field"]] if "field" in entry else entry["fields"]
    if not isinstance(fields, list) or not fields:
        raise BadValueError(f"{where}: fields is a non-empty list of field names")
    time_range = entry.get("timeRange")
    for i, f in enumerate(fields):
        if not (i == 0 and time_range is not None and f in timerange.KEPT):  # a kept timestamp heads a time-range index
            _check_field(f, where)
    if len(set(fields)) != len(fields):
        twice = next(f for f in fields if fields.count(f) > 1)
        raise BadValueError(f"{where} names the field {twice!r} twice")
    unique = entry.get("unique", False)
    if not isinstance(unique, bool):
        raise BadValueError(f"{where}: unique is true or false, got {unique!r}")
    desc = _desc(entry.get("desc", False), fields, where)
    ttl = entry.get("expire_after_seconds")
    if ttl is not None:
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not (0 <= ttl <= MAX_TTL_SECONDS):
            # NaN fails the comparison too: not a number of seconds
            raise BadValueError(
                f"{where}: expire_after_seconds is a number of seconds from 0 to {MAX_TTL_SECONDS} "
                f"(about 68 years), got {ttl!r}"
            )
        if unique:
            raise BadValueError(
                f"{where}: a TTL index cannot be unique — expiry deletes documents on a timer, "
                "which would make a uniqueness rule come and go; declare two indexes"
            )
        if len(fields) > 1:
            raise BadValueError(f"{where}: a TTL index covers exactly one field (the time), not {len(fields)}")
        if desc:
            raise BadValueError(f"{where}: a TTL index cannot be desc — the sweeper reads it from the oldest time "
                                "on; declare it without desc, and another index with desc to sort by that field")
    if "type" in entry:
        if entry["type"] != "range":
            raise BadValueError(f"{where}: type may only be \"range\" (and is ignored); got {entry['type']!r}")
        warnings.append(f"{where}: type: \"range\" is accepted and ignored — every index is the same kind")
    name = entry.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise BadValueError(f"{where}: name is a non-empty string, got {name!r}")
    extra: dict = {}
    sparse = entry.get("sparse", False)
    if not isinstance(sparse, bool):
        raise BadValueError(f"{where}: sparse is true or false, got {sparse!r}")
    if sparse:
        extra["sparse"] = True
    if desc:
        extra["desc"] = desc
    ranked = entry.get("ranked", False)
    if not isinstance(ranked, bool):
        raise BadValueError(f"{where}: ranked is true or false, got {ranked!r}")
    if ranked and time_range is None:
        raise BadValueError(f"{where}: ranked keeps counts and a ranking per window of a time-range index; "
                            "it needs timeRange")
    if time_range is not None:
        for key, what in (("expire_after_seconds", "timeRange's ttl expires a window's entries"),
                          ("desc", "windows are kept in time order"), ("sparse", "a document without a date is "
                           "in no window already"), ("partialFilterExpression", "not built yet")):
            if entry.get(key) not in (None, False):
                raise BadValueError(f"{where}: a time-range index does not take {key} ({what})")
        extra["timeRange"] = timerange.check(time_range, fields, unique, ranked, where)
        if ranked:
            extra["ranked"] = True
    if "partialFilterExpression" in entry:
        if sparse:
            raise BadValueError(
                f"{where}: sparse and partialFilterExpression cannot be combined — a partial index already leaves "
                "out the documents its expression does not match; for a sparse one write "
                "{Field: {$exists: true}} in the expression"
            )
        extra["partialFilterExpression"] = check_partial(entry["partialFilterExpression"], where)
    return {"fields": list(fields), "unique": unique, "expire_after_seconds": ttl, "name": name, "extra": extra}


def format_for(decl: dict) -> int:
    """The index format this version writes for a declaration (see the module's docstring)."""
    if decl.get("timeRange") is not None:
        return timerange.FORMAT
    return FORMAT_EXTENDED if any(decl.get(k) for k in OPTIONAL_KEYS) else FORMAT


def _desc(desc: Any, fields: list[str], where: str) -> list[str]:
    """The fields that descend: ``desc: true`` all of them, ``desc: ["B"]`` those named, false none."""
    if desc is False:
        return []
    if desc is True:
        return list(fields)
    if isinstance(desc, list) and desc and all(isinstance(f, str) for f in desc):
        for f in desc:
            if f not in fields:
                raise BadValueError(f"{where}: desc names {f!r}, which is not one of the index's fields "
                                    f"({', '.join(fields)})")
        if len(set(desc)) != len(desc):
            raise BadValueError(f"{where}: desc names a field twice")
        return [f for f in fields if f in desc]
    raise BadValueError(f"{where}: desc is true (every field descends), false, or a list of the index's fields "
                        f"that descend, such as [\"{fields[-1]}\"]; got {desc!r}")


def check_partial(expr: Any, where: str) -> dict:
    """A partialFilterExpression, checked: MongoDB's subset (:data:`PARTIAL_ACCEPTED`), and a valid filter."""
    accepted = "; a partialFilterExpression accepts " + ", ".join(PARTIAL_ACCEPTED)
    if not isinstance(expr, dict) or not expr:
        raise BadValueError(f"{where}: partialFilterExpression is a non-empty document such as "
                            f"{{Status: \"open\"}}, got {expr!r:.60}")
    for key, value in expr.items():
        if key == "$and":
            if not isinstance(value, list) or not value or not all(isinstance(m, dict) and m for m in value):
                raise BadValueError(f"{where}: partialFilterExpression's $and is a non-empty list of documents")
            for member in value:
                for k, v in member.items():
                    if k.startswith("$"):
                        raise BadValueError(f"{where}: partialFilterExpression: {k} is not accepted inside $and "
                                            f"(only field conditions are){accepted}")
                    _check_partial_condition(k, v, where, accepted)
        elif isinstance(key, str) and key.startswith("$"):
            raise BadValueError(f"{where}: partialFilterExpression: {key} is not accepted{accepted}")
        else:
            _check_partial_condition(key, value, where, accepted)
    try:
        compile_filter(expr)
    except BadValueError as exc:
        raise BadValueError(f"{where}: partialFilterExpression: {exc.message}") from None
    return expr


def _check_partial_condition(field: Any, cond: Any, where: str, accepted: str) -> None:
    if not isinstance(field, str) or not field:
        raise BadValueError(f"{where}: partialFilterExpression: a field name is a non-empty string, got {field!r}")
    if isinstance(cond, (Regex, re.Pattern)):
        raise BadValueError(f"{where}: partialFilterExpression: {field}: a regular expression is not "
                            f"accepted{accepted}")
    if isinstance(cond, dict) and cond and all(isinstance(k, str) and k.startswith("$") for k in cond):
        for op, arg in cond.items():
            if op not in PARTIAL_OPERATORS:
                raise BadValueError(f"{where}: partialFilterExpression: {field}: {op} is not accepted{accepted}")
            if op == "$exists" and arg is not True:
                raise BadValueError(f"{where}: partialFilterExpression: {field}: $exists is accepted only as "
                                    f"$exists: true, got {arg!r}{accepted}")
            if op == "$eq" and isinstance(arg, (Regex, re.Pattern)):
                raise BadValueError(f"{where}: partialFilterExpression: {field}: a regular expression is not "
                                    f"accepted{accepted}")


def _check_field(f: Any, where: str) -> None:
    """Refuse what cannot name a top-level field (the same rule for indices and field lines)."""
    if not isinstance(f, str) or not f or f.startswith("$"):
        raise BadValueError(f"{where}: a field name is a non-empty string not starting with $; got {f!r}")
    if "." in f:
        raise BadValueError(f"{where}: {f!r} is a path into a nested document; indexes cover top-level fields only")
    if "\x00" in f:
        raise BadValueError(f"{where}: a field name cannot contain the character NUL; got {f!r}")


def describe(index: dict) -> str:
    """How stats and describe print one index: ``Email_1 (unique)``, ``CreatedAt_1 (ttl 3600s)``."""
    notes = []
    if index.get("unique"):
        notes.append("unique")
    if index.get("expire_after_seconds") is not None:
        ttl = index["expire_after_seconds"]
        notes.append(f"ttl {int(ttl) if float(ttl).is_integer() else ttl}s")
    if index.get("sparse"):
        notes.append("sparse")
    if index.get("desc") and index["name"] != index_name(index["fields"], index["desc"]):
        notes.append("desc " + ", ".join(index["desc"]))
    if "partialFilterExpression" in index:
        notes.append(f"partial {literal(index['partialFilterExpression'])}")
    if index.get("timeRange") is not None:
        notes.append(timerange.describe(index))
    if index.get("state", "ready") != "ready":
        notes.append(index["state"])
    return index["name"] + (f" ({', '.join(notes)})" if notes else "")
