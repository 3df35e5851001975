"""What every store type keeps, as a bucket (L1), a store field (L2) and a store field of an
element of a store field (L3): an empty start, and the verbs it does not have refused
(VERB_NOT_SUPPORTED) with nothing written; then what only store fields have: the document (or
element) first, the cascade on delete, the L2 limits at every level, and a refused L4.
"""

from __future__ import annotations

import functools

import pytest

import hoarddb
from hoarddb import operations

from .places import refused

TYPES = operations.STORE_TYPES
DBID = "0192a3b4-c5d6-7890-abcd-ef12345678a1"

#: Arguments each verb binds, so that a call reaches the store (and its refusal is the type's).
ARGS = {
    "push": ({"priority": 1, "n": 1},), "batch_push": ([{"priority": 1}],), "pop": (), "peek": (), "length": (),
    "list": (), "insert": ({"_id_": "x"},), "batch_insert": ([{"_id_": "x"}],), "put": ({"_id_": "x"},),
    "batch_put": ([{"_id_": "x"}],), "get": ("x",), "exists": ("x",), "find": ({},), "search": ({},), "count": ({},),
    "update": ({"_id_": "x"}, {"$set": {"a": 1}}), "delete": ("x",), "range": ({},), "first": (), "last": (),
    "export": (), "load": ([],), "info": (DBID,), "stream": (DBID,), "claim": (), "ack": ("1.2",),
    "release": ("1.2",), "extend": ("1.2", 5), "distinct": ("a",), "aggregate": ([],),
    "find_and_modify": ({"_id_": "x"}, {"$set": {"a": 1}}), "window": ("byHour",),
}
FIELD_ARGS = {**ARGS, "put": ("x", {"a": 1})}

#: The advice a store field's refusal gives, by verb (docs/user/store-fields.md).
ADVICE = {"update": "put under the same key", "insert": "own verbs", "batch_insert": "own verbs",
          "find": "own verbs", "search": "own verbs", "count": "own verbs"}


def fill(store, n: int = 2) -> None:
    """``n`` elements in a store of any type."""
    for i in range(n):
        if store.type in ("fifo", "lifo", "heap"):
            store.push({"priority": i, "n": i})
        elif store.type == "blob":
            store.put(bytes([i]) * 10)
        else:
            store.put_key(f"k{i}", {"n": i})


@pytest.mark.parametrize("type_", TYPES)
def test_a_new_store_is_empty(place, type_):
    s = place.make(type_)
    assert s.length() == 0 and s.list() == [] and s.list(limit=1000) == []
    if type_ in ("fifo", "lifo", "heap"):
        assert s.pop() is None and s.peek() is None
    elif type_ == "blob":
        refused("NOT_FOUND", lambda: s.info(DBID))
    else:
        assert s.get("anything") is None


def test_the_refusal_test_knows_every_verb_of_the_table():
    missing = sorted({op.name for op in operations.VERBS.values()} - set(ARGS))
    assert not missing, f"give ARGS (in this file) arguments for the verb(s) {missing}, so that every type lacking " \
                        "them is held to refuse them"


def test_every_type_has_length_and_list_as_a_bucket_and_as_a_field():
    for type_ in TYPES:
        assert {"length", "list"} <= set(operations.verbs_for(type_)) & set(operations.field_verbs_for(type_))


@pytest.mark.parametrize("type_", TYPES)
def test_a_verb_the_type_does_not_have_is_refused_and_writes_nothing(place, type_):
    s = place.make(type_)
    fill(s)
    if s.is_field:
        has = set(operations.field_verbs_for(type_))
        calls = {name: FIELD_ARGS[name] for name in ARGS if name not in has}
    else:
        has = set(operations.verbs_for(type_))
        calls = {name: ARGS[name] for name in ARGS if name not in has}
    assert calls, "every type lacks some verb"
    for name, args in calls.items():
        error = refused("VERB_NOT_SUPPORTED", functools.partial(getattr(s, name), *args), repr(name))
        text = str(error)
        if not s.is_field:  # a bucket names the verbs it has
            assert all(verb in text for verb in has), f"{name}: {text}"
        elif name in ("get", "delete") and type_ in ("fifo", "lifo", "heap"):
            assert "no key" in text and "peek" in text and "pop" in text, text
        elif name == "range" and type_ == "btree":
            assert "list({after" in text, text
        elif name in ADVICE:
            assert ADVICE[name] in text, f"{name}: {text}"
        else:
            assert "its verbs: " + ", ".join(sorted(has)) in text, f"{name}: {text}"
    assert s.length() == 2 and len(s.list()) == 2


# -- what only store fields have ----------------------------------------------------------------

@pytest.mark.parametrize("type_", TYPES)
def test_a_field_of_a_missing_document_is_not_found_and_a_dropped_bucket_is_gone(place, type_):
    s = place.make(type_)
    if not s.is_field:  # a bucket's counterpart: the bucket itself must exist
        assert s.database.drop_bucket("S") == {"dropped": "S"}
        refused("BUCKET_NOT_FOUND", lambda: s.length(), "S")
        return
    ghost = s.of("nobody")
    verbs = {"fifo": [lambda: ghost.push({"n": 1}), ghost.pop, ghost.peek],
             "lifo": [lambda: ghost.push({"n": 1}), ghost.pop, ghost.peek],
             "heap": [lambda: ghost.push({"priority": 1}), ghost.pop, ghost.peek],
             "hash": [lambda: ghost.put("k", {}), lambda: ghost.get("k"), lambda: ghost.delete("k")],
             "btree": [lambda: ghost.put("k", {}), lambda: ghost.get("k"), lambda: ghost.delete("k")],
             "blob": [lambda: ghost.put(b"x"), lambda: ghost.info(DBID), lambda: ghost.get(DBID)]}[type_]
    for call in verbs + [ghost.length, ghost.list]:
        refused("NOT_FOUND", call, *s.missing_owner_words)
    nope = s.holder["e1"].Nope if s.where == "nested" else s.owner["d1"].Nope
    refused("BAD_VALUE", lambda: nope.length(), "Nope", "S (" + type_ + ")")
    assert (s.holder or s.owner).get("nobody") is None


@pytest.mark.parametrize("type_", TYPES)
def test_deleting_the_document_deletes_its_store(field_place, type_):
    s = field_place.make(type_)
    fill(s, 3)
    files = sorted(p.name for p in s.files.iterdir()) if type_ == "blob" else []
    assert len(files) == (3 if type_ == "blob" else 0)
    assert s.delete_owner() == {"deleted": 1}
    refused("NOT_FOUND", s.length, "does not exist")
    s.recreate_owner()
    assert s.length() == 0 and s.list() == []  # a new document (element) starts with empty stores
    if type_ == "blob":
        assert not any((s.files / name).exists() for name in files)


@pytest.mark.parametrize("type_", TYPES)
def test_one_documents_store_is_not_anothers(field_place, type_):
    s = field_place.make(type_)
    s.add_owner("d2")
    other = s.of("d2")
    fill(s, 2)
    assert other.length() == 0 and other.list() == []
    assert s.length() == 2


@pytest.mark.parametrize("type_", TYPES)
def test_the_l2_hard_limit_refuses_a_field_write_past_it_and_a_bucket_has_none(tmp_path, type_):
    with hoarddb.open(tmp_path / "data", sync=False, bucket_limits={"l2_soft_limit": 2, "l2_hard_limit": 3}) as c:
        db = c["app"]
        bucket = db.create_bucket("B", type=type_)
        owner = db.create_bucket("Post", type="hash", store_fields=[{"name": "Comments", "type": type_}])
        owner.insert({"_id_": "p1"})
        field = owner["p1"].Comments

        def write(store, i):
            if type_ in ("fifo", "lifo", "heap"):
                return store.push({"priority": i})
            if type_ == "blob":
                return store.put(b"x")
            return store.put(f"k{i}", {}) if store is field else \
                (store.put({"_id_": f"k{i}"}) if type_ == "hash" else store.insert({"_id_": f"k{i}"}))

        for i in range(3):
            write(field, i)
            write(bucket, i)
        refused("L2_HARD_LIMIT", lambda: write(field, 3), '"Post.Comments" exceeded hard limit (3 entries)',
                "split into multiple L1 buckets")
        if type_ in ("fifo", "lifo", "heap"):
            refused("L2_HARD_LIMIT", lambda: field.batch_push([{"priority": 9}]))
        if type_ in ("hash", "btree"):
            assert field.put("k0", {"again": True}) == "k0"  # a put under a key it has adds nothing: allowed
        assert field.length() == 3
        write(bucket, 3)
        assert bucket.length() == 4


@pytest.mark.parametrize("type_", TYPES)
def test_deleting_the_document_deletes_every_level_of_its_tree(field_place, type_):
    """Deleting the top document takes its L2 stores and the L3 stores of their elements with it."""
    s = field_place.make(type_)
    fill(s, 2)
    files = sorted(p.name for p in s.files.iterdir()) if type_ == "blob" else []
    assert s.owner.delete("d1") == {"deleted": 1}
    s.owner.insert({"_id_": "d1", "Name": "again"})
    if s.where == "nested":
        refused("NOT_FOUND", s.length, "e1", "does not exist", "Put it first")
        s.recreate_owner()
    assert s.length() == 0 and s.list() == []
    if type_ == "blob":
        assert not any((s.files / name).exists() for name in files)


@pytest.mark.parametrize("type_", TYPES)
def test_an_element_answers_its_own_fields_and_names_its_stores(field_place, type_):
    s = field_place.make(type_)
    fill(s, 2)
    if s.where != "nested":
        assert s.owner.get("d1")["Name"] == "the owner"
        return
    assert s.holder.get("e1") == {"Name": "an element"}  # its own fields, never its stores
    listed = s.holder.list()
    assert listed == [{"key": "e1", "doc": {"Name": "an element"}}]


@pytest.mark.parametrize("type_", TYPES)
def test_a_store_past_the_maximum_depth_is_refused_with_the_advice(field_place, type_):
    """L1 to L3 by default: a fourth level is refused, saying to keep shallow and use an L1 bucket."""
    db = field_place.database()
    leaf = [{"name": "S", "type": type_}]
    refused("BAD_VALUE", lambda: db.create_bucket("Deep", type="hash", store_fields=[
        {"name": "A", "type": "hash", "store_fields": [{"name": "B", "type": "btree", "store_fields": leaf}]}]),
        "Deep.A.B.S", "L4", "L3", "L1 bucket", "shallow")
    refused("BAD_VALUE", lambda: db.create_bucket("Flat", type="hash", store_fields=[
        {"name": "A", "type": "fifo", "store_fields": leaf}]), "Flat.A", "hash or btree")
    db.create_bucket("Three", type="hash", store_fields=[{"name": "A", "type": "btree", "store_fields": leaf}])
    assert db.buckets() == ["Three"]  # nothing of a refused declaration was written


@pytest.mark.parametrize("type_", TYPES)
def test_the_hard_limit_names_a_deeper_store_by_its_dotted_address(tmp_path, type_):
    with hoarddb.open(tmp_path / "data", sync=False, bucket_limits={"l2_soft_limit": 2, "l2_hard_limit": 3}) as c:
        owner = c["app"].create_bucket("User", type="hash", store_fields=[
            {"name": "Friends", "type": "hash", "store_fields": [{"name": "Messages", "type": type_}]}])
        owner.insert({"_id_": "jane"})
        owner["jane"].Friends.put("bob", {})
        owner["jane"].Friends.put("eve", {})
        field, other = owner["jane"].Friends["bob"].Messages, owner["jane"].Friends["eve"].Messages

        def write(store, i):
            if type_ in ("fifo", "lifo", "heap"):
                return store.push({"priority": i})
            return store.put(b"x") if type_ == "blob" else store.put(f"k{i}", {})

        for i in range(3):
            write(field, i)
        error = refused("L2_HARD_LIMIT", lambda: write(field, 3),
                        'bucket "User.jane.Friends.bob.Messages" exceeded hard limit (3 entries)', "split into multiple L1")
        assert error.store == "User.jane.Friends.bob.Messages"
        assert field.length() == 3
        write(other, 0)  # each element's store has its own count
        assert other.length() == 1
