"""Sparse and partial indexes (indexes.md, "Sparse and partial indexes"): which documents have entries, what
unique means for them, when search may use them and what explain says when it may not, ingest, dump and restore."""

from __future__ import annotations

import json

import bson
import pytest
from hypothesis import given, settings, strategies as st

import hoarddb
from hoarddb import errors
from hoarddb.hql import parser
from hoarddb.indexes.maintenance import Index
from hoarddb.tools import dump, ingest, restore
from hoarddb.tools.check import check

FULL_SCAN = "none — full scan"


def summaries(bucket):
    return [ix["summary"] for ix in bucket.stats()["indexes"]]


def ids(reply):
    return [d["_id_"] for d in reply]


def reason(reply, name):
    return next(c["reason"] for c in reply.explain["considered"] if c["index"] == name)


# -- declaring ---------------------------------------------------------------------------


def test_sparse_and_partial_are_declared_and_described(db):
    b = db.create_bucket("Users", type="hash", indices=[
        {"field": "Email", "unique": True, "sparse": True},
        {"field": "Status", "partialFilterExpression": {"Total": {"$gt": 10}}},
    ])
    assert summaries(b) == ["Email_1 (unique, sparse)", "Status_1 (partial {Total: {$gt: 10}})"]
    described = b.describe()["indexes"]
    assert described[0]["sparse"] is True and "partialFilterExpression" not in described[0]
    assert described[1]["partialFilterExpression"] == {"Total": {"$gt": 10}}


ACCEPTED = "a partialFilterExpression accepts equality"


@pytest.mark.parametrize("entry, why", [
    ({"field": "A", "sparse": "yes"}, "sparse is true or false, got 'yes'"),
    ({"field": "A", "sparse": True, "partialFilterExpression": {"A": 1}}, "cannot be combined"),
    ({"field": "A", "partialFilterExpression": {}}, "non-empty document"),
    ({"field": "A", "partialFilterExpression": [1]}, "non-empty document"),
    ({"field": "A", "partialFilterExpression": {"$or": [{"A": 1}, {"B": 2}]}}, "$or is not accepted"),
    ({"field": "A", "partialFilterExpression": {"A": {"$in": [1, 2]}}}, "$in is not accepted"),
    ({"field": "A", "partialFilterExpression": {"A": {"$ne": 1}}}, "$ne is not accepted"),
    ({"field": "A", "partialFilterExpression": {"A": {"$exists": False}}}, "$exists is accepted only as $exists: true"),
    ({"field": "A", "partialFilterExpression": {"$and": [{"$and": [{"A": 1}]}]}}, "$and is not accepted inside $and"),
    ({"field": "A", "partialFilterExpression": {"A": bson.regex.Regex("^x")}}, "regular expression is not accepted"),
    ({"field": "A", "partialFilterExpression": {"A": {"$gt": 1, "$bogus": 2}}}, "$bogus is not accepted"),
])
def test_refusals_name_what_is_accepted(db, entry, why):
    with pytest.raises((errors.BadValueError, errors.UnknownOptionError)) as e:
        db.create_bucket("Users", type="hash", indices=[entry])
    assert why in e.value.message
    if "not accepted" in why:
        assert ACCEPTED in e.value.message and "$and at the top level" in e.value.message
    assert "app" not in db._client.databases()


def test_the_accepted_keys_name_the_new_options(db):
    with pytest.raises(errors.UnknownOptionError) as e:
        db.create_bucket("Users", type="hash", indices=[{"field": "Email", "spares": True}])
    assert "sparse" in e.value.message and "partialFilterExpression" in e.value.message


def test_a_sparse_or_partial_index_has_a_newer_format_an_older_version_cannot_keep(tmp_path):
    with hoarddb.open(tmp_path / "d") as c:
        c["app"].create_bucket("U", type="hash", indices=["A", {"field": "B", "sparse": True},
                                                          {"field": "C", "partialFilterExpression": {"C": 1}}])
    with hoarddb.open(tmp_path / "d") as c:
        b = c["app"].U
        assert [ix["state"] for ix in b.describe()["indexes"]] == ["ready"] * 3
        b.insert({"_id_": 1, "B": 2, "C": 1})
        assert ids(b.search({"B": 2})) == [1] and b.search({"B": 2}).index_used == "B_1"
    # what hoardDB does with a declaration newer than it knows: keeps it unchanged, unreadable
    assert Index({"id": 0, "name": "X_1", "fields": ["X"], "format": 99}).state == "unreadable"
    assert Index({"id": 0, "name": "X_1", "fields": ["X"], "sparse": True, "format": 3}).state == "building"


# -- which documents have entries, and unique ----------------------------------------------


def test_a_unique_sparse_index_allows_many_documents_without_the_field(db):
    b = db.create_bucket("Users", type="hash", indices=[{"field": "Email", "unique": True, "sparse": True}])
    b.batch_insert([{"_id_": i, "Name": f"n{i}"} for i in range(5)])
    b.insert({"_id_": "a", "Email": "a@x"})
    with pytest.raises(errors.DuplicateKeyError):
        b.insert({"_id_": "b", "Email": "a@x"})
    # null is a value: a document holding Email: null has an entry, so a second one is refused
    b.insert({"_id_": "n1", "Email": None})
    with pytest.raises(errors.DuplicateKeyError) as e:
        b.insert({"_id_": "n2", "Email": None})
    assert "Email = null" in e.value.message and '"n1"' in e.value.message
    # dropping the field leaves the index; taking a value in use is refused
    b.update({"_id_": "a"}, {"$unset": {"Email": ""}})
    b.insert({"_id_": "c", "Email": "a@x"})
    with pytest.raises(errors.DuplicateKeyError):
        b.update({"_id_": 0}, {"$set": {"Email": "a@x"}})


def test_a_compound_sparse_index_holds_documents_with_any_of_its_fields(db):
    b = db.create_bucket("B", type="hash", indices=[{"fields": ["A", "B"], "unique": True, "sparse": True}])
    b.batch_insert([{"_id_": 1}, {"_id_": 2}, {"_id_": 3, "A": 1}])
    with pytest.raises(errors.DuplicateKeyError):  # (1, null) again: the missing B is null
        b.insert({"_id_": 4, "A": 1})
    b.insert({"_id_": 5, "B": 1})
    with pytest.raises(errors.DuplicateKeyError):
        b.insert({"_id_": 6, "B": 1, "C": 0})


def test_a_unique_partial_index_holds_its_rule_only_among_the_documents_it_covers(db):
    b = db.create_bucket("Users", type="hash", indices=[
        {"field": "Email", "unique": True, "partialFilterExpression": {"Active": True}}])
    b.batch_insert([{"_id_": 1, "Email": "a@x", "Active": False}, {"_id_": 2, "Email": "a@x"},
                    {"_id_": 3, "Email": "a@x", "Active": True}])
    with pytest.raises(errors.DuplicateKeyError) as e:
        b.insert({"_id_": 4, "Email": "a@x", "Active": True})
    assert "document 3" in e.value.message
    # an update moving a document into the index is checked like an insert; nothing is written
    with pytest.raises(errors.DuplicateKeyError):
        b.update({"_id_": 1}, {"$set": {"Active": True}})
    assert b.get(1)["Active"] is False
    # the holder leaving the index frees the value
    b.update({"_id_": 3}, {"$set": {"Active": False}})
    b.update({"_id_": 1}, {"$set": {"Active": True}})
    assert ids(b.search({"Email": "a@x", "Active": True})) == [1]


def test_deleted_and_moved_documents_leave_no_entry_behind(tmp_path):
    with hoarddb.open(tmp_path / "d") as c:
        b = c["app"].create_bucket("B", type="hash", indices=[
            {"field": "S", "partialFilterExpression": {"N": {"$gte": 5}}}, {"field": "T", "sparse": True}])
        b.batch_insert([{"_id_": i, "S": i % 2, "N": i, **({"T": i % 3} if i % 4 else {})} for i in range(20)])
        b.update({"N": {"$lt": 10}}, {"$inc": {"N": 3}})
        b.update({"_id_": 7}, {"$unset": {"T": ""}})
        b.delete({"N": {"$gt": 18}})
        for f in ({"S": 1, "N": {"$gte": 5}}, {"S": 0, "N": {"$gt": 9}}, {"T": 1}, {"T": 2, "S": 1}):
            got = b.search(f)
            assert got.index_used != FULL_SCAN, f
            assert ids(got) == ids(b.find(f)), f
    report = check(tmp_path / "d")  # every entry points to a document that has it, and each has its own
    assert report.ok, report


# -- search, and why an index is not used ---------------------------------------------------


@pytest.fixture
def tickets(db):
    b = db.create_bucket("Tickets", type="hash", indices=[
        {"field": "Email", "sparse": True},
        {"field": "Status", "partialFilterExpression": {"Total": {"$gt": 10}, "Kind": "bug"}},
    ])
    b.batch_insert([{"_id_": i, "Status": ["open", "closed"][i % 2], "Total": i, "Kind": ["bug", "task"][i % 3 > 0],
                     **({"Email": f"u{i % 4}@x"} if i % 5 else {})} for i in range(40)])
    b.insert({"_id_": "nul", "Email": None, "Status": "open", "Total": 50, "Kind": "bug"})
    return b


def test_a_sparse_index_serves_a_filter_that_shows_the_field_is_there(tickets):
    for f in ({"Email": "u1@x"}, {"Email": "u1@x", "Total": {"$gt": 3}}):
        got = tickets.search(f)
        assert got.index_used == "Email_1" and ids(got) == ids(tickets.find(f))
    # {Email: null} also matches the documents without Email, which have no entry
    got = tickets.search({"Email": None}, explain=True)
    assert got.index_used == FULL_SCAN and ids(got) == ids(tickets.find({"Email": None}))
    assert "it is sparse" in reason(got, "Email_1") and "{Email: {$exists: true}}" in reason(got, "Email_1")
    got = tickets.search({"Email": None, "$and": [{"Email": {"$exists": True}}]})
    assert got.index_used == "Email_1" and ids(got) == ["nul"]


def test_a_partial_index_serves_only_a_filter_that_implies_its_expression(tickets):
    served = [
        {"Status": "open", "Total": {"$gt": 10}, "Kind": "bug"},
        {"Status": "open", "Total": {"$gte": 11}, "Kind": "bug"},
        {"Status": "open", "Total": 30, "Kind": {"$eq": "bug"}},
        {"Status": "open", "$and": [{"Total": {"$gt": 20}}, {"Kind": "bug"}]},
    ]
    for f in served:
        got = tickets.search(f)
        assert got.index_used == "Status_1", f
        assert ids(got) == ids(tickets.find(f)), f
    not_served = [
        {"Status": "open"},
        {"Status": "open", "Total": {"$gt": 9}, "Kind": "bug"},    # 10 is not > 10
        {"Status": "open", "Total": {"$gte": 10}, "Kind": "bug"},
        {"Status": "open", "Total": 10, "Kind": "bug"},
        {"Status": "open", "Total": {"$gt": "10"}, "Kind": "bug"},  # another type
        {"Status": "open", "Total": {"$gt": 10}},
        {"Status": "open", "$or": [{"Total": {"$gt": 10}, "Kind": "bug"}]},
    ]
    for f in not_served:
        got = tickets.search(f, explain=True)
        assert got.index_used == FULL_SCAN, f
        assert ids(got) == ids(tickets.find(f)), f
        why = reason(got, "Status_1")
        assert "it is partial" in why and "{Total: {$gt: 10}, Kind: \"bug\"}" in why, why


# -- search gives find's answer, whatever the filter --------------------------------------

VALUES = st.one_of(st.none(), st.integers(-3, 3), st.sampled_from(["a", "b"]), st.lists(st.integers(-3, 3), max_size=3))
DOCS = st.lists(st.fixed_dictionaries({}, optional={"A": VALUES, "B": VALUES, "C": VALUES}), max_size=25)
CONDITION = st.one_of(
    VALUES,
    st.builds(lambda op, v: {op: v}, st.sampled_from(["$gt", "$gte", "$lt", "$lte", "$eq", "$ne"]),
              st.one_of(st.none(), st.integers(-3, 3), st.sampled_from(["a", "b"]))),
    st.just({"$exists": True}), st.just({"$exists": False}),
)
FILTERS = st.dictionaries(st.sampled_from(["A", "B", "C"]), CONDITION, max_size=3)
PARTIALS = st.sampled_from([{"B": {"$gt": 0}}, {"B": {"$exists": True}}, {"C": "a"},
                            {"$and": [{"B": {"$gte": -1}}, {"C": {"$lte": "b"}}]}, {"A": {"$lt": 2}}])


@settings(max_examples=40)
@given(docs=DOCS, filters=st.lists(FILTERS, min_size=1, max_size=6), partial=PARTIALS,
       unique_sparse=st.booleans())
def test_search_with_sparse_and_partial_indexes_answers_as_find(tmp_path_factory, docs, filters, partial,
                                                                unique_sparse):
    with hoarddb.open(tmp_path_factory.mktemp("d")) as c:
        b = c["app"].create_bucket("B", type="hash", indices=[
            {"field": "A", "sparse": True}, {"fields": ["B", "A"], "partialFilterExpression": partial},
            {"fields": ["C", "B"], "sparse": True, "unique": unique_sparse}])
        for i, d in enumerate(docs):
            try:
                b.insert({"_id_": i, **d})
            except (errors.DuplicateKeyError, errors.BadValueError):  # a duplicate, or arrays in two fields
                pass
        for f in filters:
            assert ids(b.search(f)) == ids(b.find(f)), f
        b.update({"A": {"$exists": True}}, {"$inc": {"n": 1}})
        b.delete({"B": 1})
        for f in filters:
            assert ids(b.search(f)) == ids(b.find(f)), f


# -- dump, restore, ingest -------------------------------------------------------------------


def test_dump_and_restore_keep_sparse_and_partial(client, tmp_path):
    b = client["app"].create_bucket("U", type="hash", indices=[
        {"field": "Email", "unique": True, "sparse": True},
        {"field": "S", "unique": True, "partialFilterExpression": {"On": True}}])
    b.batch_insert([{"_id_": 1}, {"_id_": 2}, {"_id_": 3, "S": 1}, {"_id_": 4, "S": 1, "On": True}])
    assert dump(client, "app", tmp_path / "out").ok
    assert restore(client, tmp_path / "out" / "app", db="app2").ok
    r = client["app2"].U
    assert summaries(r) == summaries(b) == ["Email_1 (unique, sparse)", "S_1 (unique, partial {On: true})"]
    r.insert({"_id_": 5})
    with pytest.raises(errors.DuplicateKeyError):
        r.insert({"_id_": 6, "S": 1, "On": True})


def test_ingest_declares_mongodumps_sparse_and_partial_indexes(client, tmp_path):
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "users.bson").write_bytes(b"".join(bson.encode({"_id": i, "n": i}) for i in range(3)))
    (folder / "users.metadata.json").write_text(json.dumps({"indexes": [
        {"v": 2, "key": {"_id": 1}, "name": "_id_"},
        {"v": 2, "key": {"email": 1}, "name": "email_1", "unique": True, "sparse": True},
        {"v": 2, "key": {"status": 1}, "name": "status_1",
         "partialFilterExpression": {"total": {"$gt": {"$numberInt": "10"}}, "kind": "bug"}},
        {"v": 2, "key": {"other": 1}, "name": "other_1", "partialFilterExpression": {"x": {"$in": [1, 2]}}},
    ]}))
    report = ingest(client, folder, into_db="app")
    rep = report.buckets[0]
    assert rep.statement == (
        'create bucket users { type: hash, indices: [{field: "email", sparse: true, unique: true}, '
        '{field: "status", partialFilterExpression: {total: {$gt: 10}, kind: "bug"}}] }')
    notes = " ".join(rep.notes)
    assert "'other_1'" in notes and "$in is not accepted" in notes and "no hoardDB equivalent" not in notes
    client["app"].drop_bucket("users")
    client.execute(parser.parse_statement(rep.statement).to_request("app"))
    assert summaries(client["app"].users) == ["email_1 (unique, sparse)",
                                              'status_1 (partial {total: {$gt: 10}, kind: "bug"})']


def _filters_know_type() -> bool:
    from hoarddb.values.filter import compile_filter
    try:
        compile_filter({"a": {"$type": "string"}})
    except errors.BadValueError:
        return False
    return True


@pytest.mark.skipif(not _filters_know_type(), reason="filters do not know $type yet")
def test_a_type_condition_in_a_partial_index(db):
    b = db.create_bucket("B", type="hash", indices=[
        {"field": "K", "partialFilterExpression": {"V": {"$type": "string"}}}])
    b.batch_insert([{"_id_": 1, "K": 1, "V": "s"}, {"_id_": 2, "K": 1, "V": 5}, {"_id_": 3, "K": 1}])
    for f, used in (({"K": 1, "V": {"$type": "string"}}, True), ({"K": 1, "V": "s"}, True),
                    ({"K": 1, "V": 5}, False), ({"K": 1}, False)):
        got = b.search(f)
        assert (got.index_used == "K_1") == used, f
        assert ids(got) == ids(b.find(f)), f
