"""The contract every store type keeps, held against each of the six through the public API."""

from __future__ import annotations

import pytest

import hoarddb
from hoarddb import operations
from hoarddb.stores import store_class
from hoarddb.stores.base import Store

TYPES = operations.STORE_TYPES
ONE = {"fifo": {"n": 1}, "lifo": {"n": 1}, "heap": {"priority": 1, "n": 1}, "hash": {"_id_": "k", "n": 1},
       "btree": {"_id_": "k", "n": 1}, "blob": b"bytes"}


@pytest.mark.parametrize("type_", TYPES)
def test_every_verb_of_the_table_is_a_method_of_the_store(type_):
    cls = store_class(type_)
    assert issubclass(cls, Store) and cls.type_name == type_
    for verb in operations.verbs_for(type_):
        assert callable(getattr(cls, verb, None)), f"{type_} store has no method for the verb {verb!r}"


@pytest.mark.parametrize("type_", TYPES)
def test_empty_stats_length_and_export(db, type_):
    b = db.create_bucket("B", type=type_)
    assert b.length() == 0
    stats = b.stats()
    assert stats["type"] == type_ and stats["entries"] == 0 and stats["bytes"] >= 0
    assert b.export() == {"docs": [], "next": None}
    assert b.list() == []


@pytest.mark.parametrize("type_", TYPES)
def test_one_write_is_counted_listed_and_kept_after_reopen(tmp_path, type_):
    with hoarddb.open(tmp_path) as c:
        b = c["app"].create_bucket("B", type=type_)
        if type_ == "blob":
            b.put(ONE[type_])
        elif type_ in ("hash", "btree"):
            b.insert(ONE[type_])
        else:
            b.push(ONE[type_])
        assert b.length() == 1 and b.stats()["entries"] == 1 and len(b.list()) == 1
    with hoarddb.open(tmp_path) as c:
        assert c["app"].B.length() == 1 and len(c["app"].B.export()["docs"]) == 1
