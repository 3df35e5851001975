"""Rebuilding in the background (indexes.md, "When an index is not ready", building): the database opens at once,
search refuses the index with the reason and the progress, find, count, dump and writes go on, and the index comes
out ready with every write made meanwhile in it."""

from __future__ import annotations

import logging
import shutil

import pytest

import hoarddb
from hoarddb import errors
from hoarddb.catalog import Catalog
from hoarddb.tools import dump
from hoarddb.tools.check import check

from .building import wait_built
from .test_states import set_index_format

N = 20_000


@pytest.fixture(scope="module")
def old_format(tmp_path_factory):
    """A bucket of N documents whose two indexes were written by an older hoardDB (format 2)."""
    path = tmp_path_factory.mktemp("old") / "data"
    with hoarddb.open(path, sync=False) as c:
        b = c["app"].create_bucket("Users", type="hash", indices=[{"field": "Email", "unique": True},
                                                                 {"fields": ["Team", "Age"]}])
        for start in range(0, N, 5000):
            b.batch_insert([{"_id_": f"u{i:06d}", "Email": f"u{i}@x", "Team": f"t{i % 10}", "Age": i % 70}
                            for i in range(start, start + 5000)])
    set_index_format(path, 2)
    return path


def copy(src, tmp_path):
    shutil.copytree(src, tmp_path / "data")
    return tmp_path / "data"


def test_while_building_search_is_refused_and_the_rest_is_served(old_format, tmp_path):
    data = copy(old_format, tmp_path)
    with hoarddb.open(data, ttl_sweep_seconds=0) as c:
        b = c["app"].Users
        b.count()  # opened (if the builder has not yet)
        store = c._executor._stores[("app", "Users")]
        with store._wlock:  # the builder waits for its next batch: the index stays building, for sure
            indexes = b.describe()["indexes"]
            # they are rebuilt one after the other: the second one is building whatever the first is
            assert indexes[1]["state"] == "building" and indexes[0]["state"] in ("building", "ready")
            progress = indexes[1]["progress"]
            assert progress["of"] == N and 0 <= progress["documents"] < N
            assert b.stats()["indexes"][1]["summary"] == "Team_1_Age_1 (building)"
            with pytest.raises(errors.IndexNotReadyError) as e:
                b.search({"Team": "t3"})
            assert e.value.code == 24 and e.value.state == "building"
            assert "rebuilt from the documents in the background" in e.value.message
            assert f"{progress['documents']} of about {N} documents" in e.value.message
            assert "use find" in e.value.message
            # find, count and dump are served meanwhile (reads never wait for the rebuild)
            assert [d["_id_"] for d in b.find({"Email": "u7@x"})] == ["u000007"]
            assert b.count() == N and b.count({"Team": "t3"}) == N // 10
            assert c.metrics()['hoarddb_indexes{state="building"}'] >= 1
        report = dump(c, "app", tmp_path / "out")
        assert report.ok and report.buckets[0].documents == N
        assert [ix["state"] for ix in wait_built(b)] == ["ready", "ready"]
        got = b.search({"Email": "u7@x"})
        assert got.index_used == "Email_1" and [d["_id_"] for d in got] == ["u000007"]


def test_writes_made_during_the_build_are_in_the_index(old_format, tmp_path, caplog):
    data = copy(old_format, tmp_path)
    with caplog.at_level(logging.WARNING, logger="hoarddb.indexes"):
        with hoarddb.open(data, ttl_sweep_seconds=0) as c:
            b = c["app"].Users
            b.count()
            with c._executor._stores[("app", "Users")]._wlock:  # the builder waits: building, for sure
                assert b.describe()["indexes"][1]["state"] == "building"
            seen = []
            i = 0
            # write across the key space (behind and ahead of the rebuild) until it is done
            while (states := [ix["state"] for ix in b.describe()["indexes"]]) != ["ready", "ready"]:
                seen.append(b.describe()["indexes"][1].get("progress", {}).get("documents"))
                k = (i * 7919) % N
                b.update({"_id_": f"u{k:06d}"}, {"$set": {"Email": f"moved{i}@x", "Team": "moved"}})
                b.insert({"_id_": f"n{i:06d}", "Email": f"new{i}@x", "Team": "new", "Age": i})
                b.delete({"_id_": f"u{(k + 1) % N:06d}"})
                i += 1
                assert "conflicted" not in states
            assert i > 0  # writes were made while it was building
            done = [p for p in seen if p is not None]
            assert done == sorted(done)  # progress only grows
            for f in ({"Email": "moved0@x"}, {"Email": f"new{i - 1}@x"}, {"Team": "moved"}, {"Team": "new"},
                      {"Team": "t3", "Age": 5}, {"Email": "u1@x"}, {"Team": "t1", "Age": {"$gte": 60}}):
                got = b.search(f)
                assert got.index_used != "none — full scan", f
                assert [d["_id_"] for d in got] == [d["_id_"] for d in b.find(f)], f
            with pytest.raises(errors.DuplicateKeyError):
                b.insert({"_id_": "dup", "Email": "moved0@x"})
    assert "rebuilding index Email_1" in caplog.text and "index Email_1 is ready" in caplog.text
    assert check(data).ok  # every entry points to a document that has it, and each document has all of its own
    cat = Catalog(data)
    assert [ix["format"] for ix in cat.bucket("app", "Users")["indexes"]] == [3, 3]
    cat.close()


def test_a_build_cut_short_by_close_starts_over_at_the_next_open(old_format, tmp_path):
    data = copy(old_format, tmp_path)
    with hoarddb.open(data, ttl_sweep_seconds=0) as c:
        c["app"].Users.count()
        store = c._executor._stores[("app", "Users")]
        with store._wlock:  # the builder cannot finish a batch; told to stop, it stops at the next
            assert c["app"].Users.describe()["indexes"][0]["state"] == "building"
            c._executor.builder._stop.set()
    # closed while building
    cat = Catalog(data)
    formats = [ix["format"] for ix in cat.bucket("app", "Users")["indexes"]]
    cat.close()
    assert check(data).ok
    with hoarddb.open(data, ttl_sweep_seconds=0) as c:
        b = c["app"].Users
        assert [ix["state"] for ix in wait_built(b)] == ["ready", "ready"]
        assert [d["_id_"] for d in b.search({"Team": "t2", "Age": 2})] == [d["_id_"] for d in b.find({"Team": "t2",
                                                                                                        "Age": 2})]
    assert formats == [2, 2] or formats == [3, 2] or formats == [3, 3]
    assert check(data).ok
