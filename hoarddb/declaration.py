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
    "store_fields": "store fields [{name, type}] that each document owns (hash and btree buckets)",
    "indices": "secondary indexes (hash buckets)",
    "placement": "whole: the bucket stays in one partition on one node of a cluster (fifo, lifo, heap: always)",
    "partitions": "how many partitions a cluster spreads a hash bucket over (1 to 4096; default 64 in a cluster)",
}
#: The values of ``placement``.
PLACEMENTS = ("whole",)
#: The store types a cluster can spread over partitions (the others are whole).
SPREADABLE = ("hash",)
MAX_PARTITIONS = 4096
KEYED_TYPES = ("hash", "btree")


def declare_bucket(name: str, raw: Any) -> tuple[dict, list[str]]:
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
    store_fields = _check_store_fields(raw.get("store_fields") or [], type_name)
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
        if n > 1 and type_name not in SPREADABLE:
            what = ("a partitioned queue (partitions with a group field) is not built yet"
                    if type_name in ("fifo", "lifo", "heap") else f"spreading a {type_name} bucket is not built yet")
            raise BadValueError(f"partitions: {n} on a {type_name} bucket: {what}; a {type_name} bucket is whole "
                                "(leave partitions out, or give partitions: 1)")
        if n > 1:
            unique = [ix["name"] for ix in indexes if ix.get("unique")]
            if unique:
                raise BadValueError(unique_needs_whole(unique[0], n))
        out["partitions"] = n
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


def _check_store_fields(store_fields, type_name: str) -> list[dict]:
    if not isinstance(store_fields, list):
        raise InvalidArgumentError("'store_fields' must be a list of {name, type}")
    if store_fields and type_name not in KEYED_TYPES:
        raise BadValueError(
            f"a {type_name} bucket cannot declare store fields: only hash and btree documents own stores"
        )
    out, seen = [], set()
    for f in store_fields:
        if not isinstance(f, dict) or not isinstance(f.get("name"), str):
            raise InvalidArgumentError(f"a store field is {{name, type}}, got {f!r}")
        store_class(f.get("type"))  # the six types, or UnknownStoreTypeError
        check_name(f["name"], "store field")
        if f["name"] in seen:
            raise BadValueError(f"store field {f['name']!r} is declared twice")
        seen.add(f["name"])
        out.append({"name": f["name"], "type": f["type"]})
    return out
