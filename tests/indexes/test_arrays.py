"""Arrays in indexed fields (indexes.md, "Arrays"): each distinct element is an entry, an
empty array one entry ``[]``, and search still answers what find answers."""

from __future__ import annotations

import datetime
import logging

import pytest
from hypothesis import given, strategies as st

import hoarddb
from hoarddb import errors
from hoarddb.catalog import Catalog
from hoarddb.indexes.declaration import FORMAT
from hoarddb.indexes.planner import MAX_PREFIXES, plan
from hoarddb.values.keys import decode_keys, encode_key

from .building import wait_built
from .test_states import raw_env, set_index_format

TAGS = [f"tag-{i:04d}" for i in range(1000)]  # far past the ~60 short strings an array could hold whole


def ids(found):
    return [d["_id_"] for d in found]


def entries(client, bucket="B", index=0):
    """The values of each entry of an index, as decoded from its LMDB key (a plain index's ends
    with the document key)."""
    store = client._executor._store("app", bucket)
    prefix = b"I" + bytes([index])
    with store.kv.read() as txn:
        cursor = txn.cursor()
        keys = []
        if cursor.set_range(prefix):
            for key in cursor.iternext(values=False):
                if not key.startswith(prefix):
                    break
                keys.append(decode_keys(key[len(prefix):]))
    return keys


def test_a_thousand_element_array_is_indexed_and_found_by_each_element(client):
    b = client["app"].create_bucket("B", type="hash", indices=["Tags", "Ns"])
    b.batch_insert([{"_id_": "big", "Tags": TAGS, "Ns": list(range(1000))},
                    {"_id_": "small", "Tags": ["tag-0007", "other"], "Ns": 7}])
    assert len(entries(client)) == 1000 + 2 and len(entries(client, index=1)) == 1000 + 1
    for i, tag in enumerate(TAGS):
        got = b.search({"Tags": tag})
        assert got.index_used == "Tags_1" and ids(got) == (["big", "small"] if i == 7 else ["big"]), tag
        assert ids(b.search({"Ns": i})) == ids(got), i
    assert b.search({"Tags": "tag-1000"}) == [] and b.search({"Ns": 1000}) == []
    b.update({"_id_": "big"}, {"$pull": {"Tags": "tag-0500"}})  # entries follow the array's changes
    assert b.search({"Tags": "tag-0500"}) == [] and ids(b.search({"Tags": "tag-0501"})) == ["big"]
    b.delete({"_id_": "big"})
    assert entries(client) == [["other", "small"], ["tag-0007", "small"]]


def test_the_whole_array_is_no_entry_and_an_equality_on_it_finds_the_document(client):
    b = client["app"].create_bucket("B", type="hash", indices=["Tags"])
    b.batch_insert([
        {"_id_": 1, "Tags": ["a", "b", "a"]},
        {"_id_": 2, "Tags": [["a", "b"], "c"]},  # holds the array as an element
        {"_id_": 3, "Tags": ["b", "a"]},
        {"_id_": 4, "Tags": ["a", "b", "c"]},
        {"_id_": 5, "Tags": "a"},
        {"_id_": 6, "Tags": TAGS},
    ])
    assert sorted(e for e in entries(client) if e[-1] == 1) == [["a", 1], ["b", 1]]  # distinct elements only
    for value, expected in ((["a", "b", "a"], [1]), (["a", "b"], [2]), (["b", "a"], [3]), (["c"], []),
                            (TAGS, [6]), (TAGS[::-1], []), (TAGS[:999], []), (["a"], [])):
        got = b.search({"Tags": value}, explain=True)
        assert got.index_used == "Tags_1" and ids(got) == expected == ids(b.find({"Tags": value})), value
        assert got.explain["docs_examined"] <= 5  # read through the index, checked against the filter
    assert ids(b.search({"Tags": {"$eq": TAGS}, "Other": None})) == [6]


def test_an_empty_array_keeps_one_entry_and_search_finds_it_as_find_does(client):
    b = client["app"].create_bucket("B", type="hash", indices=["Tags", {"fields": ["K", "Tags"]}])
    b.batch_insert([
        {"_id_": 1, "K": 1, "Tags": []},
        {"_id_": 2, "K": 1, "Tags": [[]]},  # an element that is itself []
        {"_id_": 3, "K": 1, "Tags": [[], "x", []]},
        {"_id_": 4, "K": 2, "Tags": "x"},
        {"_id_": 5, "K": 1},
        {"_id_": 6, "K": 1, "Tags": [[[]]]},
    ])
    assert sorted(entries(client), key=repr) == sorted(
        [[[], 1], [[], 2], [[], 3], ["x", 3], ["x", 4], [None, 5], [[[]], 6]], key=repr)
    assert sorted(entries(client, index=1), key=repr) == sorted(
        [[1, [], 1], [1, [], 2], [1, [], 3], [1, "x", 3], [2, "x", 4], [1, None, 5], [1, [[]], 6]], key=repr)
    for f in ({"Tags": []}, {"Tags": [[]]}, {"Tags": [[], "x", []]}, {"Tags": "x"}, {"Tags": None},
              {"K": 1, "Tags": []}, {"K": 1, "Tags": [[]]}, {"K": 2, "Tags": "x"}, {"Tags": {"$size": 0}}):
        got = b.search(f)
        assert got.index_used != "none — full scan" or "$size" in repr(f)
        assert ids(got) == ids(b.find(f)), f
    assert ids(b.search({"Tags": []})) == [1, 2, 3]


def test_a_compound_index_has_one_entry_per_element_of_its_array_field(client):
    b = client["app"].create_bucket("B", type="hash", indices=[{"fields": ["C", "Tags"]}])
    b.batch_insert([{"_id_": "big", "C": "c1", "Tags": TAGS}, {"_id_": "two", "C": "c1", "Tags": ["x", ["x"]]},
                    {"_id_": "arr", "C": ["c1", "c2"], "Tags": "x"}])
    assert sorted((e for e in entries(client) if e[-1] != "big"), key=repr) == sorted(
        [["c1", "x", "two"], ["c1", ["x"], "two"], ["c1", "x", "arr"], ["c2", "x", "arr"]], key=repr)
    for f in ({"C": "c1", "Tags": "tag-0999"}, {"C": "c1", "Tags": TAGS}, {"C": "c1", "Tags": ["x"]},
              {"C": ["c1", "c2"], "Tags": "x"}, {"C": ["c1", "c2"]}, {"C": "c2"}, {"C": ["c1"], "Tags": ["x"]},
              {"C": "c1", "Tags": ["x", ["x"]]}):
        got = b.search(f)
        assert got.index_used == "C_1_Tags_1" and ids(got) == ids(b.find(f)), f
    with pytest.raises(errors.BadValueError, match="more than one field"):  # the one-array-field rule stays
        b.insert({"_id_": "no", "C": ["c1"], "Tags": ["x"]})


def test_a_filter_pinning_many_arrays_reads_a_bounded_number_of_prefixes(client):
    fields = [f"F{i}" for i in range(8)]
    b = client["app"].create_bucket("B", type="hash", indices=[{"fields": fields}])
    b.batch_insert([{"_id_": i, **{f: (["a", i % 2] if f == fields[i % 8] else "a") for f in fields}}
                    for i in range(16)])
    store = client._executor._store("app", "B")
    for pinned in (["a", 0], ["a", 1], ["a"], "a"):
        f = {name: pinned if name != fields[3] else ["a", 1] for name in fields}
        p = plan(f, store.indexes.indexes)
        assert len(p.prefixes) <= MAX_PREFIXES and p.covered >= 1
        got = b.search(f)
        assert got.index_used == "F0_1_F1_1_F2_1_F3_1_F4_1_F5_1_F6_1_F7_1" and ids(got) == ids(b.find(f)), f
    assert len(plan({"F0": ["a"], "F1": ["a"]}, store.indexes.indexes).prefixes) == 4


def test_a_tuple_is_indexed_as_the_array_it_is_stored_as(client):
    b = client["app"].create_bucket("B", type="hash", indices=[{"field": "Tags", "unique": True}])
    b.insert({"_id_": 1, "Tags": ("x", "y")})
    assert ids(b.search({"Tags": "y"})) == [1] and ids(b.search({"Tags": ("x", "y")})) == [1]
    b.delete({"_id_": 1})  # the stored document holds a list: the same entries go
    assert entries(client) == []  # (a unique entry's key is its values alone)
    b.insert({"_id_": 2, "Tags": [("x", "y")]})
    assert entries(client) == [[["x", "y"]]]


def test_each_element_is_bounded_not_the_array(client):
    b = client["app"].create_bucket("B", type="hash", indices=["Tags"])
    b.insert({"_id_": 1, "Tags": ["y" * 400] * 50})  # 20 KB of array; each element fits
    with pytest.raises(errors.BadValueError, match=r"too long to index in 'Tags_1' \(6\d\d bytes"):
        b.insert({"_id_": 2, "Tags": ["short", "z" * 600]})
    assert b.get(2) is None and ids(b.search({"Tags": "short"})) == []


def test_unique_elements_conflict_across_documents_never_within_one(client):
    b = client["app"].create_bucket("B", type="hash", indices=[{"field": "Tags", "unique": True}])
    b.insert({"_id_": "a", "Tags": TAGS + TAGS[:10]})  # its own repeated elements are one value
    with pytest.raises(errors.DuplicateKeyError, match='Tags = "tag-0999" is already used by document "a"') as e:
        b.insert({"_id_": "b", "Tags": [f"b-{i}" for i in range(100)] + ["tag-0999"]})
    assert e.value.holder == "a" and b.get("b") is None
    b.insert({"_id_": "c", "Tags": [TAGS[:2]]})  # an element that is an array: not the elements of a's array
    b.insert({"_id_": "d", "Tags": []})
    with pytest.raises(errors.DuplicateKeyError, match=r"Tags = \[\] is already used by document \"d\""):
        b.insert({"_id_": "e", "Tags": []})  # both would hold the value []
    with pytest.raises(errors.DuplicateKeyError, match='already used by document "d"'):
        b.insert({"_id_": "e", "Tags": [[]]})  # holds [] as an element
    b.update({"_id_": "a"}, {"$pull": {"Tags": "tag-0999"}})  # leaving one element frees it
    b.insert({"_id_": "b", "Tags": ["tag-0999"]})
    b.put({"_id_": "a", "Tags": TAGS[:500]})  # put keeps a's own values
    assert ids(b.search({"Tags": "tag-0999"})) == ["b"] and ids(b.search({"Tags": TAGS[:2]})) == ["c"]


def test_a_conflicted_unique_index_hands_an_element_to_its_claimant(client):
    b = client["app"].create_bucket("B", type="hash", indices=[{"field": "Tags", "unique": True}])
    b.insert({"_id_": "u1", "Tags": TAGS})
    got = b.load([{"_id_": "u2", "Tags": ["tag-0003", *(f"u2-{i}" for i in range(99))]}])
    assert got["conflicts"][0]["documents"] == ["u1", "u2"] and got["conflicts"][0]["values"] == {"Tags": "tag-0003"}
    b.update({"_id_": "u1"}, {"$set": {"Tags": ["gone"]}})  # the holder leaves; u2 still holds tag-0003
    with pytest.raises(errors.DuplicateKeyError, match='already used by document "u2"'):
        b.insert({"_id_": "u3", "Tags": ["tag-0003"]})
    b.insert({"_id_": "u3", "Tags": ["tag-0004"]})  # u1's other elements are free


def test_an_array_of_dates_in_a_ttl_index_never_expires(tmp_path):
    with hoarddb.open(tmp_path, ttl_sweep_seconds=0) as c:
        b = c["app"].create_bucket("S", type="hash", indices=[{"field": "At", "expire_after_seconds": 60}])
        old = datetime.datetime(2001, 1, 1, tzinfo=datetime.timezone.utc)
        b.batch_insert([{"_id_": "dates", "At": [old + datetime.timedelta(days=i) for i in range(100)]},
                        {"_id_": "one", "At": [old]}, {"_id_": "empty", "At": []}, {"_id_": "gone", "At": old}])
        assert c.sweep_ttl()["expired"] == 1
        assert ids(b.find()) == ["dates", "empty", "one"]


def test_an_index_written_by_the_previous_format_is_rebuilt_at_open(tmp_path, caplog):
    # What format 2 left on disk: each array's distinct elements and the whole array as entries.
    with hoarddb.open(tmp_path) as c:
        b = c["app"].create_bucket("Users", type="hash", indices=[{"field": "Tags", "unique": True}, "Tags2"])
        b.batch_insert([{"_id_": "u1", "Tags": ["a", "b"], "Tags2": ["a", "b"]},
                        {"_id_": "u2", "Tags": [], "Tags2": []}, {"_id_": "u3", "Tags": "c", "Tags2": "c"}])
    set_index_format(tmp_path, 2)
    env = raw_env(tmp_path)
    with env.begin(write=True) as txn:
        txn.put(b"I\x00" + encode_key(["a", "b"]), encode_key("u1"))  # unique: value -> document key
        txn.put(b"I\x01" + encode_key(["a", "b"]) + encode_key("u1"), b"")
    env.close()
    with caplog.at_level(logging.WARNING, logger="hoarddb.indexes"):
        with hoarddb.open(tmp_path) as c:
            b = c["app"].Users
            assert [ix["state"] for ix in wait_built(b)] == ["ready", "ready"]
            assert sorted(entries(c, "Users", 1), key=repr) == sorted(
                [["a", "u1"], ["b", "u1"], [[], "u2"], ["c", "u3"]], key=repr)  # the whole array's entry is gone
            b.update({"_id_": "u1"}, {"$set": {"Tags": "z", "Tags2": "z"}})
            b.insert({"_id_": "u4", "Tags": [["a", "b"]], "Tags2": [["a", "b"]]})  # no stale entry holds ["a", "b"]
            for f in ({"Tags": ["a", "b"]}, {"Tags2": ["a", "b"]}, {"Tags": []}, {"Tags2": "a"}):
                assert ids(b.search(f)) == ids(b.find(f)) and b.search(f).index_used != "none — full scan", f
            assert ids(b.search({"Tags2": ["a", "b"]})) == ["u4"]
    assert "rebuilding index Tags_1" in caplog.text and "rebuilding index Tags2_1" in caplog.text
    cat = Catalog(tmp_path)
    assert [ix["format"] for ix in cat.bucket("app", "Users")["indexes"]] == [FORMAT, FORMAT]  # once
    cat.close()



def test_a_rebuild_reads_and_clears_a_big_bucket_in_batches(tmp_path):
    """2,500 documents of 5 elements: the rebuild reads the documents 1,000 at a time and
    deletes the 12,500 old entries 10,000 at a time, each batch with a fresh cursor, writing
    between them. Every document and entry must come out once, stale entries gone."""
    n = 2500
    with hoarddb.open(tmp_path, sync=False) as c:
        b = c["app"].create_bucket("Users", type="hash", indices=["Tags"])
        b.batch_insert([{"_id_": f"u{i:05d}", "Tags": [f"t{(i + k) % 700}" for k in range(5)]} for i in range(n)])
    set_index_format(tmp_path, 2)
    env = raw_env(tmp_path)
    with env.begin(write=True) as txn:  # stale entries the rebuild must delete, past the first batch too
        for i in range(0, n, 100):
            txn.put(b"I\x00" + encode_key(f"zz-stale{i}") + encode_key(f"u{i:05d}"), b"")
    env.close()
    with hoarddb.open(tmp_path) as c:
        b = c["app"].Users
        wait_built(b)
        got = entries(c, "Users")
        assert len(got) == 5 * n and not any(str(e[0]).startswith("zz-stale") for e in got)
        assert sorted(got) == sorted([f"t{(i + k) % 700}", f"u{i:05d}"] for i in range(n) for k in range(5))
        for tag in ("t0", "t350", "t699"):
            assert ids(b.search({"Tags": tag})) == ids(b.find({"Tags": tag})) != []


# -- search finds what find finds, for arrays of every shape ---------------------------------

scalars = st.one_of(st.integers(-2, 2), st.sampled_from([1.0, -0.0, 2.5]), st.sampled_from(["a", "b"]), st.none())
leaves = st.one_of(scalars, st.just({"x": 1}), st.just({"x": [1]}))
nested = st.recursive(leaves, lambda inner: st.lists(inner, max_size=3), max_leaves=6)
arrays = st.lists(nested, max_size=4)
field_values = st.one_of(scalars, arrays)
documents = st.fixed_dictionaries({}, optional={"A": field_values, "B": field_values, "C": scalars})
queried = st.one_of(nested, arrays, st.builds(lambda v: {"$eq": v}, arrays))
filters = st.dictionaries(st.sampled_from(["A", "B", "C"]), queried, min_size=1, max_size=3)


@given(st.lists(documents, max_size=20), st.lists(filters, min_size=1, max_size=6))
def test_search_and_find_agree_on_arrays(tmp_path_factory, docs, fs):
    with hoarddb.open(tmp_path_factory.mktemp("a")) as c:
        b = c["app"].create_bucket("B", type="hash", indices=[{"fields": ["C", "A"]}, "B", {"fields": ["A", "B"]}])
        for i, d in enumerate(docs):
            try:
                b.insert(dict(d, _id_=i))
            except errors.BadValueError:
                pass  # arrays in A and B: refused by the compound index (A, B)
        for f in fs:
            got = b.search(f)
            assert got == list(b.find(f)), f
        for d in docs:  # the arrays the documents hold, and their elements, as filters
            for name in ("A", "B"):
                if isinstance(d.get(name), list):
                    f = {name: d[name]}
                    assert b.search(f) == list(b.find(f)) and b.search(f).index_used != "none — full scan", f
                    for element in d[name]:
                        f = {name: element}
                        assert b.search(f) == list(b.find(f)), f
