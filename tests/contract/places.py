"""Where a store under contract lives: a bucket of its own (L1), a document's store field (L2) or
a store of an element of a document's hash store field (L3: ``Owner["d1"].F["e1"].S``), reached
embedded, over the blocking client or over the asyncio client.

A :class:`Place` makes a fresh store of a type (``place.make("fifo")``) and hands back a
:class:`Store`: the public API object itself (a Bucket or a StoreField, with every verb
of its kind), plus the few words the contract needs where a bucket and a field differ by
design, said once here so the tests can say them explicitly (``refused`` checks an
error's code and words):

    keyed stores   a bucket keeps the key in the document (``_id_``): put({_id_: k, ...}),
                   get(k) answers the document with its _id_, list answers documents;
                   a field keeps it beside the document: put(k, doc), get(k) answers doc,
                   list answers {key, doc} (docs/user/store-fields.md)
    btree          a bucket's insert of a key that is there adds an entry beside it (ties);
                   a field's put(k, doc) replaces the one under k

The asyncio client is driven from a loop in a thread of its own: :class:`Blocking` turns
its coroutine methods into calls, so the same test body runs on all three executors.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from pathlib import Path
from typing import Any

import pytest

from hoarddb.errors import HoardError

_names = itertools.count(1)

#: The three ways a program reaches hoardDB.
EXECUTORS = ("embedded", "blocking", "aio")
#: Where a store lives: a bucket (depth 1), a store field of a document of a hash (or btree)
#: bucket (depth 2), or a store field of an element of such a document's hash store field (depth 3).
WHERES = ("bucket", "field", "nested")
#: The depth (L1, L2, L3) of each where.
DEPTHS = {"bucket": 1, "field": 2, "nested": 3}


class Store:
    """Store is one store under contract: ``api`` is the Bucket or StoreField, and the verbs
    are reached through it (``store.push(...)`` is ``store.api.push(...)``)."""

    def __init__(self, api, type_: str, where: str, database, files: Path, owner=None):
        self.api = api
        self.database = database  # the Database it is in (each store has one of its own)
        self.type = type_
        self.where = where
        self.files = files  # the folder its blob files are in (a blob bucket's, or the owner's fields/)
        self.owner = owner  # the owning bucket of a field (its API object), else None

    @property
    def is_field(self) -> bool:
        """A store field at any depth (L2 or L3): it has the store-field verbs."""
        return self.where in ("field", "nested")

    @property
    def depth(self) -> int:
        return DEPTHS[self.where]

    # -- what owns a field: a document (L2), or an element of the document's F (L3) --------

    @property
    def holder(self):
        """The store the owner of this field is an element of (None for a document: its bucket)."""
        return self.owner["d1"].F if self.where == "nested" else None

    def of(self, name: Any):
        """This field of another owner, ``name`` (a document, or an element of d1's F)."""
        return self.holder[name].S if self.where == "nested" else self.owner[name].S

    def add_owner(self, name: Any) -> None:
        """Make owner ``name`` (a document, or an element of d1's F)."""
        if self.where == "nested":
            self.holder.put(name, {"Name": "an element"})
        else:
            self.owner.insert({"_id_": name})

    def delete_owner(self, name: Any = "d1") -> dict:
        """Delete the owner of this field (the document, or the element e1): its answer."""
        if self.where == "nested":
            return self.holder.delete("e1" if name == "d1" else name)
        return self.owner.delete(name)

    def recreate_owner(self) -> None:
        self.add_owner("e1" if self.where == "nested" else "d1")

    #: The words a refusal of a field of a missing owner says.
    @property
    def missing_owner_words(self) -> tuple:
        if self.where == "nested":
            return ("nobody", "does not exist", "Put it first")
        return ("nobody", "Insert the document first")

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.api, name)

    # -- keyed stores: the one place their calls differ between a bucket and a field ------

    def put_key(self, key: Any, doc: dict):
        """Store ``doc`` under ``key``: a hash bucket's put, a btree bucket's insert, a field's put."""
        if not self.is_field:
            whole = {"_id_": key, **doc}
            return self.api.put(whole) if self.type == "hash" else self.api.insert(whole)
        return self.api.put(key, doc)

    def stored(self, key: Any, doc: dict) -> dict:
        """What get(key) answers for ``doc`` put under ``key``."""
        return doc if self.is_field else {"_id_": key, **doc}

    def listed(self, key: Any, doc: dict) -> dict:
        """What list answers for ``doc`` put under ``key``."""
        return {"key": key, "doc": doc} if self.is_field else {"_id_": key, **doc}

    def key_of(self, listed: dict) -> Any:
        """The key of one element of a list's answer."""
        return listed["key"] if self.is_field else listed["_id_"]

    def remove(self, key: Any) -> dict:
        """delete(key), the key given bare: ``{deleted}``."""
        return self.api.delete(key)


class Place:
    """Place makes stores of one executor and one where, each in a database no other test uses."""

    def __init__(self, executor: str, where: str, client, data: Path, owner_type: str = "hash", owner_data=None):
        self.executor = executor
        self.where = where
        self.client = client
        self.data = data
        #: on a cluster, ``owner_data(db, bucket)``: the data folder of the node owning a whole bucket, else None
        self.owner_data = owner_data
        self.owner_type = owner_type
        self.made: list[str] = []

    def database(self):
        name = f"c{next(_names)}"
        self.made.append(name)
        return self.client[name]

    def drop(self) -> None:
        """Drop the databases this place made: the shared engine and server close their files."""
        for name in self.made:
            try:
                self.client.drop_database(name)
            except HoardError:
                pass  # never made (a test that failed first), or dropped by the test

    def make(self, type_: str, **options) -> Store:
        """A new, empty store of ``type_`` (bucket options only apply to a bucket)."""
        db = self.database()
        if self.where == "bucket":
            api = db.create_bucket("S", type=type_, **options)
            data = self.owner_data(db.name, "S") if self.owner_data is not None and type_ == "blob" else self.data
            return Store(api, type_, "bucket", db, data / db.name / "S")
        if self.where == "field":
            owner = db.create_bucket("Owner", type=self.owner_type, store_fields=[{"name": "S", "type": type_}])
            owner.insert({"_id_": "d1", "Name": "the owner"})
            return Store(owner["d1"].S, type_, "field", db, self.data / db.name / "Owner" / "fields", owner=owner)
        owner = db.create_bucket("Owner", type=self.owner_type, store_fields=[
            {"name": "F", "type": "hash", "store_fields": [{"name": "S", "type": type_}]}])
        owner.insert({"_id_": "d1", "Name": "the owner"})
        owner["d1"].F.put("e1", {"Name": "an element"})
        return Store(owner["d1"].F["e1"].S, type_, "nested", db, self.data / db.name / "Owner" / "fields", owner=owner)


# -- the asyncio client, driven from another thread ------------------------------------------

class Loop:
    """An event loop running in a thread of its own; ``run(coro)`` waits for its result."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="contract-aio", daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class Blocking:
    """Blocking is an object of hoarddb.aio seen as blocking calls: an awaited method's result,
    wrapped again when it is another API object (a Database from a Client, a Bucket from
    ``db.Name``), and an async iterator of chunks (stream) read into a blocking iterator."""

    def __init__(self, target, loop: Loop):
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_loop", loop)

    def _wrap(self, value):
        module = type(value).__module__
        if module.startswith("hoarddb.") and type(value).__name__ in ("Client", "Database", "Bucket", "Document",
                                                                     "StoreField", "Element"):
            return Blocking(value, self._loop)
        if hasattr(value, "__anext__"):
            return self._iterate(value)
        return value

    def _iterate(self, chunks):
        while True:
            try:
                yield self._loop.run(chunks.__anext__())
            except StopAsyncIteration:
                return

    def __getattr__(self, name: str):
        value = getattr(self._target, name)
        if not callable(value):
            return self._wrap(value)

        def call(*args, **kwargs):
            result = value(*args, **kwargs)
            if asyncio.iscoroutine(result):
                result = self._loop.run(result)
            elif hasattr(result, "__await__"):  # a read's AsyncCursor: awaited, it is the list of its documents
                result = self._loop.run(_awaited(result))
            return self._wrap(result)
        return call

    def __getitem__(self, key):
        return self._wrap(self._target[key])


async def _awaited(awaitable):
    return await awaitable


# -- refusals ---------------------------------------------------------------------------------

def refused(code_name: str, call, *words: str):
    """Call ``call()`` and expect it refused with the error ``code_name`` (its stable code too),
    the message holding each of ``words``; the error."""
    from hoarddb import errors

    with pytest.raises(errors.HoardError) as info:
        call()
    error = info.value
    expected = next(cls.code for cls in errors.ERRORS.values() if cls.codeName == code_name)
    assert (error.codeName, error.code) == (code_name, expected), f"{error.codeName} ({error.code}): {error}"
    for word in words:
        assert word in str(error), f"{word!r} not in {str(error)!r}"
    return error
