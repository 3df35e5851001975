"""Bucket declarations: create_bucket's options checked whole into the declaration the catalog keeps.

This sits beside catalog.py rather than in it: checking a declaration asks every store
type for its options (hoarddb.stores) and the index declarations (hoarddb.indexes),
while catalog.py is the persisted list that stores lean on (its names' rule): kept
apart, the catalog stays below the stores and this module above them, with no loop.
"""

from __future__ import annotations

from typing import Any

from .catalog import check_name
from .errors import BadValueError, InvalidArgumentError, UnknownOptionError
from .indexes.declaration import declare as declare_indexes
from .stores import store_class

#: Options every bucket accepts, whatever its type; a type adds its own (Store.bucket_options).
COMMON_BUCKET_OPTIONS = {
    "type": "the store type: fifo, lifo, hash, btree, heap or blob (default hash)",
    "fields": "field lines [{name, type, keywords}]; recorded in the declaration",
    "store_fields": "store fields [{name, type, store_fields?}] that each document owns (hash and btree buckets); "
                    "a hash or btree store field may declare store fields of its elements, down to the "
                    "maximum depth (max_nesting_depth, default 3)",
    "indices": "secondary indexes (hash buckets)",
    "placement": "whole: the bucket stays in one partition on one node of a cluster (fifo, lifo, heap: unless given "
                 "partitions and a group)",
    "partitions": "how many partitions a cluster spreads a hash, btree or blob bucket over (1 to 4096; hash: "
                  "default 64 in a cluster; the others: default 1), or a fifo, lifo or heap bucket given a group",
    "group": "fifo, lifo, heap: the field whose value picks an element's partition (a partitioned queue: order is kept "
             "per group value)",
}
#: The store types that can be partitioned queues (partitions with a group).
GROUPED = ("fifo", "lifo", "heap")
#: The values of ``placement``.
PLACEMENTS = ("whole",)
#: The store types a cluster can spread over partitions (the others are whole).
SPREADABLE = ("hash", "btree", "blob")
MAX_PARTITIONS = 4096
KEYED_TYPES = ("hash", "btree")
#: The deepest level a declaration may reach by default: L1 the bucket, L2 its documents'
#: store fields, L3 the store fields of their elements (``Options.max_nesting_depth``).
DEFAULT_MAX_DEPTH = 3


def declare_bucket(name: str, raw: Any, max_depth: int = DEFAULT_MAX_DEPTH) -> tuple[dict, list[str]]:
    """The declaration of bucket ``name`` from ``create_bucket``'s options, checked whole, and its
    warnings; nothing is written (restore checks a dump's declarations with it before loading any)."""
    if not isinstance(raw, dict):
        raise InvalidArgumentError("create_bucket: 'options' must be a document such as {type: \"fifo\"}")
    type_name = raw.get("type", "hash")
    cls = store_class(type_name)
    accepted = {**COMMON_BUCKET_OPTIONS, **cls.bucket_options}
    for key in raw:
        if key not in accepted:
            raise UnknownOptionError(
                f"unknown option {key!r} for a {type_name} bucket; accepted: {', '.join(sorted(accepted))}"
            )
    warnings: list[str] = []
    options = cls.validate_options({k: v for k, v in raw.items() if k not in COMMON_BUCKET_OPTIONS})
    fields = check_fields(raw.get("fields") or [], warnings)
    for f in fields:  # `key Score` where `key: Score` was meant: a field line, not the option
        if f["name"] in accepted:
            warnings.append(f"field line {f['name']} {f['type']}{''.join(' ' + k for k in f['keywords'])} "
                            f"declares a field named {f['name']!r}; for the bucket option write "
                            f"`{f['name']}: {f['type'] or '...'}` (with a colon)")
    store_fields = _check_store_fields(raw.get("store_fields") or [], type_name, name, 2, max_depth)
    indexes, index_warnings = declare_indexes(
        type_name, raw.get("indices"), [f["name"] for f in fields if "unique" in f["keywords"]], options
    )
    warnings.extend(index_warnings)
    stores = {f["name"]: f["type"] for f in store_fields}
    for f in fields:
        if f["name"] in stores:
            raise BadValueError(f"field {f['name']!r} is declared both as a field and as a {stores[f['name']]} store "
                                "field; give one of them another name")
    for ix in indexes:
        for f in ix["fields"]:
            if f in stores:
                raise BadValueError(
                    f"index {ix['name']!r} covers {f!r}, a {stores[f]} store field: an index covers the document's "
                    "own fields, never the contents of a store field (find its elements with the store's verbs, "
                    "or index a field of the document instead)")
    placement = check_placement(raw, type_name, indexes)
    declaration = {
        "name": name, "type": type_name, "options": options, "fields": fields,
        "store_fields": store_fields, "indexes": indexes,
        **placement,
    }
    return declaration, warnings


def check_placement(raw: dict, type_name: str, indexes: list[dict]) -> dict:
    """The ``placement`` and ``partitions`` of a declaration, checked: ``{placement?, partitions?}``.

    ``placement: whole`` keeps a bucket in one partition; ``partitions: N`` spreads a hash
    bucket over N (on a single server both are recorded and change nothing). A unique
    index needs the bucket whole: a partition's owner can refuse a duplicate only among
    the documents it holds.
    """
    out: dict = {}
    if "placement" in raw:
        placement = raw["placement"]
        if placement not in PLACEMENTS:
            raise BadValueError(f"placement {placement!r} is not one hoardDB knows; accepted: "
                                f"{', '.join(PLACEMENTS)} (leave it out to let a cluster spread a hash bucket "
                                "over its partitions)")
        out["placement"] = placement
    if "partitions" in raw:
        n = raw["partitions"]
        if type(n) is not int or not 1 <= n <= MAX_PARTITIONS:
            raise BadValueError(f"partitions must be a whole number from 1 to {MAX_PARTITIONS}, got {n!r}")
        if n > 1 and out.get("placement") == "whole":
            raise BadValueError(f"placement: whole keeps a bucket in one partition, and partitions: {n} asks for "
                                f"{n}; give one of them")
        if n > 1 and type_name in GROUPED and "group" not in raw:
            raise BadValueError(f"partitions: {n} on a {type_name} bucket makes a partitioned queue, which needs "
                                f"group: the field whose value picks an element's partition (order is kept per "
                                f"value), such as group: \"Customer\"; or leave partitions out for one order")
        if n > 1 and type_name not in SPREADABLE and type_name not in GROUPED:
            what = f"spreading a {type_name} bucket is not built yet"
            raise BadValueError(f"partitions: {n} on a {type_name} bucket: {what}; a {type_name} bucket is whole "
                                "(leave partitions out, or give partitions: 1)")
        if n > 1:
            unique = [ix["name"] for ix in indexes if ix.get("unique")]
            if unique:
                raise BadValueError(unique_needs_whole(unique[0], n))
        out["partitions"] = n
    if "group" in raw:
        group = raw["group"]
        if type_name not in GROUPED:
            raise BadValueError(f"group names the field that partitions a queue (fifo, lifo or heap, with partitions); "
                                f"a {type_name} bucket takes none")
        if not isinstance(group, str) or not group or group.startswith("$"):
            raise BadValueError(f"group is the name of a field, such as group: \"Customer\"; got {group!r:.40}")
        out["group"] = group
    return out


def unique_needs_whole(index: str, partitions) -> str:
    """The refusal of a unique index on a spread bucket, with its reason and its fix."""
    return (f"unique index {index!r} needs the bucket whole: spread over {partitions} partitions, each owner "
            "could refuse a duplicate only among its own documents. Add placement: whole (one partition on "
            "one node), or drop unique and check for duplicates yourself")


def check_fields(fields, warnings: list[str]) -> list[dict]:
    """A bucket's field lines ``[{name, type, keywords}]``, checked (create and alter bucket);
    a keyword other than ``unique`` is recorded with a warning added to ``warnings``."""
    if not isinstance(fields, list):
        raise InvalidArgumentError("'fields' must be a list of {name, type, keywords}")
    out, seen = [], set()
    for f in fields:
        if not isinstance(f, dict) or not isinstance(f.get("name"), str) or not isinstance(f.get("type", ""), str):
            raise InvalidArgumentError(f"a field line is {{name, type, keywords}}, got {f!r}")
        keywords = f.get("keywords") or []
        if not isinstance(keywords, list) or not all(isinstance(k, str) for k in keywords):
            raise InvalidArgumentError(f"field {f['name']!r}: keywords must be a list of words")
        if f["name"] in seen:
            raise BadValueError(f"field {f['name']!r} is declared twice")
        seen.add(f["name"])
        for k in keywords:
            if k != "unique":
                warnings.append(f"field {f['name']}: keyword {k!r} is recorded, not enforced")
        out.append({"name": f["name"], "type": f.get("type", ""), "keywords": list(keywords)})
    return out


def _check_store_fields(store_fields, type_name: str, owner: str, level: int, max_depth: int) -> list[dict]:
    """The store fields ``[{name, type, store_fields?}]`` of ``owner`` (a bucket, or a keyed
    store field: its elements' stores), each at ``level`` (2: a document's), checked."""
    if not isinstance(store_fields, list):
        raise InvalidArgumentError("'store_fields' must be a list of {name, type, store_fields?}")
    if store_fields and type_name not in KEYED_TYPES:
        if level == 2:
            raise BadValueError(
                f"a {type_name} bucket cannot declare store fields: only hash and btree documents own stores"
            )
        raise BadValueError(f"store field {owner} is a {type_name} store and cannot declare store fields: only the "
                            "elements of a hash or btree store field own stores")
    if store_fields and level > max_depth:
        raise BadValueError(too_deep(f"{owner}.{store_fields[0].get('name') if isinstance(store_fields[0], dict) else '?'}",
                                     level, max_depth))
    out, seen = [], set()
    for f in store_fields:
        if not isinstance(f, dict) or not isinstance(f.get("name"), str):
            raise InvalidArgumentError(f"a store field is {{name, type, store_fields?}}, got {f!r}")
        extra = set(f) - {"name", "type", "store_fields"}
        if extra:
            raise InvalidArgumentError(f"store field {f['name']!r}: unknown key(s) {', '.join(sorted(extra))}; "
                                       "a store field is {name, type, store_fields?}")
        store_class(f.get("type"))  # the six types, or UnknownStoreTypeError
        check_name(f["name"], "store field")
        if f["name"] in seen:
            raise BadValueError(f"store field {f['name']!r} is declared twice")
        seen.add(f["name"])
        entry = {"name": f["name"], "type": f["type"]}
        if f.get("store_fields"):
            entry["store_fields"] = _check_store_fields(f["store_fields"], f["type"], f"{owner}.{f['name']}",
                                                        level + 1, max_depth)
        out.append(entry)
    return out


def too_deep(address: str, level: int, max_depth: int) -> str:
    """The refusal of a store declared at ``level``, past ``max_depth``, with the advice to keep shallow."""
    return (f"store field {address} would be at level L{level}, deeper than the maximum of L{max_depth} "
            f"(max_nesting_depth). Keep nesting shallow: L1 to L3 covers most uses. Anything that can grow "
            "independently and unpredictably belongs in an L1 bucket of its own, holding the parent's key in a "
            "field; or raise max_nesting_depth")


def depth_of(store_fields) -> int:
    """The deepest level a declaration's store fields reach: 1 without any, 2 with store fields, 3 with nested ones…"""
    return 1 + max((depth_of(f.get("store_fields") or []) for f in store_fields or []), default=0)


def addresses(bucket: str, store_fields, above: str = "", level: int = 2) -> list[dict]:
    """``[{address, type, level}]`` of every store a declaration's documents own, named by
    its dotted address as the L1/L2 guide writes them (``User.Friends``, a level deeper
    ``User.Friends.Messages``; one document's store is ``User.jane.Friends``)."""
    out = []
    for f in store_fields or []:
        address = f"{above or bucket}.{f['name']}"
        out.append({"address": address, "type": f["type"], "level": level})
        out.extend(addresses(bucket, f.get("store_fields"), address, level + 1))
    return out


def store_type_at(declaration: dict, field: Any, path: Any = None) -> str | None:
    """The type of the store a request names: its ``field`` of a document, and below it the
    ``path`` steps ``[{key, field}]``; None when the declaration has no such store."""
    declared, found = declaration.get("store_fields") or [], None
    for name in [field] + [step.get("field") if isinstance(step, dict) else None for step in path or []]:
        found = next((f for f in declared if f.get("name") == name), None)
        if found is None:
            return None
        declared = found.get("store_fields") or []
    return found.get("type") if found else None
