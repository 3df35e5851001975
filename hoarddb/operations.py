"""The table of operations, declared as data: every verb hoardDB serves, its arguments and limits.

An operation is a plain document, ``{op: "push", db: "app", bucket: "Comments", doc: {...}}``.
Everything that speaks operations derives from this table: the engine's dispatch and
argument checks, the Python API's methods (``bucket.push(...)``), HQL's calls
(``db.Comments.push(...)``), the shell's help and completion, and the verb list in
docs/user. Adding a verb: one :class:`Operation` entry below, plus a method of the same
name on each store type that serves it (``hoarddb/stores/<type>.py``).

Calls bind their arguments the same way from Python and from HQL (:func:`bind`):
positional values fill ``params`` in order; a document given where a scalar parameter
is expected, or left over after the params, is the options document
(``peek({limit: 5})`` is ``peek(5)``); keyword arguments may name params or options.
"""

from __future__ import annotations

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
    if not isinstance(request, dict):
        raise InvalidArgumentError(f"{REQUEST_SHAPE}; got {kind_of(request)}")
    op = request.get("op")
    db = request.get("db")
    bucket = request.get("bucket")
    if type(op) is str and (db is None or type(db) is str) and (bucket is None or type(bucket) is str):
        if "field" not in request and "args" not in request:
            return op
        field = request.get("field")
        args = request.get("args")
        if (field is None or type(field) is str) and (args is None or isinstance(args, dict)):
            return op
    _refuse_request(request)
    return op


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
    args = request.get("args")
    if args is not None and not isinstance(args, dict):
        raise InvalidArgumentError(f"{op}: 'args' must be a document of named arguments, got {kind_of(args)}")


#: The rule of database and bucket names (hoarddb.catalog checks it), said in refusals.
NAME_RULE = "1 to 64 characters: a letter, then letters, digits, '_' or '-'"

#: The six store types.
STORE_TYPES = ("fifo", "lifo", "hash", "btree", "heap", "blob")
QUEUES = frozenset({"fifo", "lifo"})


@dataclass(frozen=True)
class Param:
    """Param is one argument of an operation: its name, its kind and whether it may be left out."""

    name: str
    kind: str  # doc, docs, filter, update, int, any, data, str
    required: bool = True
    help: str = ""


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
}


@dataclass(frozen=True)
class Operation:
    """Operation is one verb: which store types serve it, its arguments, and what it answers."""

    name: str
    types: frozenset
    params: tuple = ()
    options: tuple = ()  # Params accepted only by name or in an options document
    write: bool = False
    summary: str = ""
    answer: str = ""
    aliases: tuple = ()
    example: str = ""

    def __post_init__(self):
        # Derived once, for binding on the hot path: names of params, and whether a
        # positional call can be bound by zipping (no scalar param that could take an
        # options document instead).
        object.__setattr__(self, "param_names", tuple(p.name for p in self.params))
        object.__setattr__(self, "simple", all(p.kind not in ("int", "str") for p in self.params)
                           and not self.options and all(p.required for p in self.params))
        # every param takes any value: a positional call needs no kind check at all
        object.__setattr__(self, "unchecked", self.simple and all(p.kind == "any" for p in self.params))
        # the name of the one argument of a simple verb (insert's doc, get's key), else None
        object.__setattr__(self, "single", self.param_names[0] if self.simple and len(self.params) == 1 else None)

    def param(self, name: str) -> Param | None:
        for p in self.params + self.options:
            if p.name == name:
                return p
        return None


def _types(*names: str) -> frozenset:
    return frozenset(names)


_LIMIT = Param("limit", "int", False, "how many elements")
_AFTER = Param("after", "any", False, "continue after this position (queues: how many to skip; keyed stores: a key)")

#: Verbs on buckets (and, later, on store fields of a document).
VERBS: dict[str, Operation] = {}


def _verb(op: Operation) -> None:
    VERBS[op.name] = op
    for alias in op.aliases:
        VERBS[alias] = op


for _op in [
    Operation("push", _types("fifo", "lifo", "heap"), (Param("doc", "doc"),), write=True,
              summary="Add one element (a heap element carries a numeric priority).",
              answer="null", example='db.Comments.push({Author: "Bob", Text: "Nice photo!"})'),
    Operation("batch_push", _types("fifo", "lifo", "heap"), (Param("docs", "docs"),), write=True,
              summary="Add many elements in one durable write; all or none.",
              answer="the number added", aliases=("batchPush",),
              example='db.Comments.batchPush([{Text: "a"}, {Text: "b"}])'),
    Operation("pop", _types("fifo", "lifo", "heap"), (_LIMIT,), write=True,
              summary="Remove and return the next element; with a limit (at most 100), that many in one write.",
              answer="a document or null; with a limit, a list", example="db.Comments.pop({limit: 10})"),
    Operation("peek", _types("fifo", "lifo", "heap"), (_LIMIT,),
              summary="Return the next element without removing it; with a limit (at most 1000), the next N in pop order.",
              answer="a document or null; with a limit, a list (a heap, and a fifo once claimed from, add the answer field claimed)",
              example="db.Comments.peek(5)"),
    Operation("length", _types(*STORE_TYPES),
              summary="How many elements the bucket holds (fifo, heap: how many are ready, not claimed).",
              answer="an integer (a heap, and a fifo once claimed from, add the answer fields ready and claimed)",
              example="db.Comments.length()"),
    Operation("list", _types(*STORE_TYPES), (), (_AFTER, _LIMIT),
              summary="Read in storage order without removing (queues oldest first; keyed stores in key order).",
              answer="a list", example="db.Comments.list({after: 100, limit: 50})"),
    Operation("insert", _types("hash", "btree"), (Param("doc", "doc"),), write=True,
              summary="Add a document; a hash key (_id_) that exists is refused with DUPLICATE_KEY.",
              answer="the document's key", example='db.User.insert({_id_: "jane_doe", Name: "Jane"})'),
    Operation("batch_insert", _types("hash", "btree"), (Param("docs", "docs"),), write=True,
              summary="Insert many documents in one durable write; all or none.",
              answer="the list of keys", aliases=("batchInsert",),
              example='db.User.batchInsert([{_id_: "a"}, {_id_: "b"}])'),
    Operation("put", _types("hash", "blob"),
              (Param("doc", "any"),), (Param("name", "str", False), Param("type", "str", False)), write=True,
              summary="hash: store a whole document under its _id_, replacing one that exists. blob: store bytes.",
              answer="the key or the blob's id",
              example='db.Photos.put({data: BinData(0, "aGk="), name: "hi.txt", type: "text/plain"})'),
    Operation("batch_put", _types("hash"), (Param("docs", "docs"),), write=True,
              summary="put many documents in one durable write; all or none, unique indexes checked.",
              answer="the list of keys", aliases=("batchPut",),
              example='db.User.batchPut([{_id_: "a", Name: "A"}])'),
    Operation("get", _types("hash", "btree", "blob"), (Param("key", "any"),),
              summary="The document (or blob) with this key, or null.", answer="a document or null",
              example='db.User.get("jane_doe")'),
    Operation("find", _types("hash"), (Param("filter", "filter", False),), (_LIMIT,),
              summary="Every document matching the filter (a full scan).", answer="a list",
              example='db.User.find({Email: "jane@example.com"})'),
    Operation("search", _types("hash"), (Param("filter", "filter", False),), (_LIMIT, Param("explain", "any", False)),
              summary="Like find, served by an index when one fits; the answer names it in index_used.",
              answer="a list (index_used, and explain when asked)",
              example='db.Orders.search({CustomerID: "c1"})'),
    Operation("count", _types("hash"), (Param("filter", "filter", False),),
              summary="How many documents match the filter.", answer="an integer",
              example="db.User.count()"),
    Operation("update", _types("hash"), (Param("filter", "filter"), Param("update", "update")), write=True,
              summary="Apply update operators to every matching document, in one write.",
              answer="{matched, modified}", example='db.User.update({_id_: "jane_doe"}, {$set: {Name: "Janet"}})'),
    Operation("delete", _types("hash", "btree", "blob"), (Param("target", "any"),), write=True,
              summary="hash: delete matching documents; btree: entries with this key; blob: this blob.",
              answer="{deleted}", example='db.User.delete({_id_: "jane_doe"})'),
    Operation("range", _types("btree"), (Param("bounds", "filter", False),), (_LIMIT, Param("reverse", "any", False)),
              summary="Entries whose key lies within the bounds, in key order.", answer="a list",
              example="db.Leaderboard.range({Score: {$gte: 90}})"),
    Operation("first", _types("btree"), summary="The entry with the lowest key, or null.",
              answer="a document or null", example="db.Leaderboard.first()"),
    Operation("last", _types("btree"), summary="The entry with the highest key, or null.",
              answer="a document or null", example="db.Leaderboard.last()"),
    Operation("export", _types(*STORE_TYPES), (), (Param("cursor", "any", False), _LIMIT),
              summary="A page of every entry in storage order, for dumps: {docs, next}; pass next back as cursor.",
              answer="{docs, next}", example="db.Comments.export({limit: 1000})"),
    Operation("load", _types(*STORE_TYPES), (Param("docs", "docs"),), write=True,
              summary="Restore entries as a dump holds them (hash: put, and a unique clash leaves the index "
                      "conflicted; blob: {_id_, data, name, type, sha256}).",
              answer="{loaded, ...}", example='db.User.load([{_id_: "u1", Name: "Jane"}])'),
    Operation("info", _types("blob"), (Param("key", "any"),),
              summary="A blob's metadata (name, type, size, sha256) without its bytes.",
              answer="a document", example='db.Photos.info({_id_: "0192..."})'),
    Operation("stream", _types("blob"), (Param("key", "any"),), (Param("chunk_size", "int", False),),
              summary="A blob's bytes in chunks, never whole in memory.",
              answer="an iterator of bytes", example='db.Photos.stream({_id_: "0192..."})'),
    # claim/ack: a worker queue that survives a crashed worker (hoarddb/stores/claims.py, docs/user/queues.md)
    Operation("claim", _types("fifo", "heap"), (_LIMIT,),
              (Param("lease", "any", False, "seconds the elements stay hidden (default 30, at most 86400)"),), write=True,
              summary="Hand out up to limit elements (default 1, at most 100), hidden from others for lease seconds "
                      "(default 30) until ack, release or the lease runs out; run-out leases come back first.",
              answer="a list of {claimId, deliveries, element}", example="db.Jobs.claim({lease: 60, limit: 10})"),
    Operation("ack", _types("fifo", "heap"), (Param("claimId", "any", True, "a claimId, or a list of them"),),
              write=True, summary="Remove claimed elements for good; a list of claimIds (at most 1000) in one write, all or none.",
              answer="{acked}", example='db.Jobs.ack("000000000000002a.9f3c0d1e2b4a5968")'),
    Operation("release", _types("fifo", "heap"), (Param("claimId", "any", True, "a claimId, or a list of them"),),
              write=True, summary="Give claimed elements back now: claimable again first, in their order.",
              answer="{released}", example='db.Jobs.release("000000000000002a.9f3c0d1e2b4a5968")'),
    Operation("extend", _types("fifo", "heap"),
              (Param("claimId", "str"), Param("seconds", "any", True, "the new lease, from now")), write=True,
              summary="Renew a claim's lease to seconds from now (a heartbeat for long jobs).",
              answer="{extended, expiresAt}", example='db.Jobs.extend("000000000000002a.9f3c0d1e2b4a5968", 60)'),
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
              example='db.Property["p1"].Expenses.push({Amount: 120})'),
    Operation("batch_push", _types("fifo", "lifo", "heap"), (Param("docs", "docs"),), write=True,
              summary="Add many elements in one write.", answer="the number added", aliases=("batchPush",)),
    Operation("pop", _types("fifo", "lifo", "heap"), (_LIMIT,), write=True,
              summary="Remove and return the next element (with a limit, up to 100 in one write).",
              answer="a document or null; with a limit, a list", example='db.Property["p1"].Tickets.pop()'),
    Operation("peek", _types("fifo", "lifo", "heap"), (_LIMIT,),
              summary="The next element(s) in pop order, not removed (limit at most 1000).",
              answer="a document or null; with a limit, a list", example='db.Property["p1"].Expenses.peek({limit: 10})'),
    Operation("length", _types(*STORE_TYPES), summary="How many elements the store field holds.",
              answer="an integer", example='db.Property["p1"].Expenses.length()'),
    Operation("list", _types(*STORE_TYPES), (), (_AFTER, _LIMIT),
              summary="Read in storage order (queues oldest first; hash and btree fields in key order, as {key, doc}).",
              answer="a list", example='db.Property["p1"].ExpenseDates.list({after: "2026-03-01/", limit: 50})'),
    Operation("put", _types("hash", "btree", "blob"), (_KEY, Param("doc", "any", False)),
              (Param("name", "str", False), Param("type", "str", False)), write=True,
              summary="hash/btree field: put(key, doc) stores doc under key, replacing; blob field: put(data) stores bytes.",
              answer="the key, or the blob's id",
              example='db.Property["p1"].ExpenseByID.put("e1", {Amount: 95})'),
    Operation("get", _types("hash", "btree", "blob"), (_KEY,),
              summary="The element with this key (blob field: the blob with this id), or null.",
              answer="a document or null", example='db.Property["p1"].ExpenseByID.get("e1")'),
    Operation("delete", _types("hash", "btree", "blob"), (_KEY,), write=True,
              summary="Delete the element with this key (blob field: the blob).", answer="{deleted}",
              example='db.Property["p1"].ExpenseByID.delete("e1")'),
    Operation("info", _types("blob"), (_KEY,), summary="A blob's metadata, no bytes.", answer="a document"),
    Operation("load", _types("blob"), (Param("docs", "docs"),), write=True,
              summary="Restore blobs keeping their ids, for a dump's restore: [{_id_, data, name, type, sha256}].",
              answer="{loaded}"),
    Operation("stream", _types("blob"), (_KEY,), (Param("chunk_size", "int", False),),
              summary="A blob's bytes in chunks.", answer="an iterator of bytes"),
]:
    FIELD_VERBS[_op.name] = _op
    for _alias in _op.aliases:
        FIELD_VERBS[_alias] = _op


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
    elif kind == "docs":
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
    if kind in ("filter", "update", "any") and ok:
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
