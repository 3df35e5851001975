"""The public Python objects — Client, Database, Bucket, Document, StoreField — that only build operations and hand them to an executor.

An executor is anything with ``execute(request) -> answer`` and ``close()``: the
embedded :class:`hoarddb.engine.Engine`, or a server connection
(:class:`hoarddb.client.RemoteExecutor`). No behaviour lives here that the engine does
not own; every verb method is generated from :mod:`hoarddb.operations`, so a new verb
needs no code in this file.

These objects are written once for both clients: each method builds its operation and
hands it, with what to make of the answer, to its client's ``_run``. :class:`Client`
runs it at once; the asyncio client (:mod:`hoarddb.aio`, a :class:`BaseClient` too)
gives a coroutine that awaits the answer, so there the same methods are awaited.
"""

from __future__ import annotations

import weakref
from typing import Any

from . import operations
from .operations import (CLOSE_CURSOR, CREATE_BUCKET, CREATE_DATABASE, DESCRIBE_BUCKET, DROP_BUCKET, DROP_DATABASE,
                         LIST_BUCKETS, LIST_DATABASES, METRICS, MORE, STATS, SWEEP_TTL)
from .errors import CursorNotFoundError, UnknownVerbError


def _result(answer: dict) -> Any:
    return answer.get("result")


def _verb_result(answer: dict) -> Any:
    """What a bucket verb returns: the result, or a :class:`Found` when the answer names an index."""
    if "index_used" in answer:
        return Found(answer["result"], answer["index_used"], answer.get("explain"))
    return answer.get("result")


class BaseClient:
    """BaseClient is what both clients share: the operations of a client, built once.

    Each method builds an operation document and hands it to :meth:`_run` with what to
    make of the answer; a subclass says how it runs (at once, or awaited).
    """

    def __init__(self, executor):
        self._executor = executor
        self._call = getattr(executor, "call", None)  # an in-process engine's pre-bound entry

    def _run(self, request: dict, shape=None) -> Any:
        """Run ``request`` on the executor; its answer, or ``shape(answer)``."""
        raise NotImplementedError

    def execute(self, request: dict) -> dict:
        """Run one operation document and return its whole answer (``{ok: 1, result, ...}``)."""
        return self._run(request)

    def _result(self, request: dict) -> Any:
        return self._run(request, _result)

    def _cursor(self, op: operations.Operation, db: str, bucket: str, bound: dict) -> Any:
        """The cursor of a read (:class:`Cursor`); its first batch is asked for now."""
        return Cursor(self, op, db, bucket, bound)

    def __getitem__(self, name: str) -> "Database":
        return Database(self, name)

    def databases(self) -> list[str]:
        """The names of the databases, sorted."""
        return self._result({"op": LIST_DATABASES.name})

    def create_database(self, name: str) -> "Database":
        """Create a database (``create_bucket`` also creates its database when needed)."""
        return self._run({"op": CREATE_DATABASE.name, "db": name}, lambda answer: Database(self, name))

    def drop_database(self, name: str) -> dict:
        """Drop a database with all its buckets and their files."""
        return self._result({"op": DROP_DATABASE.name, "db": name})

    def metrics(self) -> dict:
        """Every metric sample, ``'hoarddb_ttl_backlog_estimate' -> 0.0`` (the server's /metrics has the same)."""
        return self._result({"op": METRICS.name})

    def sweep_ttl(self) -> dict:
        """Run one TTL sweep now (the background sweeper does it every HOARDDB_TTL_SWEEP_SECONDS)."""
        return self._result({"op": SWEEP_TTL.name})


class Client(BaseClient):
    """Client is an open hoardDB: ``client["app"]`` is a database.

    Use it as a context manager, or call :meth:`close`. An embedded one that is dropped
    unclosed (with every handle taken from it) is closed when Python frees it, with a
    ResourceWarning, and one still open at exit is closed then. One client serves many
    threads; a process forked from the one that opened it cannot use it.
    """

    def _run(self, request: dict, shape=None) -> Any:
        answer = self._executor.execute(request)
        return answer if shape is None else shape(answer)

    def close(self) -> None:
        """Close the database; later calls raise ClosedError."""
        self._executor.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Database:
    """Database is a named group of buckets; ``db.Name`` and ``db["Name"]`` are its buckets."""

    def __init__(self, client: BaseClient, name: str):
        self._client = client
        self.name = name

    def __getitem__(self, name: str) -> "Bucket":
        return Bucket(self, name)

    def __getattr__(self, name: str) -> "Bucket":
        if name.startswith("_"):
            raise AttributeError(name)
        return Bucket(self, name)

    def create_bucket(self, name: str, type: str = "hash", **options) -> "Bucket":
        """Create a bucket of a store type (fifo, lifo, hash, btree, heap, blob) with its options.

        Warnings (an option recorded but not enforced) are on the returned bucket's
        ``warnings`` attribute.
        """
        def made(answer: dict) -> Bucket:
            bucket = Bucket(self, name)
            bucket.warnings = answer.get("warnings", [])
            return bucket
        return self._client._run(
            {"op": CREATE_BUCKET.name, "db": self.name, "bucket": name, "options": {"type": type, **options}}, made)

    def drop_bucket(self, name: str) -> dict:
        """Drop a bucket and every file of it."""
        return self._client._result({"op": DROP_BUCKET.name, "db": self.name, "bucket": name})

    def buckets(self) -> list[str]:
        """The names of this database's buckets, sorted."""
        return self._client._result({"op": LIST_BUCKETS.name, "db": self.name})

    def __repr__(self) -> str:
        return f"<hoarddb Database {self.name!r}>"


class Bucket:
    """Bucket is one bucket of a database; its methods are the verbs of its store type.

    Every verb of :mod:`hoarddb.operations` is a method (``push``, ``pop``, ``insert``,
    ``range``, ``put``…); calling one the bucket's type does not have raises
    VerbNotSupportedError from the engine, naming the verbs it has.
    """

    warnings: list[str] = []

    def __init__(self, database: Database, name: str):
        self._database = database
        self.name = name

    def _call(self, op: operations.Operation, args: tuple, kwargs: dict) -> Any:
        return self._call_bound(op, operations.bind(op, args, kwargs))

    def _call_bound(self, op: operations.Operation, bound: dict) -> Any:
        client = self._database._client
        if op.cursor:  # find, search, range, list, aggregate: read through a cursor, a batch at a time
            return client._cursor(op, self._database.name, self.name, bound)
        if client._call is not None:  # in process: the engine takes the bound arguments as they are
            answer = client._call(op, self._database.name, self.name, bound)
            if "index_used" in answer:
                return Found(answer["result"], answer["index_used"], answer.get("explain"))
            return answer.get("result")
        return client._run({"op": op.name, "db": self._database.name, "bucket": self.name, "args": bound},
                           _verb_result)

    def stats(self) -> dict:
        """Type, entries, bytes on disk and indexes of this bucket."""
        return self._database._client._result({"op": STATS.name, "db": self._database.name, "bucket": self.name})

    def describe(self) -> dict:
        """The bucket's declaration with its stats."""
        return self._database._client._result(
            {"op": DESCRIBE_BUCKET.name, "db": self._database.name, "bucket": self.name}
        )

    def __getitem__(self, key: Any) -> "Document":
        """The document with this key, as the owner of its store fields: ``db.Property["p1"].Expenses``."""
        return Document(self, key)

    def doc(self, key: Any) -> "Document":
        """Same as ``bucket[key]``: ``db.Property.doc("p1").Expenses.push(...)``."""
        return Document(self, key)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise _UnknownVerb(
            f"unknown verb {name!r}; verbs: {', '.join(sorted({op.name for op in operations.VERBS.values()}))}"
        )

    def __repr__(self) -> str:
        return f"<hoarddb Bucket {self._database.name}.{self.name}>"


class Document:
    """Document is a document's address in a bucket; its attributes are its store fields.

    ``db.Property["p1"].Expenses`` is the ``Expenses`` store of document ``p1``. The
    document's own fields are read with ``bucket.get(key)``.
    """

    def __init__(self, bucket: Bucket, key: Any):
        self._bucket = bucket
        self.key = key

    def __getattr__(self, field: str) -> "StoreField":
        if field.startswith("_"):
            raise AttributeError(field)
        return StoreField(self, field)

    def __getitem__(self, field: str) -> "StoreField":
        return StoreField(self, field)

    def __repr__(self) -> str:
        return f"<hoarddb Document {self._bucket._database.name}.{self._bucket.name}[{self.key!r}]>"


class StoreField:
    """StoreField is one store a document owns; its methods are the store-field verbs of its type.

    The verbs come from ``operations.FIELD_VERBS``: push/pop/peek/list/length on fifo,
    lifo and heap fields, put(key, doc)/get/delete/list on hash and btree fields,
    put/get/info/delete/stream on blob fields. Any other name is sent as it is, and the
    engine refuses it saying what to use instead (``update`` on a store field, say).

    An element of a hash or btree store field may own stores of its own (a deeper level):
    ``db.User["jane"].Friends["bob"].Messages`` is the ``Messages`` store of element
    ``bob`` of jane's ``Friends``; ``path`` holds the ``(key, field)`` steps below the
    document's field.
    """

    def __init__(self, document: Document, name: str, path: tuple = ()):
        self._document = document
        self.name = name
        self._path = path

    def _send(self, name: str, args: dict) -> Any:
        bucket = self._document._bucket
        request = {"op": name, "db": bucket._database.name, "bucket": bucket.name,
                   "key": self._document.key, "field": self.name, "args": args}
        if self._path:
            request["path"] = [{"key": key, "field": field} for key, field in self._path]
        return bucket._database._client._run(request, _result)

    def __getitem__(self, key: Any) -> "Element":
        """Element ``key`` of this hash or btree store, as the owner of its stores:
        ``db.User["jane"].Friends["bob"].Messages``."""
        return Element(self, key)

    def element(self, key: Any) -> "Element":
        """Same as ``field[key]``."""
        return Element(self, key)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self._send(name, {})

    def __repr__(self) -> str:
        steps = "".join(f"[{key!r}].{field}" for key, field in self._path)
        return f"<hoarddb StoreField {self._document!r}.{self.name}{steps}>"


class Element:
    """Element is an element's address in a hash or btree store field; its attributes are
    the stores it owns (``db.User["jane"].Friends["bob"].Messages``). Its own fields are
    read with the field's ``get(key)``."""

    def __init__(self, field: StoreField, key: Any):
        self._field = field
        self.key = key

    def __getattr__(self, name: str) -> StoreField:
        if name.startswith("_"):
            raise AttributeError(name)
        return self[name]

    def __getitem__(self, name: str) -> StoreField:
        f = self._field
        return StoreField(f._document, f.name, f._path + ((self.key, name),))

    def __repr__(self) -> str:
        return f"<hoarddb Element {self._field!r}[{self.key!r}]>"


def _make_field_verb(op: operations.Operation, name: str):
    def verb(self, *args, **kwargs):
        return self._send(op.name, operations.bind(op, args, kwargs))

    verb.__name__ = name
    verb.__qualname__ = f"StoreField.{name}"
    verb.__doc__ = f"{op.summary}\n\nAnswers {op.answer}. Example: {op.example}"
    return verb


for _name, _op in operations.FIELD_VERBS.items():
    setattr(StoreField, _name, _make_field_verb(_op, _name))


_list_init = list.__init__


class Found(list):
    """Found is the list of documents find or search returns, with how they were found.

    ``index_used`` is the index's name or ``"none — full scan"``; ``explain`` is the
    planner's account when the search asked for ``explain=True``.
    """

    def __init__(self, docs, index_used: str, explain: dict | None = None):
        _list_init(self, docs)
        self.index_used = index_used
        self.explain = explain


class Cursor:
    """Cursor is the answer of find, search, range, list and aggregate: its documents, read a batch at a time.

    ``for doc in bucket.find(f)`` reads the documents as it goes: the first batch came with
    the answer (``batch_size`` documents, 101 by default), each later one is asked for when
    the one before is used up (up to ``batch_size``, or about 1 MiB when it was not given), so a
    result of any size never sits whole in memory. Iterating is one pass, as a file's is.

    Used as a list — ``len(c)``, ``c[0]``, ``c == [...]``, ``bool(c)``, ``x in c`` — it reads
    every document left into a list first (:meth:`to_list`), and from then on is that list.
    ``index_used`` (and ``explain``) say how the read was served. A cursor read to its end is
    closed on the server by itself; :meth:`close` (or ``with``) closes one left unfinished,
    else the server closes it after ``cursor_timeout`` (10 minutes), or with its connection.
    """

    def __init__(self, client: "BaseClient", op: operations.Operation, db: str, bucket: str, bound: dict):
        self._client = client
        self._size = bound.get("batch_size")  # as given: later batches too
        self._bounded = op.cursor == "batches"  # list: its limit bounds it (max_peek), read whole
        if self._size is None:
            bound = {**bound, "batch_size": first_batch(op, bound)}
        if client._call is not None:  # in process: the engine takes the bound arguments as they are
            answer = client._call(op, db, bucket, bound)
        else:
            answer = client._run({"op": op.name, "db": db, "bucket": bucket, "args": bound})
        self._started(answer)

    def _started(self, answer: dict) -> None:
        self.index_used = answer.get("index_used")
        self.explain = answer.get("explain")
        self._batch = iter(answer.get("result") or [])
        self.id = answer.get("cursor")  # None once the server holds nothing more
        self._list: list | None = None
        #: How many documents were handed out so far.
        self.read = 0
        if self.id is None or self._bounded:  # the whole result came in the first batch, or a list's at most
            self.to_list()                      # max_peek documents: it is a list in every way
        elif getattr(self._client._executor, "cursors", None) is not None:
            # in process: a cursor dropped unfinished is closed then (a server's waits for its timeout)
            weakref.finalize(self, self._client._executor.cursors.close, self.id)

    def _more(self) -> dict:
        request = {"op": MORE.name, "cursor": self.id}
        if self._size is not None:
            request["batch_size"] = self._size
        return self._client._run(request)

    def __iter__(self):
        if self._list is not None:
            return iter(self._list)
        if self.read and not self.id and not _peekable(self):
            raise CursorNotFoundError(
                f"this cursor was read to its end ({self.read} documents): a cursor is read once. Keep the "
                "documents with to_list() (or list(...)) to go over them again, or run the read again")
        return self

    def __next__(self) -> Any:
        while True:
            doc = next(self._batch, _DONE)
            if doc is not _DONE:
                if self._list is None:  # (those of the list were counted as it was read)
                    self.read += 1
                return doc
            if not self.id:
                raise StopIteration
            answer = self._more()
            self._batch = iter(answer.get("result") or [])
            self.id = answer.get("cursor")

    def next_batch(self) -> list:
        """The documents left of the batch at hand, or the next batch (an empty list at the end)."""
        rest = list(self._batch)
        if not rest and self.id:
            answer = self._more()
            rest, self.id = list(answer.get("result") or []), answer.get("cursor")
        self._batch = iter(())
        self.read += len(rest)
        return rest

    @property
    def alive(self) -> bool:
        """Whether documents may be left to read."""
        return self._list is None and (self.id is not None or _peekable(self))

    def to_list(self) -> list:
        """Every document left, as a list (the cursor is then that list)."""
        if self._list is None:
            docs = []
            for batch in iter(self.next_batch, []):  # (not list(self): that would ask len() first)
                docs.extend(batch)
            self._list = Found(docs, self.index_used, self.explain) if self.index_used is not None else docs
            # an iteration of this very cursor under way (list(cursor) asks len() once it has its
            # iterator) goes on over the documents read
            self._batch = iter(docs)
        return self._list

    def close(self) -> None:
        """Close the cursor on the server before its end (nothing to do once it is read to its end)."""
        cursor_id, self.id = self.id, None
        self._batch = iter(())
        if cursor_id:
            self._client._run({"op": CLOSE_CURSOR.name, "cursor": cursor_id})

    def __enter__(self) -> "Cursor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # the list it reads into when used as one
    def __len__(self) -> int:
        return len(self.to_list())

    def __getitem__(self, i):
        return self.to_list()[i]

    def __eq__(self, other) -> bool:
        return self.to_list() == (other.to_list() if isinstance(other, Cursor) else other)

    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        return bool(self.to_list())

    def __contains__(self, doc) -> bool:
        return doc in self.to_list()

    def __repr__(self) -> str:
        if self._list is None and not self.id:  # every document left is at hand: shown as the list it is
            rest = list(self._batch)
            self._batch = iter(rest)
            return repr(rest)
        if self._list is not None:
            return repr(self._list)
        return f"<hoarddb Cursor {self.id}: {self.read} read, more on the server>"


_FIRST_BATCH = 101
#: What list answers when its limit is left out (the stores' default).
_LIST_LIMIT = 100


def first_batch(op: operations.Operation, args: dict) -> int:
    """The batch_size a client asks for when it was not given: 101 documents (MongoDB's), or for
    list, whose limit bounds it, all of it in one batch, as before cursors."""
    if op.cursor != "batches":
        return _FIRST_BATCH
    limit = args.get("limit")
    return limit if type(limit) is int and limit > 0 else _LIST_LIMIT
_DONE = object()


def _peekable(cursor: Cursor) -> bool:
    """Whether the batch at hand still holds documents (it is put back as it was)."""
    rest = list(cursor._batch)
    cursor._batch = iter(rest)
    return bool(rest)


class _UnknownVerb(UnknownVerbError, AttributeError):
    """An unknown verb on a Bucket is both UnknownVerbError and AttributeError (so hasattr works)."""


def _make_verb(op: operations.Operation, name: str):
    first = op.params[0] if op.params else None
    if first is not None and first.kind == "filter" and not any(p.required for p in op.params[1:] + op.options):
        # search(filter), find(filter), count(filter): one dict is what operations.bind
        # would bind to the filter as it is, so the common call skips binding.
        filter_name = first.name
        check_ints = operations.check_ints

        def verb(self, *args, **kwargs):
            if not kwargs and len(args) == 1 and type(args[0]) is dict:
                check_ints(op, first, args[0])  # all the checking binding would do of a dict
                return self._call_bound(op, {filter_name: args[0]})
            return self._call(op, args, kwargs)
    elif op.single is not None and first is not None and first.kind in ("doc", "docs"):
        # insert(doc), push(doc), batch_insert(docs): a dict (a list) is bound as it is, with
        # no check to make (the engine refuses what is in it when it encodes it).
        exact = dict if first.kind == "doc" else list

        def verb(self, *args, **kwargs):
            if not kwargs and len(args) == 1 and type(args[0]) is exact:
                return self._call_bound(op, {op.single: args[0]})
            return self._call(op, args, kwargs)
    else:
        def verb(self, *args, **kwargs):
            return self._call(op, args, kwargs)

    verb.__name__ = name
    verb.__qualname__ = f"Bucket.{name}"
    verb.__doc__ = f"{op.summary}\n\nAnswers {op.answer}. Example: {op.example}"
    return verb


for _name, _op in operations.VERBS.items():
    setattr(Bucket, _name, _make_verb(_op, _name))
