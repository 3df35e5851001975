"""The table of operations, declared as data: every operation hoardDB serves, what it takes and how it runs.

An operation is a plain document, ``{op: "push", db: "app", bucket: "Comments", args: {...}}``.
Each one the engine, the server or the shell serves is one :class:`Operation` entry below:
bucket verbs (:data:`VERBS`), store-field verbs (:data:`FIELD_VERBS`), catalog operations,
and the server's own (users, whoami); :data:`OPERATIONS` holds them all by name (a
store-field verb shares its name with the bucket verb). An entry says, as data, where the
operation acts (``scope``), which store types serve it, its parameters, whether it writes
or changes the catalog, its cost class (what the server's scheduling reads), whether it
streams or takes an upload, whether a client may send it again after a lost answer, the
role it needs, and which part of the request decides where it runs (``route``, what a
cluster routes by). Everything that speaks operations reads these flags and keeps no
list of its own: the engine's dispatch and argument checks, the server's authorization
and choice of loop, pool or group commit, group-commit batching, client retries, the
Python API's methods (``bucket.push(...)``), HQL's calls, the shell's help and
completion, and the verb tables of docs/user (tests/test_operations_table.py holds them
to it).

Adding a verb: one :class:`Operation` entry in :data:`VERBS`, plus a method of the same
name on each store type that serves it (``hoarddb/stores/<type>.py``); docs/dev/architecture.md
walks through ``exists``.

Calls bind their arguments the same way from Python and from HQL (:func:`bind`):
positional values fill ``params`` in order; a document given where a scalar parameter
is expected, or left over after the params, is the options document
(``peek({limit: 5})`` is ``peek(5)``); keyword arguments may name params or options.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any

from .errors import BadValueError, InvalidArgumentError, InvalidNameError, UnknownVerbError

#: What an operation document is, said when a request is not one (embedded and remote alike).
REQUEST_SHAPE = "an operation is a document with a string 'op', such as {op: \"push\", db, bucket, args}"



def kind_of(value: Any) -> str:
    """What a value is, in the words of a refusal: ``a document``, ``code``, ``the integer 5``."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"the boolean {value}"
    if isinstance(value, Mapping):
        return "a document"
    if isinstance(value, (list, tuple)):
        return "an array"
    name = type(value).__name__
    if isinstance(value, str):
        return f"the string {value!r:.40}" if type(value) is str else f"{name} (not a plain string)"
    if isinstance(value, int):
        return f"the integer {value}"
    return {"Regex": "a regular expression", "Pattern": "a regular expression", "Decimal128": "a Decimal128",
            "MinKey": "MinKey", "MaxKey": "MaxKey", "Timestamp": "a BSON timestamp", "bytes": "binary",
            "Binary": "binary", "float": f"the number {value!r}"}.get(name, f"a {name}")


def check_request(request: Any) -> str:
    """The name of ``request``'s operation, once every field of the request has the type it must.

    The one check of a request's shape, made before anything is looked up by its fields
    (an unhashable bucket name would otherwise fail deep inside a lookup): the engine
    makes it for every request it executes, and the server for every request it reads,
    before it decides where the request runs. ``op``, ``db``, ``bucket`` and ``field``
    must be plain strings (not code, which BSON decodes as a kind of string) and ``args``
    a document; a refusal names the field and what it accepts. A document's ``key`` is
    any value a key may be, checked by its bucket; an operation's arguments are checked
    against its parameters when they are bound (:func:`bind`).
    """
    try:  # the common request, {op, db, bucket, args?}, looked at with no call: it runs for every request a server reads
        op = request["op"]
        if type(op) is str and type(request["db"]) is str and type(request["bucket"]) is str \
                and op not in _WITH_FIELDS and type(request.get("args", _NO_ARGS)) is dict \
                and ("field" not in request or type(request["field"]) is str) and "path" not in request \
                and type(request) is dict:
            return op
    except (KeyError, TypeError):  # no db or bucket (a catalog or server operation), or no document at all
        pass
    if not isinstance(request, dict):
        raise InvalidArgumentError(f"{REQUEST_SHAPE}; got {kind_of(request)}")
    _refuse_request(request)
    op = request["op"]
    if op in _WITH_FIELDS:
        _check_fields(_WITH_FIELDS[op], request)
    return op


_NO_ARGS: dict = {}


def _check_fields(op: "Operation", request: dict) -> None:
    """Refuse a field of a catalog or server operation's request that has the wrong kind
    (one left out is the operation's to refuse, saying what it needs)."""
    for p in op.fields:
        value = request.get(p.name)
        if value is None:
            continue
        kind = p.kind
        if not (type(value) is str if kind == "str" else isinstance(value, dict) if kind == "doc"
                else isinstance(value, list) if kind == "list" else True):
            raise InvalidArgumentError(f"{op.name}: {p.name!r} must be {KINDS[kind]}, got {kind_of(value)}")


def _refuse_request(request: dict) -> None:
    """Raise the refusal of the first field of ``request`` that has the wrong type."""
    op = request.get("op")
    if type(op) is not str:
        raise InvalidArgumentError(f"{REQUEST_SHAPE}; 'op' must be a string, got {kind_of(op)}")
    for name, what in (("db", "database"), ("bucket", "bucket")):
        value = request.get(name)
        if value is not None and type(value) is not str:
            raise InvalidNameError(f"invalid {what} name: {op}: {name!r} must be a string, "
                                   f"got {kind_of(value)}; a {what} name is {NAME_RULE}")
    field = request.get("field")
    if field is not None and type(field) is not str:
        raise InvalidArgumentError(f"{op}: 'field' (the name of a document's store field) must be a string, "
                                   f"got {kind_of(field)}")
    if "path" in request and op not in _WITH_FIELDS:  # (backup's path is a directory: its own field)
        check_path(op, request)
    args = request.get("args")
    if args is not None and not isinstance(args, dict):
        raise InvalidArgumentError(f"{op}: 'args' must be a document of named arguments, got {kind_of(args)}")


#: What a request's ``path`` is, said in its refusals.
PATH_SHAPE = ("'path' leads from the document's store field down to a deeper store: a list of {key, field}, "
              "the element's key in the store above and the field of that element, such as "
              "{op: \"push\", bucket: \"User\", key: \"jane\", field: \"Friends\", "
              "path: [{key: \"bob\", field: \"Messages\"}], args}")


def check_path(op: str, request: dict) -> None:
    """Refuse a request's ``path`` (the steps below its store ``field``) unless it is a list of
    ``{key, field}`` with a string field, on a request that names a document's ``key`` and ``field``."""
    path = request["path"]
    if "field" not in request or "key" not in request:
        raise InvalidArgumentError(f"{op}: a 'path' needs the document's 'key' and its store 'field'; {PATH_SHAPE}")
    if type(path) is not list:
        raise InvalidArgumentError(f"{op}: {PATH_SHAPE}; got {kind_of(path)}")
    for step in path:
        if type(step) is not dict or set(step) != {"key", "field"} or type(step["field"]) is not str:
            raise InvalidArgumentError(f"{op}: {PATH_SHAPE}; got the step {step!r:.80}")


#: The rule of database and bucket names (hoarddb.catalog checks it), said in refusals.
NAME_RULE = "1 to 64 characters: a letter, then letters, digits, '_' or '-'"

#: The six store types.
STORE_TYPES = ("fifo", "lifo", "hash", "btree", "heap", "blob")
QUEUES = frozenset({"fifo", "lifo"})


@dataclass(frozen=True)
class Param:
    """Param is one argument of an operation: its name, its kind and whether it may be left out."""

    name: str
    kind: str  # doc, docs, filter, update, int, any, data, str, list
    required: bool = True
    help: str = ""
    #: What leaving it out means, where the scheduling needs to know (peek's limit: one element).
    default: Any = None


#: What each parameter kind accepts, said in refusals.
KINDS = {
    "doc": "a document",
    "docs": "a list of documents",
    "filter": "a filter document such as {Score: {$gte: 90}}",
    "update": "an update document such as {$set: {Name: \"x\"}}",
    "int": "an integer",
    "any": "a value",
    "data": "bytes, a file object, or {data, name, type}",
    "str": "a string",
    "list": "a list",
}

# -- the flags of an entry ----------------------------------------------------------------

#: Scopes: where an operation acts.
SERVER, DATABASE, BUCKET, FIELD = "server", "database", "bucket", "field"
#: Cost classes, as the server schedules them (server/server.py, server/commit.py):
#: a point read touches one key and runs on the event loop; a short read (peek, list) too
#: when its limit is at most 100; an indexed read (search) when an index answers it with
#: few documents; a scan runs on a read thread. A write runs in the group commit; a batch
#: write of many documents, or a write by a filter other than one key, may be long, and
#: runs on the commit's thread even for a lone connection.
POINT, SHORT, INDEXED, SCAN = "point", "short", "indexed", "scan"
WRITE, BATCH, FILTERED_WRITE = "write", "batch", "filtered write"
COSTS = (POINT, SHORT, INDEXED, SCAN, WRITE, BATCH, FILTERED_WRITE)
#: What runs an operation: a bucket's store, the engine (the catalog), or the server (SERVER).
STORE, ENGINE = "store", "engine"
#: Routes: which part of a request decides where it runs, once hoardDB is a cluster.
ROUTE_NONE, ROUTE_DATABASE, ROUTE_BUCKET, ROUTE_KEY = "none", "database", "bucket", "key"
#: Roles an operation may need (server/auth.py): "look" is any role on the database,
#: "any" any logged-in user.
ROLES = ("read", "readWrite", "dbAdmin", "look", "any", "admin")


@dataclass(frozen=True)
class Operation:
    """Operation is one entry of the table: what an operation takes, what it answers, how it runs."""

    name: str
    types: frozenset = frozenset()  # the store types that serve it (bucket and field scopes)
    params: tuple = ()
    options: tuple = ()  # Params accepted only by name or in an options document
    write: bool = False
    summary: str = ""
    answer: str = ""
    aliases: tuple = ()
    example: str = ""
    scope: str = BUCKET
    #: Whether it changes declarations (the engine then empties its cache of them).
    catalog: bool = False
    #: Its cost class (COSTS; default: WRITE for a write, POINT for a read).
    cost: str = ""
    #: Whether its answer is a stream of chunks (a blob's bytes).
    streams: bool = False
    #: The parameter a blob upload's bytes go to (a put's doc, a load's docs), or None.
    upload: str | None = None
    #: Whether a client may send it again after its answer was lost (default: it does not write).
    retry: bool | None = None
    #: The role it needs (ROLES; default: read or readWrite for verbs, admin otherwise).
    role: str = ""
    #: Which part of the request decides where it runs (ROUTE_*; default: by its scope).
    route: str = ""
    #: What runs it (STORE, ENGINE, SERVER; default: a store for verbs, the engine otherwise).
    runs: str = ""
    #: Fields of the request itself (beside op, db and bucket) that a catalog or server
    #: operation reads; checked as params are (check_request).
    fields: tuple = ()
    #: The HQL statement that runs it, for operations HQL writes as statements.
    hql: str = ""
    #: Whether the server logs each run with who ran it and what came of it (maintenance an
    #: operator looks back on: check, backup, sweep_ttl).
    logged: bool = False
    #: Whether its answer is narrowed to what the user may see (list_databases: their databases).
    narrowed: bool = False
    #: Whether its requests in a row to one bucket may run as one (a group commit's pushes
    #: or pops of one queue: the store's ``<name>_each``).
    together: bool = False
    #: Whether its store method reads other buckets of the same database (aggregate's
    #: $lookup): the engine passes it ``buckets(name)``, that hash bucket's documents.
    joins: bool = False
    #: HQL's chained cursor methods that make it another operation, as mongosh's cursor:
    #: ``(method, operation, {args it sets})``; ``db.T.find(f).count()`` is count(f). An
    #: entry with these also takes each of its options as a method: ``.sort({Date: -1})``.
    chains: tuple = ()
    #: A bucket verb's parameter that names the one document it acts on, for a cluster to
    #: route it to that document's partition (hoarddb/cluster/node.py): the key itself, or a
    #: document or filter whose ``_id_`` is a plain value. Empty: it acts on many.
    key_param: str = ""
    #: Whether the store makes the key of a document given without one (insert): a cluster
    #: makes it where the request arrives, to know the document's partition.
    makes_key: bool = False
    #: How the answers of a spread bucket's partitions make one answer: "documents" (lists of them,
    #: merged in key order — a btree's: its sort key's — limit applied after), "sum" (a number),
    #: "counts" ({matched, modified}, {deleted}: added up), "split" (a batch: cut by partition,
    #: its keys put back in order), "least" / "greatest" (the entry of least / greatest key),
    #: "turns" (a partitioned queue's pop, peek: the owners asked in turn), "turns_claimed"
    #: (claim: the same, each claimId named by its node), "by_claim" (ack, release, extend: each
    #: claimId sent to its node), "windows" (one window of a time-range index: counts added up,
    #: ranked again), "pages" (export: one page in key order across the owners), "values"
    #: (distinct: the matching documents gathered, their values taken once), "pipeline"
    #: (aggregate: the matching documents gathered, the pipeline run over them where the
    #: request arrived). Empty: a spread bucket refuses it (not built yet).
    gather: str = ""
    #: What a catalog operation does to its scope's object: "create", "drop" or "alter".
    change: str = ""
    #: Whether its answer may come through a cursor (hoarddb/cursors.py): given ``batch_size``,
    #: the answer holds the first batch and, when more remain, a ``cursor`` id that ``more`` reads
    #: on. "stream": the store method, given ``stream=True``, answers an iterator that reads as
    #: it goes; "batches": its answer (a list, bounded by its limit) is handed out in batches.
    cursor: str = ""
    # Derived once from the above by __post_init__, for binding on the hot path:
    #: the names of params, in order
    param_names: tuple = dataclasses.field(init=False, repr=False, compare=False)
    #: whether a positional call is bound by zipping (no scalar param that could take an options document instead)
    simple: bool = dataclasses.field(init=False, repr=False, compare=False)
    #: whether every param of a simple call takes any value: a positional call needs no kind check at all
    unchecked: bool = dataclasses.field(init=False, repr=False, compare=False)
    #: the name of the one argument of a simple verb (insert's doc, get's key), else None
    single: str | None = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        verb = self.scope in (BUCKET, FIELD)
        defaults = {"cost": WRITE if self.write else POINT, "retry": not self.write,
                    "role": ("readWrite" if self.write else "read") if verb else "admin",
                    "route": {SERVER: ROUTE_NONE, DATABASE: ROUTE_DATABASE, BUCKET: ROUTE_BUCKET,
                              FIELD: ROUTE_KEY}[self.scope],
                    "runs": STORE if verb else ENGINE}
        for name, value in defaults.items():
            if getattr(self, name) in ("", None):
                object.__setattr__(self, name, value)
        if self.role not in ROLES or self.cost not in COSTS:
            raise ValueError(f"operation {self.name}: role {self.role!r} or cost {self.cost!r} is not one of the table's")
        object.__setattr__(self, "param_names", tuple(p.name for p in self.params))
        object.__setattr__(self, "simple", all(p.kind not in ("int", "str") for p in self.params)
                           and not self.options and all(p.required for p in self.params))
        object.__setattr__(self, "unchecked", self.simple and all(p.kind == "any" for p in self.params))
        object.__setattr__(self, "single", self.param_names[0] if self.simple and len(self.params) == 1 else None)

    def param(self, name: str) -> Param | None:
        for p in self.params + self.options:
            if p.name == name:
                return p
        return None


def _types(*names: str) -> frozenset:
    return frozenset(names)


_LIMIT = Param("limit", "int", False, "how many elements")
#: What find and search become when HQL chains .count() or .explain() after them.
_CURSOR_CHAINS: tuple[tuple[str, str, dict[str, Any]], ...] = (("count", "count", {}), ("explain", "search", {"explain": True}))
#: find's and search's options besides the limit.
_READ_OPTIONS = (_LIMIT, Param("sort", "doc", False, "fields and directions, such as {Date: -1}"),
                 Param("skip", "int", False, "how many matches to pass over"),
                 Param("projection", "doc", False, "the fields to keep ({name: 1}) or drop ({notes: 0})"))
#: A cursor's batch: given, the answer is the first batch and a cursor id when more remain.
_BATCH = Param("batch_size", "int", False, "answer through a cursor: at most this many documents in the first "
               "batch, the rest with more (see hoarddb/cursors.py)")
_FIND_OPTIONS = _READ_OPTIONS + (_BATCH,)
_ONE = Param("limit", "int", False, "how many elements (one when left out)", default=1)
_AFTER = Param("after", "any", False, "continue after this position (queues: how many to skip; keyed stores: a key)")

#: Verbs on buckets (and, later, on store fields of a document).
VERBS: dict[str, Operation] = {}


def _verb(op: Operation) -> None:
    VERBS[op.name] = op
    for alias in op.aliases:
        VERBS[alias] = op


for _op in [
    Operation("push", _types("fifo", "lifo", "heap"), (Param("doc", "doc"),), write=True, together=True,
              summary="Add one element (a heap element carries a numeric priority).",
              answer="null", example='db.Comments.push({Author: "Bob", Text: "Nice photo!"})'),
    Operation("batch_push", _types("fifo", "lifo", "heap"), (Param("docs", "docs"),), write=True, gather="split",
              summary="Add many elements in one durable write; all or none.",
              answer="the number added", aliases=("batchPush",),
              example='db.Comments.batchPush([{Text: "a"}, {Text: "b"}])', cost=BATCH),
    Operation("pop", _types("fifo", "lifo", "heap"), (_ONE,), write=True, together=True, gather="turns",
              summary="Remove and return the next element; with a limit (at most 100), that many in one write.",
              answer="a document or null; with a limit, a list", example="db.Comments.pop({limit: 10})"),
    Operation("peek", _types("fifo", "lifo", "heap"), (_ONE,), gather="turns",
              summary="Return the next element without removing it; with a limit (at most 1000), the next N in pop order.",
              answer="a document or null; with a limit, a list (a heap, and a fifo once claimed from, add the answer field claimed)",
              example="db.Comments.peek(5)", cost=SHORT),
    Operation("length", _types(*STORE_TYPES), gather="sum",
              summary="How many elements the bucket holds (fifo, heap: how many are ready, not claimed).",
              answer="an integer (a heap, and a fifo once claimed from, add the answer fields ready and claimed)",
              example="db.Comments.length()"),
    Operation("list", _types(*STORE_TYPES), (), (_AFTER, _LIMIT, _BATCH), gather="documents", cursor="batches",
              summary="Read in storage order without removing (queues oldest first; keyed stores in key order).",
              answer="a list", example="db.Comments.list({after: 100, limit: 50})", cost=SHORT),
    Operation("insert", _types("hash", "btree"), (Param("doc", "doc"),), write=True, key_param="doc", makes_key=True,
              summary="Add a document; a hash key (_id_) that exists is refused with DUPLICATE_KEY.",
              answer="the document's key", example='db.User.insert({_id_: "jane_doe", Name: "Jane"})'),
    Operation("batch_insert", _types("hash", "btree"), (Param("docs", "docs"),), write=True, gather="split", makes_key=True,
              summary="Insert many documents in one durable write; all or none.",
              answer="the list of keys", aliases=("batchInsert",),
              example='db.User.batchInsert([{_id_: "a"}, {_id_: "b"}])', cost=BATCH),
    Operation("put", _types("hash", "blob"),
              (Param("doc", "any"),), (Param("name", "str", False), Param("type", "str", False)), write=True,
              summary="hash: store a whole document under its _id_, replacing one that exists. blob: store bytes.",
              answer="the key or the blob's id",
              example='db.Photos.put({data: BinData(0, "aGk="), name: "hi.txt", type: "text/plain"})', upload="doc", key_param="doc"),
    Operation("batch_put", _types("hash"), (Param("docs", "docs"),), write=True, gather="split",
              summary="put many documents in one durable write; all or none, unique indexes checked.",
              answer="the list of keys", aliases=("batchPut",),
              example='db.User.batchPut([{_id_: "a", Name: "A"}])', cost=BATCH),
    Operation("get", _types("hash", "btree", "blob"), (Param("key", "any"),), key_param="key",
              summary="The document (or blob) with this key, or null.", answer="a document or null",
              example='db.User.get("jane_doe")'),
    Operation("exists", _types("hash", "btree"), (Param("key", "any"),), key_param="key",
              summary="Whether a document (hash) or an entry (btree) with this key exists, without reading it.",
              answer="true or false", example='db.User.exists("jane_doe")'),
    Operation("find", _types("hash"), (Param("filter", "filter", False),), _FIND_OPTIONS,
              summary="The documents matching the filter (a full scan), sorted, skipped, limited and projected as asked.",
              answer="a list", example='db.User.find({Email: "jane@example.com"}).sort({Date: -1}).limit(10)',
              cost=SCAN, chains=_CURSOR_CHAINS, key_param="filter", gather="documents", cursor="stream"),
    Operation("search", _types("hash"), (Param("filter", "filter", False),),
              _FIND_OPTIONS + (Param("explain", "any", False),),
              summary="Like find, served by an index when one fits; the answer names it in index_used.",
              answer="a list (index_used, and explain when asked)",
              example='db.Orders.search({CustomerID: "c1"})', cost=INDEXED, chains=_CURSOR_CHAINS,
              key_param="filter", gather="documents", cursor="stream"),
    Operation("count", _types("hash"), (Param("filter", "filter", False),),
              summary="How many documents match the filter.", answer="an integer",
              example="db.User.count()", cost=SCAN, key_param="filter", gather="sum"),
    Operation("distinct", _types("hash"), (Param("field", "str"), Param("filter", "filter", False)),
              summary="The different values of a field (an array's elements one by one) in the matching documents.",
              answer="a list, in sort order", example='db.Tickets.distinct("Category", {Open: true})', cost=SCAN,
              gather="values"),
    # time-range indexes: one window's counts and ranking (hoarddb/indexes/timerange.py, docs/user/indexes.md)
    Operation("window", _types("hash"), (Param("index", "str"),),
              (Param("newest", "any", False, "true: the window that started last"),
               Param("oldest", "any", False, "true: the oldest window still open (the last full range)"),
               Param("byStart", "any", False, "the date a window starts"),
               Param("top", "int", False, "how many values of the next field to rank by count"),
               Param("counts", "any", False, "true: the count of every value of the next field")),
              summary="One window of a time-range index: its document count, and the top values of the next "
                      "field or each value's count, read from counts the index keeps.",
              answer="{index, start, end, count} (and field with top or counts)",
              example='db.Post.window("hourlyByHashtag", {newest: true}).top(10)', cost=SCAN,
              chains=(("counts", "window", {"counts": True}),), gather="windows"),
    Operation("aggregate", _types("hash"), (Param("pipeline", "list"),), (Param("explain", "any", False), _BATCH),
              cursor="stream",
              summary="Run an aggregation pipeline ($match, $group, $sort, $project, $unwind, $lookup...) over the bucket.",
              answer="a list (index_used names what served a leading $match)",
              example='db.Tickets.aggregate([{$group: {_id: "$Category", n: {$count: {}}}}])', cost=SCAN, joins=True,
              gather="pipeline"),
    Operation("update", _types("hash"), (Param("filter", "filter"), Param("update", "update")),
              (Param("upsert", "any", False, "insert when nothing matches"),
               Param("multi", "any", False, "false: only the first match (default true: every match)"),
               Param("arrayFilters", "list", False, "the filters of $[<identifier>] paths")), write=True,
              summary="Apply update operators to every matching document (multi: false, the first), in one write; "
                      "upsert inserts when nothing matches.",
              answer="{matched, modified} (and upserted: the new key)",
              example='db.User.update({_id_: "jane_doe"}, {$set: {Name: "Janet"}})', cost=FILTERED_WRITE,
              key_param="filter", gather="counts"),
    Operation("find_and_modify", _types("hash"), (Param("filter", "filter", False), Param("update", "update", False)),
              (Param("remove", "any", False, "delete the document instead of updating it"),
               Param("new", "any", False, "return the document as it became (default: as it was)"),
               Param("upsert", "any", False, "insert when nothing matches"),
               Param("sort", "doc", False, "which match, when several do"),
               Param("projection", "doc", False, "the fields returned"),
               Param("arrayFilters", "list", False, "the filters of $[<identifier>] paths")), write=True,
              summary="Update (or remove) one document and return it, in one atomic read-modify-write.",
              answer="the document before (or, with new, after), or null", aliases=("findAndModify",),
              example='db.Counters.findAndModify({_id_: "orders"}, {$inc: {n: 1}}, {new: true, upsert: true})',
              cost=FILTERED_WRITE, key_param="filter"),
    Operation("delete", _types("hash", "btree", "blob"), (Param("target", "any"),), write=True, key_param="target", gather="counts",
              summary="hash: delete matching documents; btree: entries with this key; blob: this blob.",
              answer="{deleted}", example='db.User.delete({_id_: "jane_doe"})', cost=FILTERED_WRITE),
    Operation("range", _types("btree"), (Param("bounds", "filter", False),),
              (_LIMIT, Param("reverse", "any", False), _BATCH), gather="documents", cursor="stream",
              summary="Entries whose key lies within the bounds, in key order.", answer="a list",
              example="db.Leaderboard.range({Score: {$gte: 90}})", cost=SCAN),
    Operation("first", _types("btree"), gather="least", summary="The entry with the lowest key, or null.",
              answer="a document or null", example="db.Leaderboard.first()"),
    Operation("last", _types("btree"), gather="greatest", summary="The entry with the highest key, or null.",
              answer="a document or null", example="db.Leaderboard.last()"),
    Operation("export", _types(*STORE_TYPES), (), (Param("cursor", "any", False), _LIMIT),
              summary="A page of every entry in storage order, for dumps: {docs, next}; pass next back as cursor.",
              answer="{docs, next}", example="db.Comments.export({limit: 1000})", cost=SCAN, gather="pages"),
    Operation("load", _types(*STORE_TYPES), (Param("docs", "docs"),), write=True, gather="split",
              summary="Restore entries as a dump holds them (hash: put, and a unique clash leaves the index "
                      "conflicted; blob: {_id_, data, name, type, sha256}).",
              answer="{loaded, ...}", example='db.User.load([{_id_: "u1", Name: "Jane"}])', cost=BATCH, upload="docs"),
    Operation("info", _types("blob"), (Param("key", "any"),), key_param="key",
              summary="A blob's metadata (name, type, size, sha256) without its bytes.",
              answer="a document", example='db.Photos.info({_id_: "0192..."})'),
    Operation("stream", _types("blob"), (Param("key", "any"),), (Param("chunk_size", "int", False),), key_param="key",
              summary="A blob's bytes in chunks, never whole in memory.",
              answer="an iterator of bytes", example='db.Photos.stream({_id_: "0192..."})', cost=SCAN, streams=True),
    # claim/ack: a worker queue that survives a crashed worker (hoarddb/stores/claims.py, docs/user/queues.md)
    Operation("claim", _types("fifo", "heap"), (_LIMIT,),
              (Param("lease", "any", False, "seconds the elements stay hidden (default 30, at most 86400)"),), write=True,
              summary="Hand out up to limit elements (default 1, at most 100), hidden from others for lease seconds "
                      "(default 30) until ack, release or the lease runs out; run-out leases come back first.",
              answer="a list of {claimId, deliveries, element}", example="db.Jobs.claim({lease: 60, limit: 10})",
              gather="turns_claimed"),
    Operation("ack", _types("fifo", "heap"), (Param("claimId", "any", True, "a claimId, or a list of them"),),
              gather="by_claim",
              write=True, summary="Remove claimed elements for good; a list of claimIds (at most 1000) in one write, all or none.",
              answer="{acked}", example='db.Jobs.ack("000000000000002a.9f3c0d1e2b4a5968")'),
    Operation("release", _types("fifo", "heap"), (Param("claimId", "any", True, "a claimId, or a list of them"),),
              gather="by_claim",
              write=True, summary="Give claimed elements back now: claimable again first, in their order.",
              answer="{released}", example='db.Jobs.release("000000000000002a.9f3c0d1e2b4a5968")'),
    Operation("extend", _types("fifo", "heap"),
              (Param("claimId", "str"), Param("seconds", "any", True, "the new lease, from now")), write=True,
              summary="Renew a claim's lease to seconds from now (a heartbeat for long jobs).",
              answer="{extended, expiresAt}", example='db.Jobs.extend("000000000000002a.9f3c0d1e2b4a5968", 60)',
              gather="by_claim"),
]:
    _verb(_op)


#: Verbs on a document's store field (``db.Property["p1"].Expenses.push(...)``): the same
#: names as bucket verbs where they mean the same, with put/get/delete taking a key on
#: hash and btree fields. A verb missing here (update, range, insert...) is refused on a
#: store field with advice on what to use instead (hoarddb.stores.fields.refusal).
FIELD_VERBS: dict[str, Operation] = {}

_KEY = Param("key", "any", True, "the element's key (hash, btree) or the blob's id")
for _op in [
    Operation("push", _types("fifo", "lifo", "heap"), (Param("doc", "doc"),), write=True,
              summary="Add one element to the document's queue, stack or heap.", answer="null",
              example='db.Property["p1"].Expenses.push({Amount: 120})', scope=FIELD),
    Operation("batch_push", _types("fifo", "lifo", "heap"), (Param("docs", "docs"),), write=True,
              summary="Add many elements in one write.", answer="the number added", aliases=("batchPush",), scope=FIELD, cost=BATCH),
    Operation("pop", _types("fifo", "lifo", "heap"), (_ONE,), write=True,
              summary="Remove and return the next element (with a limit, up to 100 in one write).",
              answer="a document or null; with a limit, a list", example='db.Property["p1"].Tickets.pop()', scope=FIELD),
    Operation("peek", _types("fifo", "lifo", "heap"), (_ONE,),
              summary="The next element(s) in pop order, not removed (limit at most 1000).",
              answer="a document or null; with a limit, a list", example='db.Property["p1"].Expenses.peek({limit: 10})', scope=FIELD, cost=SHORT),
    Operation("length", _types(*STORE_TYPES), summary="How many elements the store field holds.",
              answer="an integer", example='db.Property["p1"].Expenses.length()', scope=FIELD),
    Operation("list", _types(*STORE_TYPES), (), (_AFTER, _LIMIT),
              summary="Read in storage order (queues oldest first; hash and btree fields in key order, as {key, doc}).",
              answer="a list", example='db.Property["p1"].ExpenseDates.list({after: "2026-03-01/", limit: 50})', scope=FIELD, cost=SHORT),
    Operation("put", _types("hash", "btree", "blob"), (_KEY, Param("doc", "any", False)),
              (Param("name", "str", False), Param("type", "str", False)), write=True,
              summary="hash/btree field: put(key, doc) stores doc under key, replacing; blob field: put(data) stores bytes.",
              answer="the key, or the blob's id",
              example='db.Property["p1"].ExpenseByID.put("e1", {Amount: 95})', scope=FIELD),
    Operation("get", _types("hash", "btree", "blob"), (_KEY,),
              summary="The element with this key (blob field: the blob with this id), or null.",
              answer="a document or null", example='db.Property["p1"].ExpenseByID.get("e1")', scope=FIELD),
    Operation("delete", _types("hash", "btree", "blob"), (_KEY,), write=True,
              summary="Delete the element with this key (blob field: the blob).", answer="{deleted}",
              example='db.Property["p1"].ExpenseByID.delete("e1")', scope=FIELD),
    Operation("info", _types("blob"), (_KEY,), summary="A blob's metadata, no bytes.", answer="a document", scope=FIELD),
    Operation("load", _types("blob"), (Param("docs", "docs"),), write=True,
              summary="Restore blobs keeping their ids, for a dump's restore: [{_id_, data, name, type, sha256}].",
              answer="{loaded}", scope=FIELD, cost=BATCH, upload="docs"),
    Operation("stream", _types("blob"), (_KEY,), (Param("chunk_size", "int", False),),
              summary="A blob's bytes in chunks.", answer="an iterator of bytes", scope=FIELD, cost=SCAN, streams=True),
]:
    FIELD_VERBS[_op.name] = _op
    for _alias in _op.aliases:
        FIELD_VERBS[_alias] = _op


#: Operations on the catalog (the engine runs them) and of the server itself (users,
#: whoami), by name: the rest of the table.
ADMIN: dict[str, Operation] = {}

_OPTIONS = Param("options", "doc", False, "the bucket's type and options, such as {type: \"fifo\"}")
_USER = Param("user", "str", True, "the user's name")
_CREDENTIALS = Param("credentials", "doc", False, "SCRAM-SHA-256 credentials, as `hoarddb user` makes them")
_ROLES = Param("roles", "list", False, "roles such as [{role: \"readWrite\", db: \"app\"}]")
for _op in [
    Operation("create_database", scope=DATABASE, change="create", write=True, catalog=True, role="dbAdmin", hql="create database",
              summary="Create a database (create_bucket also creates its database).", answer="null"),
    Operation("drop_database", scope=DATABASE, change="drop", write=True, catalog=True, role="dbAdmin", hql="drop database",
              summary="Drop a database with all its buckets and their files.", answer="{dropped, buckets}"),
    Operation("list_databases", scope=SERVER, role="any", narrowed=True, hql="show databases",
              summary="The names of the databases (a user sees those they hold a role on).", answer="a list"),
    Operation("create_bucket", scope=BUCKET, change="create", runs=ENGINE, write=True, catalog=True, role="dbAdmin",
              fields=(_OPTIONS,), hql="create bucket",
              summary="Declare a bucket of a store type, with its options.", answer="{name, type}"),
    Operation("drop_bucket", scope=BUCKET, change="drop", runs=ENGINE, write=True, catalog=True, role="dbAdmin", hql="drop bucket",
              summary="Drop a bucket and every file of it.", answer="{dropped}"),
    Operation("alter_bucket", scope=BUCKET, change="alter", runs=ENGINE, write=True, catalog=True, role="dbAdmin",
              fields=(_OPTIONS,), hql="alter bucket",
              summary="Change a bucket's field lines or placement.", answer="{name, altered}"),
    Operation("list_buckets", scope=DATABASE, role="look", hql="show buckets",
              summary="The names of a database's buckets.", answer="a list"),
    Operation("describe_bucket", scope=BUCKET, runs=ENGINE, role="look", cost=SCAN, hql="describe bucket",
              summary="A bucket's declaration, verbs, indexes and size.", answer="a document"),
    Operation("stats", scope=BUCKET, runs=ENGINE, role="look", cost=SCAN,
              summary="A bucket's entries, bytes and index states.", answer="a document"),
    Operation("metrics", scope=SERVER, cost=SCAN, summary="Every metric sample.", answer="a document"),
    Operation("sweep_ttl", scope=SERVER, write=True, logged=True, summary="Run one TTL sweep now.", answer="a document"),
    Operation("whoami", scope=SERVER, runs=SERVER, role="any",
              summary="The logged-in user and their roles.", answer="{user, roles}"),
    Operation("list_users", scope=SERVER, runs=SERVER, summary="Every user and their roles.", answer="a list"),
    Operation("create_user", scope=SERVER, runs=SERVER, write=True, fields=(_USER, _CREDENTIALS, _ROLES),
              summary="Add a user.", answer="a document"),
    Operation("update_user", scope=SERVER, runs=SERVER, write=True, fields=(_USER, _CREDENTIALS, _ROLES),
              summary="Change a user's credentials or roles.", answer="a document"),
    Operation("drop_user", scope=SERVER, runs=SERVER, write=True, fields=(_USER,),
              summary="Remove a user.", answer="a document"),
    Operation("set_roles", scope=SERVER, runs=SERVER, write=True, fields=(_USER, _ROLES),
              summary="Replace a user's roles; open connections use them from their next request.",
              answer="a document"),
    # an online check reads every entry (of a database, or one bucket, when named); a backup copies the
    # data directory elsewhere: neither changes the data, and neither is worth sending twice
    Operation("check", scope=SERVER, cost=SCAN, retry=False, logged=True,
              summary="Check every bucket (or those of db, or one bucket) while serving.", answer="a report"),
    Operation("backup", scope=SERVER, cost=SCAN, retry=False, logged=True,
              fields=(Param("path", "str", True, "a directory"),),
              summary="Copy the data directory, consistent, to path while serving.", answer="a document"),
    # cursors (hoarddb/cursors.py): the engine keeps them; a server lets a connection use only its own
    Operation("more", scope=SERVER, cost=SCAN, role="any", retry=False,  # sent twice, it would skip a batch
              fields=(Param("cursor", "any", True, "the cursor id an answer gave"),
                      Param("batch_size", "any", False, "at most this many documents (default: about 1 MiB of them)")),
              summary="The next batch of a cursor (a find, search, range, list or aggregate asked with batch_size).",
              answer="{result: a list, cursor: the id while more remain}"),
    Operation("close_cursor", scope=SERVER, cost=POINT, role="any",
              fields=(Param("cursor", "any", True, "a cursor id, or a list of them"),),
              summary="Close cursors before their end, freeing what they hold.", answer="{closed}"),
    Operation("slowlog", scope=SERVER, runs=SERVER,
              fields=(Param("limit", "int", False, "at most this many entries"),
                      Param("reset", "any", False, "true: forget the entries after reading them")),
              summary="The slowest recent requests (over slow_ms), newest first.",
              answer="{slow_ms, slowlog_length, entries}"),
    # a cluster's map as clients read it, to send each keyed request to its partition's owner (hoarddb/client/router.py)
    Operation("cluster_map", scope=DATABASE, runs=SERVER, role="look",
              summary="Where a cluster keeps a database's buckets (or the one named by bucket): each one's "
                      "partitions, what they are hashed from, the node owning each and the nodes' addresses "
                      "(a single server: cluster false).",
              answer="{cluster, node, nodes, buckets}"),
]:
    ADMIN[_op.name] = _op

#: The catalog and server operations as names of this module, for the code that builds
#: their requests (``{"op": LIST_DATABASES.name}``) or asks about one: each is its entry,
#: named as it is, upper-cased (tests/test_operations_table.py holds them to it).
(CREATE_DATABASE, DROP_DATABASE, LIST_DATABASES, CREATE_BUCKET, DROP_BUCKET, ALTER_BUCKET, LIST_BUCKETS,
 DESCRIBE_BUCKET, STATS, METRICS, SWEEP_TTL, WHOAMI, LIST_USERS, CREATE_USER, UPDATE_USER, DROP_USER, SET_ROLES,
 CHECK, BACKUP, MORE, CLOSE_CURSOR, SLOWLOG, CLUSTER_MAP) = ADMIN.values()

#: Every operation by name (and alias): bucket verbs, catalog and server operations. A
#: store-field verb has the name of a bucket verb, and its flags; FIELD_VERBS has its params.
OPERATIONS: dict[str, Operation] = {**VERBS, **ADMIN}
#: Operations that take a blob upload (a tuple: looked up by equality, never by hash, so a
#: request's op may be anything when it is asked, before check_request).
UPLOADS = tuple(sorted(n for n, op in OPERATIONS.items() if op.upload))
#: Operations whose requests carry fields of their own beside op, db, bucket and args.
_WITH_FIELDS = {name: op for name, op in ADMIN.items() if op.fields}


def names(**flags: Any) -> frozenset:
    """The names (aliases included) of the operations whose flags have these values:
    ``names(role="dbAdmin")``, ``names(runs=SERVER)``."""
    return frozenset(name for name, op in OPERATIONS.items()
                     if all(getattr(op, flag) == value for flag, value in flags.items()))


def field_verbs_for(store_type: str) -> list[str]:
    """The verb names a store field of this type serves, sorted."""
    return sorted({op.name for op in FIELD_VERBS.values() if store_type in op.types})


def verb(name: str) -> Operation:
    """The operation called ``name`` (or one of its aliases); raises UnknownVerbError."""
    try:
        return VERBS[name]
    except KeyError:
        names = sorted({op.name for op in VERBS.values()})
        raise UnknownVerbError(f"unknown verb {name!r}; verbs: {', '.join(names)}") from None


def verbs_for(store_type: str) -> list[str]:
    """The verb names a store type serves, sorted."""
    return sorted({op.name for op in VERBS.values() if store_type in op.types})


_INT64 = 1 << 63


def _check_kind(op: Operation, p: Param, value: Any) -> Any:
    if value is None and not p.required:
        return None
    kind = p.kind
    if kind in ("doc", "filter", "update"):
        ok = isinstance(value, (dict, Mapping))
    elif kind in ("docs", "list"):
        ok = isinstance(value, (list, tuple))
    elif kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok and not -_INT64 <= value < _INT64:  # over the wire BSON could not even carry it
            raise InvalidArgumentError(f"{op.name}: argument {p.name!r} must be a 64-bit integer, got {value}: "
                                       f"{usage(op)}")
    elif kind == "str":
        ok = type(value) is str  # (not BSON's code, which is a str too)
    else:
        ok = True
    if kind in ("filter", "update", "any", "list") and ok:
        check_ints(op, p, value)
    if not ok:
        raise InvalidArgumentError(
            f"{op.name}: argument {p.name!r} must be {KINDS[kind]}, got {type(value).__name__}: {value!r:.80} "
            f"— {usage(op)}"
        )
    return value


def check_ints(op: Operation, p: Param, value: Any) -> None:
    """Refuse an integer no BSON value holds (past 64 bits) in a key, filter or update, as a
    server's client must when it encodes the request: a lookup by it would find nothing
    embedded, and be refused over the wire. (Documents are refused when they are encoded.)"""
    if type(value) is int:
        if -_INT64 <= value < _INT64:
            return
        bad = value
    elif isinstance(value, (Mapping, list, tuple)):
        bad, todo = None, [value]
        while todo:
            v = todo.pop()
            if isinstance(v, Mapping):
                todo.extend(v.values())
            elif isinstance(v, (list, tuple)):
                todo.extend(v)
            elif type(v) is int and not -_INT64 <= v < _INT64:
                bad = v
                break
        if bad is None:
            return
    else:
        return
    raise BadValueError(f"{op.name}: argument {p.name!r} holds an integer BSON cannot store "
                        f"(64-bit at most, -2**63 to 2**63 - 1): {bad}")


def usage(op: Operation) -> str:
    """How a call of ``op`` is written, for refusals: ``peek(limit?, {limit})``."""
    head = ", ".join(p.name if p.required else p.name + "?" for p in op.params)
    optional = [p.name for p in op.options + op.params if not p.required]
    if optional:
        return f"{op.name}({head}{', ' if op.params else ''}{{{', '.join(optional)}}})"
    return f"{op.name}({head})"


def bind(op: Operation, args: tuple | list = (), kwargs: Mapping[str, Any] | None = None) -> dict:
    """The named arguments of a call, from positional and keyword arguments.

    Raises InvalidArgumentError naming the accepted arguments when there are too many,
    an unknown name, a missing required one, or a value of the wrong kind.
    """
    if op.simple and not kwargs and len(args) == len(op.params):  # get(key), push(doc): the common call
        if not op.unchecked:
            for p, value in zip(op.params, args):
                _check_kind(op, p, value)
        else:
            for p, value in zip(op.params, args):
                if type(value) is not str:
                    check_ints(op, p, value)
        return dict(zip(op.param_names, args))
    every = op.params + op.options
    bound: dict[str, Any] = {}
    if args:
        n = len(args)
        for i, value in enumerate(args):
            if i < len(op.params):
                p = op.params[i]
                if isinstance(value, Mapping) and p.kind in ("int", "str") and i == n - 1:
                    _take_options(op, value, bound)  # a document where a scalar goes: the options
                    continue
                bound[p.name] = value
            elif i == n - 1 and isinstance(value, Mapping) and (op.options or any(not p.required for p in op.params)):
                _take_options(op, value, bound)
            else:
                takes_options = op.options or any(not p.required for p in op.params)
                raise InvalidArgumentError(
                    f"{op.name} takes at most {len(op.params)} argument(s)"
                    f"{' and an options document' if takes_options else ''}: {usage(op)}")
    if kwargs:
        for k, v in kwargs.items():
            _bind_named(op, k, v, bound)
    for p in every:
        if p.name in bound:
            bound[p.name] = _check_kind(op, p, bound[p.name])
        elif p.required:
            raise InvalidArgumentError(f"{op.name} needs its argument {p.name!r} ({KINDS[p.kind]}): {usage(op)}")
    return bound


def _take_options(op: Operation, doc: Mapping, bound: dict) -> None:
    """Spread an options document (``{limit: 5}``) into ``bound``; ``{}`` is no options.

    A key that names no argument is refused as a misspelt keyword is (``peek({limt: 5})``).
    """
    for k, v in doc.items():
        _bind_named(op, k, v, bound)


def _bind_named(op: Operation, name: Any, value: Any, bound: dict) -> None:
    if not isinstance(name, str) or op.param(name) is None:
        every = op.params + op.options
        raise InvalidArgumentError(
            f"{op.name} has no argument {name!r}; accepted: {', '.join(p.name for p in every) or 'none'} "
            f"— {usage(op)}")
    if name in bound:
        raise InvalidArgumentError(f"{op.name}: argument {name!r} given twice — {usage(op)}")
    bound[name] = value
