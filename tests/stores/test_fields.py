"""Store fields (case-study-property-sage.md): each document owns stores of any type."""

from __future__ import annotations

import datetime
import logging
import shutil
import tempfile

import hypothesis.strategies as st
import pytest
from bson.decimal128 import Decimal128
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import hoarddb
from hoarddb import errors

FIELDS = [{"name": n, "type": t} for n, t in [
    ("Expenses", "lifo"), ("ExpenseByID", "hash"), ("ExpenseDates", "btree"), ("Tickets", "heap"),
    ("Comments", "fifo"), ("Documents", "blob")]]


@pytest.fixture
def prop(db):
    b = db.create_bucket("Property", type="hash", store_fields=FIELDS)
    b.batch_insert([{"_id_": "p1", "Name": "One"}, {"_id_": "p2", "Name": "Two"}])
    return b


def test_one_documents_stores_are_not_anothers(prop):
    prop["p1"].Expenses.push({"Amount": 1})
    prop.doc("p2").Expenses.push({"Amount": 2})
    assert prop["p1"].Expenses.list() == [{"Amount": 1}]
    assert prop["p2"].Expenses.list() == [{"Amount": 2}]


def test_a_store_field_needs_its_document(prop):
    with pytest.raises(errors.NotFoundError, match="Insert the document first"):
        prop["nope"].Expenses.push({"Amount": 1})
    with pytest.raises(errors.NotFoundError):
        prop["nope"].ExpenseByID.get("x")


def test_get_and_find_return_the_documents_own_fields_only(prop, client):
    prop["p1"].Expenses.push({"Amount": 1})
    assert prop.get("p1") == {"_id_": "p1", "Name": "One"}
    assert prop.find({"_id_": "p1"}) == [{"_id_": "p1", "Name": "One"}]
    answer = client.execute({"op": "get", "db": "app", "bucket": "Property", "args": {"key": "p1"}})
    assert {"name": "Expenses", "type": "lifo", "length": 1} in answer["store_fields"]


def test_queue_verbs_and_orders(prop):
    lifo, fifo = prop["p1"].Expenses, prop["p1"].Comments
    for i in range(5):
        lifo.push({"n": i})
        fifo.push({"n": i})
    assert lifo.peek() == {"n": 4} and fifo.peek() == {"n": 0}
    assert [d["n"] for d in lifo.peek({"limit": 3})] == [4, 3, 2]
    assert [d["n"] for d in lifo.list()] == [0, 1, 2, 3, 4]  # storage order, oldest first
    assert [d["n"] for d in lifo.list(after=3)] == [3, 4]
    assert [d["n"] for d in lifo.pop({"limit": 2})] == [4, 3]
    assert [d["n"] for d in fifo.pop({"limit": 2})] == [0, 1]
    assert lifo.length() == 3 and fifo.length() == 3
    with pytest.raises(errors.LimitExceededError):
        lifo.pop({"limit": 101})
    with pytest.raises(errors.LimitExceededError):
        lifo.peek({"limit": 1001})
    assert fifo.batch_push([{"n": 9}, {"n": 10}]) == 2


def test_heap_field_keeps_the_priority_in_the_element(prop):
    t = prop["p1"].Tickets
    t.push({"priority": 3, "Subject": "Boiler"})
    t.push({"priority": 9, "Subject": "Leak"})
    t.push({"priority": 3, "Subject": "Door"})
    assert t.peek() == {"priority": 9, "Subject": "Leak"}
    assert [d["Subject"] for d in t.pop(3)] == ["Leak", "Boiler", "Door"]
    with pytest.raises(errors.BadValueError, match="priority"):
        t.push({"Subject": "x"})


def test_keyed_fields_put_get_delete_list(prop):
    h, b = prop["p1"].ExpenseByID, prop["p1"].ExpenseDates
    h.put("e1", {"Amount": 120})
    h.put("e1", {"Amount": 95})  # the correction: put again under the same key
    assert h.get("e1") == {"Amount": 95} and h.length() == 1
    for key in ["2026-03-31/e9", "2026-02-28/e1", "2026-03-01/e2", "2026-04-01/e3"]:
        b.put(key, {"k": key})
    page = b.list(after="2026-03-01/", limit=10)
    assert [e["key"] for e in page] == ["2026-03-01/e2", "2026-03-31/e9", "2026-04-01/e3"]
    assert b.delete("2026-02-28/e1") == {"deleted": 1} and b.length() == 3
    assert h.get("missing") is None


def test_blob_field(prop):
    d = prop["p1"].Documents
    ident = d.put(b"lease pdf", name="lease.pdf", type="application/pdf")
    assert d.info(ident)["size"] == 9
    assert d.get({"_id_": ident})["data"] == b"lease pdf"
    assert b"".join(d.stream(ident)) == b"lease pdf"
    assert [i["_id_"] for i in d.list()] == [ident]
    assert d.delete(ident) == {"deleted": 1} and d.length() == 0


def test_a_blob_field_altered_on_disk_is_reported_corrupt(prop, tmp_path):
    d = prop["p1"].Documents
    ident = d.put(b"lease pdf")
    path = tmp_path / "data" / "app" / "Property" / "fields" / ident
    path.write_bytes(b"lease pdX")
    with pytest.raises(errors.CorruptDataError, match="corrupt"):
        d.get(ident)


@pytest.mark.parametrize("field, verb, args, advice", [
    ("Expenses", "get", ("x",), "has no key"),
    ("Tickets", "delete", ("x",), "has no key"),
    ("ExpenseByID", "update", ({}, {}), "put under the same key"),
    ("Comments", "update", ({}, {}), "no store field has an update verb"),
    ("ExpenseDates", "range", ({"$gte": "a"},), "list({after"),
    ("Expenses", "put", ("k", {}), "its verbs"),
])
def test_refusals_say_what_to_do_instead(prop, field, verb, args, advice):
    with pytest.raises(errors.VerbNotSupportedError, match=advice.replace("(", r"\(").replace("{", r"\{")):
        getattr(prop["p1"][field], verb)(*args)


def test_unknown_store_field(prop):
    with pytest.raises(errors.BadValueError, match="its store fields: Expenses"):
        prop["p1"].Nope.push({})


def test_deleting_a_document_deletes_its_stores_and_blob_files(prop, tmp_path):
    prop["p1"].Expenses.push({"a": 1})
    ident = prop["p1"].Documents.put(b"x")
    prop["p2"].Expenses.push({"b": 2})
    assert prop.delete({"_id_": "p1"}) == {"deleted": 1}
    assert not (tmp_path / "data" / "app" / "Property" / "fields" / ident).exists()
    prop.insert({"_id_": "p1"})  # a new p1 starts with empty stores
    assert prop["p1"].Expenses.length() == 0 and prop["p1"].Documents.length() == 0
    assert prop["p2"].Expenses.length() == 1


def test_a_document_with_too_many_elements_is_not_deleted(tmp_path):
    with hoarddb.open(tmp_path, max_cascade_delete=5) as c:
        b = c["app"].create_bucket("P", type="hash", store_fields=[{"name": "Log", "type": "fifo"}])
        b.insert({"_id_": "p1"})
        b["p1"].Log.batch_push([{"n": i} for i in range(6)])
        with pytest.raises(errors.TooManyElementsError) as e:
            b.delete({"_id_": "p1"})
        assert 'db.P["p1"].Log.pop({limit: 100})' in e.value.message
        assert b.count() == 1 and b["p1"].Log.length() == 6
        b["p1"].Log.pop(2)
        assert b.delete({"_id_": "p1"}) == {"deleted": 1}



def test_a_delete_by_filter_is_refused_whole_when_one_document_has_too_many_elements(tmp_path):
    # The limit is per document; a filter's delete checks each document and keeps all of them
    # (and all their elements) when one is over it.
    with hoarddb.open(tmp_path, max_cascade_delete=3) as c:
        b = c["app"].create_bucket("P", type="hash", store_fields=[{"name": "Log", "type": "fifo"}])
        b.batch_insert([{"_id_": f"p{i}", "Co": "c1"} for i in range(3)])
        for i in range(3):
            b[f"p{i}"].Log.batch_push([{"n": n} for n in range(3 if i != 1 else 4)])
        with pytest.raises(errors.TooManyElementsError) as e:
            b.delete({"Co": "c1"})
        assert '"p1"' in e.value.message
        assert b.count() == 3 and [b[f"p{i}"].Log.length() for i in range(3)] == [3, 4, 3]
        b["p1"].Log.pop()
        assert b.delete({"Co": "c1"}) == {"deleted": 3}

def test_ttl_skips_a_document_with_too_many_elements(tmp_path, caplog):
    with hoarddb.open(tmp_path, max_cascade_delete=2, ttl_sweep_seconds=0) as c:
        b = c["app"].create_bucket("S", type="hash", store_fields=[{"name": "Log", "type": "lifo"}],
                                   indices=[{"field": "At", "expire_after_seconds": 0}])
        old = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
        b.batch_insert([{"_id_": "big", "At": old}, {"_id_": "small", "At": old}])
        b["big"].Log.batch_push([{}, {}, {}])
        b["small"].Log.push({})
        with caplog.at_level(logging.WARNING):
            got = c.sweep_ttl()
        assert (got["expired"], got["skipped"]) == (1, 1)
        assert [d["_id_"] for d in b.find()] == ["big"]
        assert 'db.S["big"].Log.pop({limit: 100})' in caplog.text
        c.sweep_ttl()  # tried again every pass
        assert c.metrics()['hoarddb_ttl_sweep_documents_total{outcome="skipped"}'] == 2


def test_l2_soft_and_hard_limits(tmp_path, caplog):
    with hoarddb.open(tmp_path, bucket_limits={"l2_soft_limit": 3, "l2_hard_limit": 5}) as c:
        b = c["app"].create_bucket("Post", type="hash", store_fields=[{"name": "Comments", "type": "fifo"}])
        b.insert({"_id_": "p1"})
        with caplog.at_level(logging.WARNING, logger="hoarddb.fields"):
            for i in range(5):
                b["p1"].Comments.push({"n": i})
        assert caplog.text.count("past the soft limit") == 1  # once per store
        with pytest.raises(errors.L2LimitError) as e:
            b["p1"].Comments.push({"n": 5})
        assert e.value.message == ('bucket "Post.Comments" exceeded hard limit (5 entries). Suggestions: archive old '
                                   "entries, split into multiple L1 buckets, or increase the limit in config.")
        with pytest.raises(errors.L2LimitError):
            b["p1"].Comments.batch_push([{"n": 6}])
        assert b["p1"].Comments.length() == 5
        b["p1"].Comments.pop()
        b["p1"].Comments.push({"n": 7})  # under the limit again


def test_limits_from_a_yaml_config(tmp_path):
    cfg = tmp_path / "hoarddb.yaml"
    cfg.write_text("bucket_limits:\n  l2_soft_limit: 1\n  l2_hard_limit: 2\n")
    with hoarddb.open(tmp_path / "data", config=str(cfg)) as c:
        b = c["app"].create_bucket("P", type="hash", store_fields=[{"name": "H", "type": "hash"}])
        b.insert({"_id_": 1})
        b[1].H.put("a", {})
        b[1].H.put("b", {})
        b[1].H.put("a", {"again": True})  # a replacement adds nothing
        with pytest.raises(errors.L2LimitError):
            b[1].H.put("c", {})


def test_btree_bucket_store_fields_hang_from_the_sort_key(db):
    b = db.create_bucket("Board", type="btree", key="Score", store_fields=[{"name": "Log", "type": "fifo"}])
    b.insert({"Score": 10, "User": "a"})
    b[10].Log.push({"e": 1})
    assert b[10].Log.length() == 1
    with pytest.raises(errors.NotFoundError):
        b[11].Log.push({})
    b.delete(10)
    b.insert({"Score": 10, "User": "b"})
    assert b[10].Log.length() == 0


def test_store_fields_are_only_for_hash_and_btree(db):
    with pytest.raises(errors.BadValueError, match="only hash and btree"):
        db.create_bucket("Q", type="fifo", store_fields=[{"name": "X", "type": "lifo"}])
    with pytest.raises(errors.UnknownStoreTypeError):
        db.create_bucket("Q", type="hash", store_fields=[{"name": "X", "type": "queue"}])


def test_fields_survive_reopen(tmp_path):
    with hoarddb.open(tmp_path) as c:
        b = c["app"].create_bucket("P", type="hash", store_fields=FIELDS)
        b.insert({"_id_": "p1"})
        b["p1"].Tickets.push({"priority": 1})
        b["p1"].ExpenseByID.put("e", {"a": 1})
    with hoarddb.open(tmp_path) as c:
        assert c["app"].P["p1"].Tickets.pop() == {"priority": 1}
        assert c["app"].P["p1"].ExpenseByID.get("e") == {"a": 1}


def test_an_orphan_blob_field_file_is_removed_on_open(tmp_path):
    with hoarddb.open(tmp_path) as c:
        b = c["app"].create_bucket("P", type="hash", store_fields=[{"name": "D", "type": "blob"}])
        b.insert({"_id_": 1})
        keep = b[1].D.put(b"keep")
    orphan = tmp_path / "app" / "P" / "fields" / "0192a3b4-c5d6-7890-abcd-ef12345678a1"
    orphan.write_bytes(b"crash between the file and its commit")
    with hoarddb.open(tmp_path) as c:
        assert c["app"].P[1].D.get(keep)["data"] == b"keep"
        assert not orphan.exists()


class FieldMachine(RuleBasedStateMachine):
    """A document's lifo, fifo and hash store fields against a few lines of Python model."""

    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="hoarddb-fields-")
        self.client = hoarddb.open(self.dir, ttl_sweep_seconds=0)
        self.b = self.client["app"].create_bucket("P", type="hash", store_fields=[
            {"name": "L", "type": "lifo"}, {"name": "F", "type": "fifo"}, {"name": "H", "type": "hash"}])
        self.b.insert({"_id_": "d"})
        self.lifo, self.fifo, self.hash = [], [], {}
        self.n = 0

    @rule(k=st.integers(1, 3))
    def push(self, k):
        docs = [{"n": self.n + i} for i in range(k)]
        self.n += k
        self.b["d"].L.batch_push(docs)
        self.b["d"].F.batch_push(docs)
        self.lifo += docs
        self.fifo += docs

    @rule(k=st.integers(1, 4))
    def pop(self, k):
        assert self.b["d"].L.pop(k) == list(reversed(self.lifo))[:k]
        del self.lifo[max(0, len(self.lifo) - k):]
        assert self.b["d"].F.pop(k) == self.fifo[:k]
        del self.fifo[:k]

    @rule(key=st.sampled_from("abc"), v=st.integers(-(2**63), 2**63 - 1))
    def put(self, key, v):
        self.b["d"].H.put(key, {"v": v})
        self.hash[key] = {"v": v}

    @rule(key=st.sampled_from("abc"))
    def delete(self, key):
        assert self.b["d"].H.delete(key) == {"deleted": int(key in self.hash)}
        self.hash.pop(key, None)

    @invariant()
    def agrees(self):
        assert self.b["d"].L.list(limit=1000) == self.lifo
        assert self.b["d"].F.peek(1000) == self.fifo
        assert {e["key"]: e["doc"] for e in self.b["d"].H.list()} == self.hash
        assert self.b["d"].H.length() == len(self.hash)

    def teardown(self):
        try:
            self.client.close()
        finally:  # a close that raises must not leave the folder behind in /tmp
            shutil.rmtree(self.dir, ignore_errors=True)


TestFieldMachine = FieldMachine.TestCase


def test_blob_field_load_keeps_ids_and_checks_sha256(prop, db):
    import hashlib
    src = prop["p1"].Documents
    ident = src.put(b"lease", name="lease.pdf")
    info = src.info(ident)
    with pytest.raises(errors.DuplicateKeyError):  # an id is unique in its bucket: the file is never touched
        prop["p2"].Documents.load([{**info, "data": b"other"}])
    assert src.get(ident)["data"] == b"lease"
    copy = db.create_bucket("Copy", type="hash", store_fields=FIELDS)
    copy.insert({"_id_": "p2"})
    dst = copy["p2"].Documents
    assert dst.load([{**info, "data": b"lease"}]) == {"loaded": 1}
    assert dst.get(ident)["data"] == b"lease" and dst.info(ident)["name"] == "lease.pdf"
    with pytest.raises(errors.DuplicateKeyError):
        dst.load([{**info, "data": b"lease"}])
    bad = {"_id_": "0192a3b4-c5d6-7890-abcd-ef12345678a1", "data": b"x", "sha256": hashlib.sha256(b"y").hexdigest()}
    with pytest.raises(errors.CorruptDataError, match="damaged"):
        dst.load([bad])
    assert dst.length() == 1


@pytest.mark.parametrize("element, match", [
    ({"x": 1}, "needs a numeric priority"),
    ({"priority": None}, "must be a number"),
    ({"priority": True}, "must be a number"),
    ({"priority": "5"}, "must be a number"),
    ({"priority": float("nan")}, "not NaN"),
    ({"priority": Decimal128("NaN")}, "not NaN"),
])
def test_a_heap_field_refuses_the_priorities_a_heap_bucket_refuses(prop, db, element, match):
    bucket = db.create_bucket("Alerts", type="heap")
    with pytest.raises(errors.BadValueError, match=match):
        bucket.push(element)
    with pytest.raises(errors.BadValueError, match=match):
        prop["p1"].Tickets.push(element)
    with pytest.raises(errors.BadValueError, match=match):
        prop["p1"].Tickets.batch_push([{"priority": 1}, element])
    assert prop["p1"].Tickets.length() == 0 and bucket.length() == 0


@pytest.mark.parametrize("options", [{"nmae": "a.pdf"}, {"name": "a.pdf", "size": 3}, "a.pdf", 5, [b"x"]])
def test_a_blob_field_put_refuses_options_it_does_not_know(prop, tmp_path, options):
    with pytest.raises(errors.BadValueError, match="put"):
        prop["p1"].Documents.put(b"hello", options)
    assert prop["p1"].Documents.length() == 0
    assert list((tmp_path / "data" / "app" / "Property" / "fields").iterdir()) == []
    ident = prop["p1"].Documents.put(b"hello", {"name": "a.pdf", "type": "application/pdf"})
    assert prop["p1"].Documents.info(ident)["name"] == "a.pdf"
    with pytest.raises(errors.BadValueError, match="twice"):
        prop["p1"].Documents.put(b"hello", {"name": "a.pdf"}, name="b.pdf")


def test_a_blob_field_lists_after_an_id_given_either_way(prop):
    first, second = prop["p1"].Documents.put(b"1"), prop["p1"].Documents.put(b"2")
    assert [b["_id_"] for b in prop["p1"].Documents.list(after=first)] == [second]
    assert [b["_id_"] for b in prop["p1"].Documents.list(after={"_id_": first})] == [second]
    for bad in (5, "nope", {"id": first}):
        with pytest.raises(errors.BadValueError, match="list after"):
            prop["p1"].Documents.list(after=bad)


def test_too_many_elements_names_each_full_store_and_its_command(tmp_path):
    fields = [{"name": "Log", "type": "fifo"}, {"name": "ById", "type": "hash"}, {"name": "Files", "type": "blob"}]
    with hoarddb.open(tmp_path, max_cascade_delete=3) as c:
        b = c["app"].create_bucket("P", type="hash", store_fields=fields)
        b.insert({"_id_": "p1"})
        for k in "abc":
            b["p1"].ById.put(k, {})
        b["p1"].Files.put(b"x")
        with pytest.raises(errors.TooManyElementsError) as e:
            b.delete("p1")
        message = e.value.message
        assert 'ById (3, hash): db.P["p1"].ById.delete(key)' in message
        assert 'Files (1, blob): db.P["p1"].Files.delete(_id_)' in message
        assert "Log" not in message  # empty: nothing to do there
        assert message.index("ById") < message.index("Files")  # largest first
        assert b.count() == 1 and b["p1"].ById.length() == 3


@pytest.mark.parametrize("options, says", [
    ({"indices": ["Expenses"]}, "covers 'Expenses', a lifo store field"),
    ({"indices": [{"fields": ["CompanyID", "Expenses"]}]}, "never the contents of a store field"),
    ({"fields": [{"name": "Expenses", "type": "string", "keywords": []}]}, "both as a field and as a lifo store"),
])
def test_an_index_or_field_line_naming_a_store_field_is_refused(tmp_path, options, says):
    with hoarddb.open(tmp_path) as c:
        with pytest.raises(errors.BadValueError) as e:
            c["app"].create_bucket("P", type="hash", store_fields=[{"name": "Expenses", "type": "lifo"}], **options)
        assert says in e.value.message
        assert c.databases() == [] or "P" not in c["app"].buckets()
