"""Index states (indexes.md, "When an index is not ready"): building, conflicted, unreadable.

The states come from the declaration's format version and from what a rebuild finds,
so these tests set up a data directory as an older or newer hoardDB, or a restore,
would leave it: they edit the catalog and the bucket's LMDB directly while the
database is closed.
"""

from __future__ import annotations

import logging

import lmdb
import pytest

import hoarddb
from hoarddb import errors
from hoarddb.catalog import Catalog
from hoarddb.indexes.declaration import FORMAT, NEWEST_FORMAT
from hoarddb.values.codec import encode
from hoarddb.values.keys import encode_key
from .building import wait_built


def set_index_format(path, fmt, bucket="Users"):
    cat = Catalog(path)
    decl = cat.bucket("app", bucket)
    cat.replace_bucket("app", dict(decl, indexes=[dict(ix, format=fmt) for ix in decl["indexes"]]))
    cat.close()


def raw_env(path, bucket="Users"):
    return lmdb.open(str(path / "app" / bucket / "kv"), map_size=1 << 30)


@pytest.fixture
def data(tmp_path):
    with hoarddb.open(tmp_path) as c:
        b = c["app"].create_bucket("Users", type="hash", indices=[{"field": "Email", "unique": True}])
        b.batch_insert([{"_id_": "u1", "Email": "dalek@example.com"}, {"_id_": "u3"}])
    return tmp_path


def test_an_index_of_an_older_format_is_rebuilt_once_at_open(data, caplog):
    set_index_format(data, 1)
    env = raw_env(data)
    with env.begin(write=True) as txn:  # the older format recorded no entry for a missing field
        txn.delete(b"I\x00" + encode_key(None))
    env.close()
    with caplog.at_level(logging.WARNING, logger="hoarddb.indexes"):
        with hoarddb.open(data) as c:
            b = c["app"].Users
            assert [ix["state"] for ix in wait_built(b)] == ["ready"]
            with pytest.raises(errors.DuplicateKeyError, match="Email = null"):
                b.insert({"_id_": "u4"})  # the rebuild recorded u3's missing field
            assert b.search({"Email": None}).index_used == "Email_1"
    assert "rebuilding index Email_1" in caplog.text
    cat = Catalog(data)
    assert cat.bucket("app", "Users")["indexes"][0]["format"] == FORMAT  # once: not rebuilt again
    cat.close()


def make_conflict(data):
    """A second holder of one unique value, as a restore from elsewhere would leave it."""
    env = raw_env(data)
    with env.begin(write=True) as txn:
        txn.put(b"D" + encode_key("u2"), encode({"_id_": "u2", "Email": "dalek@example.com"}))
        txn.put(b"Mcount", (3).to_bytes(8, "little"))
    env.close()
    set_index_format(data, 1)


def test_a_conflicted_index_refuses_search_naming_both_documents(data):
    make_conflict(data)
    with hoarddb.open(data) as c:
        b = c["app"].Users
        assert wait_built(b)[0]["state"] == "conflicted"
        assert b.stats()["indexes"][0]["summary"] == "Email_1 (unique, conflicted)"
        with pytest.raises(errors.IndexNotReadyError) as e:
            b.search({"Email": "dalek@example.com"})
        assert '"u1" and "u2"' in e.value.message and 'Email = "dalek@example.com"' in e.value.message
        assert e.value.code == 24 and e.value.state == "conflicted"
        # find and count are never affected, and nothing was deleted
        assert len(b.find({"Email": "dalek@example.com"})) == 2 and b.count() == 3
        # a third holder is still refused
        with pytest.raises(errors.DuplicateKeyError):
            b.insert({"_id_": "u9", "Email": "dalek@example.com"})
        assert c.metrics()['hoarddb_indexes{state="conflicted"}'] == 1
        # fix it: change one of them, then reopen
        b.update({"_id_": "u2"}, {"$set": {"Email": "other@example.com"}})
    with hoarddb.open(data) as c:
        b = c["app"].Users
        assert wait_built(b)[0]["state"] == "ready"
        assert [d["_id_"] for d in b.search({"Email": "dalek@example.com"})] == ["u1"]


def test_an_index_from_a_newer_version_is_unreadable_kept_and_blocks_writes_if_unique(data):
    set_index_format(data, NEWEST_FORMAT + 1)
    with hoarddb.open(data) as c:
        b = c["app"].Users
        assert b.describe()["indexes"][0]["state"] == "unreadable"
        with pytest.raises(errors.IndexNotReadyError, match="newer version"):
            b.search({"Email": "dalek@example.com"})
        for write in (lambda: b.insert({"_id_": "x"}), lambda: b.update({}, {"$set": {"a": 1}}),
                      lambda: b.delete({"_id_": "u1"}), lambda: b.put({"_id_": "u1"})):
            with pytest.raises(errors.IndexNotReadyError, match="refuses writes"):
                write()
        assert b.count() == 2 and len(b.find({"Email": "dalek@example.com"})) == 1
    cat = Catalog(data)
    assert cat.bucket("app", "Users")["indexes"][0]["format"] == NEWEST_FORMAT + 1  # kept unchanged
    cat.close()


def test_an_unreadable_plain_index_does_not_block_writes(tmp_path):
    with hoarddb.open(tmp_path) as c:
        c["app"].create_bucket("Users", type="hash", indices=["Email"])
    set_index_format(tmp_path, NEWEST_FORMAT + 1)
    with hoarddb.open(tmp_path) as c:
        c["app"].Users.insert({"_id_": "a", "Email": "x"})
        assert c["app"].Users.search({"_id_": "a"}).index_used == "none — full scan"
        with pytest.raises(errors.IndexNotReadyError):
            c["app"].Users.search({"Email": "x"})


def loaded_conflict(c):
    """u1 and u2 both hold x@x in a conflicted unique index, as a restore leaves it."""
    b = c["app"].create_bucket("Users", type="hash", indices=[{"field": "Email", "unique": True}])
    b.insert({"_id_": "u1", "Email": "x@x"})
    got = b.load([{"_id_": "u2", "Email": "x@x"}])
    assert got["conflicts"][0]["documents"] == ["u1", "u2"]
    assert b.describe()["indexes"][0]["state"] == "conflicted"
    return b


@pytest.mark.parametrize("leave", [
    lambda b: b.update({"_id_": "u1"}, {"$set": {"Email": "y@x"}}),
    lambda b: b.delete({"_id_": "u1"}),
    lambda b: b.put({"_id_": "u1", "Email": "y@x"}),
])
def test_a_third_document_is_refused_while_any_document_of_a_conflict_holds_the_value(tmp_path, leave):
    # Before, the first holder leaving the value deleted its entry although u2 still held it,
    # and a third document with the value was accepted.
    with hoarddb.open(tmp_path) as c:
        b = loaded_conflict(c)
        leave(b)  # u1, the entry's holder, leaves the value; u2 still holds it
        with pytest.raises(errors.DuplicateKeyError) as e:
            b.insert({"_id_": "u3", "Email": "x@x"})
        assert e.value.holder == "u2" and 'already used by document "u2"' in e.value.message
        assert b.get("u3") is None
        b.update({"_id_": "u2"}, {"$set": {"Email": "z@x"}})  # now nobody holds it
        b.insert({"_id_": "u3", "Email": "x@x"})
    with hoarddb.open(tmp_path) as c:
        b = c["app"].Users
        assert wait_built(b)[0]["state"] == "ready"
        assert [d["_id_"] for d in b.search({"Email": "x@x"})] == ["u3"]


def test_the_other_document_of_a_conflict_leaving_keeps_the_holder(tmp_path):
    with hoarddb.open(tmp_path) as c:
        b = loaded_conflict(c)
        b.delete({"_id_": "u2"})  # not the entry's holder: u1 keeps the value
        with pytest.raises(errors.DuplicateKeyError, match='already used by document "u1"'):
            b.insert({"_id_": "u3", "Email": "x@x"})
        b.delete({"_id_": "u1"})
        b.insert({"_id_": "u3", "Email": "x@x"})  # free once neither holds it
        with pytest.raises(errors.DuplicateKeyError, match='already used by document "u3"'):
            b.insert({"_id_": "u4", "Email": "x@x"})


def test_a_conflict_found_by_the_rebuild_at_open_keeps_refusing_when_its_holder_leaves(data):
    make_conflict(data)
    with hoarddb.open(data) as c:
        b = c["app"].Users
        assert wait_built(b)[0]["state"] == "conflicted"
        b.update({"_id_": "u1"}, {"$set": {"Email": "new@example.com"}})
        with pytest.raises(errors.DuplicateKeyError, match='already used by document "u2"'):
            b.insert({"_id_": "u9", "Email": "dalek@example.com"})
