"""The keyspace seam (hoarddb/stores/keyspace.py): a store's verbs run over any key prefix of an LMDB environment.

A store field is one Keyspace (stores/fields.py's FieldSpace); these tests give the same store
classes a Keyspace of their own over a plain LMDB environment, at a prefix and at a prefix
nested in it, and hold them to what the types promise.
"""

from __future__ import annotations

import lmdb
import pytest

from hoarddb import errors
from hoarddb.options import Options
from hoarddb.stores.fifo import FifoField
from hoarddb.stores.heap import HeapField
from hoarddb.stores.keyed import KeyedField
from hoarddb.stores.keyspace import COUNTER, Keys, Keyspace
from hoarddb.stores.lifo import LifoField


class EnvSpace(Keyspace):
    """A keyspace at ``prefix`` of an LMDB environment, its count record at ``b"#" + prefix``."""

    def __init__(self, env: lmdb.Environment, prefix: bytes):
        self.env, self.prefix, self.where = env, prefix, f"space {prefix!r}"

    def _keys(self, txn) -> Keys:
        raw = txn.get(b"#" + self.prefix)
        return Keys(txn, self.prefix, *(COUNTER.unpack(raw) if raw else (0, 0)))

    def read(self, fn):
        with self.env.begin() as txn:
            return fn(self._keys(txn))

    def write(self, fn):
        with self.env.begin(write=True) as txn:
            keys = self._keys(txn)
            result = fn(keys)
            txn.put(b"#" + self.prefix, COUNTER.pack(keys.count, keys.seq))
            return result


@pytest.fixture
def env(tmp_path):
    e = lmdb.open(str(tmp_path / "env"), map_size=1 << 24)
    yield e
    e.close()


@pytest.fixture(params=[b"A", b"F\x02p1\x00\x03k\x00\x01"], ids=["short", "long"])
def space(env, request):
    return EnvSpace(env, request.param)


def test_queues_keep_their_order_over_any_keyspace(space):
    fifo, lifo = FifoField(space, Options()), LifoField(EnvSpace(space.env, space.prefix + b"L"), Options())
    for q in (fifo, lifo):
        assert q.batch_push([{"n": i} for i in range(5)]) == 5
    assert fifo.pop() == {"n": 0} and lifo.pop() == {"n": 4}
    assert [d["n"] for d in fifo.peek(3)] == [1, 2, 3]
    assert [d["n"] for d in lifo.peek(3)] == [3, 2, 1]
    assert [d["n"] for d in lifo.list(after=1, limit=2)] == [1, 2]  # storage order, oldest first
    assert fifo.length() == lifo.length() == 4
    with pytest.raises(errors.LimitExceededError):
        fifo.pop(101)
    with pytest.raises(errors.NotADocumentError, match="element 1 of the batch"):
        fifo.batch_push([{"n": 9}, "no"])
    assert fifo.length() == 4  # nothing of the refused batch


def test_a_heap_breaks_ties_in_push_order(space):
    heap = HeapField(space, Options())
    heap.batch_push([{"priority": 1, "t": "low"}, {"priority": 5, "t": "first"}, {"priority": 5, "t": "second"},
                     {"priority": 2.5, "t": "mid"}])
    assert [d["t"] for d in heap.list()] == ["first", "second", "mid", "low"]
    assert [d["t"] for d in heap.pop(2)] == ["first", "second"]
    with pytest.raises(errors.BadValueError, match="priority must be a number"):
        heap.push({"priority": "high"})


def test_a_keyed_store_replaces_and_lists_in_key_order(space):
    keyed = KeyedField(space, Options())
    for key in ("b", "a", "c", "a"):
        keyed.put(key, {"k": key})
    assert keyed.length() == 3
    assert [e["key"] for e in keyed.list()] == ["a", "b", "c"]
    assert [e["key"] for e in keyed.list(after="a", limit=1)] == ["b"]
    assert keyed.delete("b") == {"deleted": 1} and keyed.delete("b") == {"deleted": 0}
    assert keyed.get("b") is None and keyed.get("c") == {"k": "c"}


def test_keyspaces_of_one_environment_are_apart(env):
    """Two stores whose prefixes differ see only their own keys and counts, however long the prefixes."""
    shallow, deep = EnvSpace(env, b"P"), EnvSpace(env, b"Q" + b"jane\x00" + b"\x02" + b"bob\x00" + b"\x01")
    FifoField(shallow, Options()).batch_push([{"at": "shallow"}] * 3)
    KeyedField(deep, Options()).put("m1", {"at": "deep"})
    assert FifoField(shallow, Options()).list() == [{"at": "shallow"}] * 3
    assert KeyedField(deep, Options()).list() == [{"key": "m1", "doc": {"at": "deep"}}]
    assert FifoField(shallow, Options()).length() == 3 and KeyedField(deep, Options()).length() == 1
