"""case-study-property-sage.md, run through the shell as the page writes it: the model, the three copies
of an expense, the correction by put, billing, the month report and the ExpenseByDate range; then each
rule the page states (reads are peek and list, pop removes, a heap's order, what a store field refuses,
indices: for equality lookups) and its migration with `hoarddb ingest`, step by step."""

from __future__ import annotations

import datetime
import io
import json
import subprocess
import sys

import bson
from bson import Decimal128, ObjectId

import hoarddb
from hoarddb.shell import run_script

MODEL = """
use app
create bucket Company {
    type: hash,
    Name string,
    Users hashStore,
    Vendors hashStore,
    Notifications lifoStore,
    Activity lifoStore,
    Audit fifoStore
};

create bucket Property {
    type: hash,
    CompanyID string,
    Name string,
    Expenses lifoStore,
    ExpenseByID hashStore,
    ExpenseDates btreeStore,
    Tickets heapStore,
    Comments fifoStore,
    Photos lifoStore,
    Documents blobStore,
    indices: ["CompanyID"]
};

create bucket Prospect {
    type: hash,
    CompanyID string,
    Stage string,
    Notes fifoStore,
    Activity lifoStore,
    Tasks heapStore,
    indices: ["CompanyID", "Stage"]
};

create bucket User { type: hash, placement: whole, Email string unique, Name string };

create bucket CreemCustomer {
    type: hash,
    CompanyID string,
    Transactions fifoStore,
    indices: ["CompanyID"]
};

create bucket CreemSubscription {
    type: hash,
    CustomerID string,
    Status string,
    indices: ["CustomerID"]
};

create bucket ExpenseByDate { type: btree };
"""


def run(client, text):
    out, err = io.StringIO(), io.StringIO()
    code = run_script(client, text, json_mode=True, out=out, err=err)
    answers = [json.loads(line) for line in out.getvalue().splitlines()]
    return code, answers, err.getvalue()


def test_the_case_study_runs_as_written(tmp_path):
    with hoarddb.open(tmp_path) as client:
        code, answers, err = run(client, MODEL)
        assert code == 0, (answers, err)
        assert all(a["ok"] == 1 for a in answers)
        # placement: whole is accepted (it keeps the bucket whole in a cluster; a single server is whole)
        assert not any("placement" in w for a in answers for w in a.get("warnings", []))

        code, answers, _ = run(client, """
use app
db.Property.insert({_id_: "p1", CompanyID: "c1", Name: "Elm Street 4"});
db.Property["p1"].Expenses.push({Amount: 120, Category: "boiler", Date: "2026-03-14"});  -- newest-first feed
db.Property["p1"].ExpenseByID.put("e1", {Amount: 120, Category: "boiler", Date: "2026-03-14"});  -- the record, by id
db.Property["p1"].ExpenseDates.put("2026-03-14/e1", {Amount: 120, Category: "boiler", Date: "2026-03-14"});  -- month report
db.Property["p1"].ExpenseByID.put("e1", {Amount: 95, Category: "boiler", Date: "2026-03-14"})
db.Property["p1"].ExpenseDates.put("2026-03-14/e1", {Amount: 95, Category: "boiler", Date: "2026-03-14"})
db.Property["p1"].ExpenseByID.get("e1")
db.Property["p1"].ExpenseDates.list({after: "2026-03-01/", limit: 10})
db.Property["p1"].Expenses.peek({limit: 10})
db.Property["p1"].Tickets.push({priority: 3, Subject: "Boiler"})
db.Property["p1"].Tickets.peek()
db.Property.search({CompanyID: "c1"})
db.Property.get("p1")
""")
        assert code == 0, answers
        results = [a.get("result") for a in answers]
        assert results[7] == {"Amount": 95, "Category": "boiler", "Date": "2026-03-14"}
        assert results[8] == [{"key": "2026-03-14/e1", "doc": {"Amount": 95, "Category": "boiler", "Date": "2026-03-14"}}]
        assert results[9] == [{"Amount": 120, "Category": "boiler", "Date": "2026-03-14"}]  # the feed keeps the event
        assert results[11] == {"priority": 3, "Subject": "Boiler"}
        assert answers[12]["index_used"] == "CompanyID_1" and results[12][0]["_id_"] == "p1"
        assert results[13] == {"_id_": "p1", "CompanyID": "c1", "Name": "Elm Street 4"}  # the document's own fields
        assert {"name": "Expenses", "type": "lifo", "length": 1} in answers[13]["store_fields"]

        # a LIFO element has no key: get is refused with the page's advice
        code, answers, _ = run(client, 'use app\ndb.Property["p1"].Expenses.get("e1")')
        assert code == 1 and answers[-1]["codeName"] == "VERB_NOT_SUPPORTED"

        # billing: customer by company, subscription by customer
        code, answers, _ = run(client, """
use app
db.CreemCustomer.insert({_id_: "cust_1", CompanyID: "c1"})
db.CreemCustomer["cust_1"].Transactions.push({Amount: 49, At: ISODate("2026-03-01T00:00:00Z")})
db.CreemCustomer["cust_1"].Transactions.list()
db.CreemSubscription.insert({_id_: "sub_1", CustomerID: "cust_1", Status: "active"})
db.CreemSubscription.search({CustomerID: "cust_1"})
db.CreemCustomer.search({CompanyID: "c1"})
db.User.insert({_id_: "u1", Email: "a@example.com", Name: "A"})
db.User.insert({_id_: "u2", Email: "a@example.com", Name: "B"})
""")
        assert [a["ok"] for a in answers] == [1, 1, 1, 1, 1, 1, 1, 1, 0]
        assert answers[3]["result"][0]["Amount"] == 49
        assert answers[5]["index_used"] == "CustomerID_1" and answers[6]["index_used"] == "CompanyID_1"
        assert answers[8]["codeName"] == "DUPLICATE_KEY"

        # the month report in a btree bucket keyed "<date>/<expenseID>"
        code, answers, _ = run(client, """
use app
db.ExpenseByDate.insert({_id_: "2026-03-14/e1", Amount: 95})
db.ExpenseByDate.insert({_id_: "2026-03-31/e2", Amount: 10})
db.ExpenseByDate.insert({_id_: "2026-04-01/e3", Amount: 7})
db.ExpenseByDate.range({$gte: "2026-03-01", $lte: "2026-03-31"})
db.ExpenseByDate.range({$gte: "2026-03-01", $lt: "2026-04"})
db.ExpenseByDate.range({$prefix: "2026-03"})
""")
        assert code == 0

        def ids(answer):
            return [d["_id_"] for d in answer["result"]]

        assert ids(answers[4]) == ["2026-03-14/e1"]  # the page's bounds miss March 31 (see docs)
        assert ids(answers[5]) == ids(answers[6]) == ["2026-03-14/e1", "2026-03-31/e2"]


def model(tmp_path):
    """A database holding the page's model, and a property p1 of company c1 (the entity document first)."""
    client = hoarddb.open(tmp_path / "data")
    code, answers, err = run(client, MODEL)
    assert code == 0, (answers, err)
    code, answers, _ = run(client, 'use app\ndb.Property.insert({_id_: "p1", CompanyID: "c1", Name: "Elm Street 4"})')
    assert code == 0, answers
    return client


def results(client, text):
    code, answers, err = run(client, "use app\n" + text)
    assert code == 0, (answers, err)
    return [a.get("result") for a in answers[1:]]


def refused(client, statement):
    code, answers, _ = run(client, "use app\n" + statement)
    assert code == 1 and answers[-1]["ok"] == 0, answers
    return answers[-1]


def test_a_dashboard_reads_with_peek_and_list_and_pop_removes(tmp_path):
    with model(tmp_path) as client:
        out = results(client, """
db.Property["p1"].Expenses.push({Amount: 120, Date: "2026-03-14"})
db.Property["p1"].Expenses.push({Amount: 7, Date: "2026-03-15"})
db.Property["p1"].Expenses.push({Amount: 30, Date: "2026-03-16"})
db.Property["p1"].Expenses.peek()
db.Property["p1"].Expenses.peek({limit: 10})
db.Property["p1"].Expenses.peek({limit: 10})
db.Property["p1"].Expenses.list({limit: 10})
db.Property["p1"].Expenses.length()
db.Property["p1"].Expenses.peek({limit: 1000})
""")
        newest_first = [{"Amount": 30, "Date": "2026-03-16"}, {"Amount": 7, "Date": "2026-03-15"},
                        {"Amount": 120, "Date": "2026-03-14"}]
        assert out[3] == newest_first[0]                     # peek() returns one element, the next pop's
        assert out[4] == out[5] == newest_first             # peek({limit: N}) in pop order, twice the same
        assert out[6] == newest_first[::-1]                  # list: storage order, oldest first, on a lifo reversed
        assert out[7] == 3 and len(out[8]) == 3              # nothing was removed by reading
        assert refused(client, 'db.Property["p1"].Expenses.peek({limit: 1001})')["codeName"] == "LIMIT_EXCEEDED"
        assert refused(client, 'db.Property["p1"].Expenses.pop({limit: 101})')["codeName"] == "LIMIT_EXCEEDED"
        out = results(client, 'db.Property["p1"].Expenses.pop({limit: 2})\ndb.Property["p1"].Expenses.peek({limit: 10})')
        assert out == [newest_first[:2], newest_first[2:]]  # pop removes what it returns, in one write


def test_a_heap_store_puts_the_highest_priority_first_and_keeps_it(tmp_path):
    with model(tmp_path) as client:
        out = results(client, """
db.Property["p1"].Tickets.push({priority: 3, Subject: "Boiler"})
db.Property["p1"].Tickets.push({priority: 9, Subject: "Flood"})
db.Property["p1"].Tickets.push({priority: 1, Subject: "Bulb"})
db.Property["p1"].Tickets.peek()
db.Property["p1"].Tickets.peek()
db.Property["p1"].Tickets.length()
""")
        assert out[3] == out[4] == {"priority": 9, "Subject": "Flood"}  # the priority stays in the element
        assert out[5] == 3


def test_store_fields_belong_to_their_document(tmp_path):
    with model(tmp_path) as client:
        # a store field exists only after its document does
        missing = refused(client, 'db.Property["p9"].Expenses.push({Amount: 1})')
        assert missing["codeName"] == "NOT_FOUND" and "Insert the document first" in missing["message"]
        out = results(client, """
db.Property.insert({_id_: "p2", CompanyID: "c1", Name: "Oak Lane 1"})
db.Property["p1"].Expenses.push({Amount: 120})
db.Property["p1"].Documents.put(BinData(0, "aGVsbG8="), {name: "lease.pdf", type: "application/pdf"})
db.Property["p2"].Expenses.length()
db.Property["p2"].Documents.list()
db.Property.find({CompanyID: "c1"})
""")
        assert out[3] == 0 and out[4] == []                 # one property's stores are not another's
        assert out[5] == [{"_id_": "p1", "CompanyID": "c1", "Name": "Elm Street 4"},
                          {"_id_": "p2", "CompanyID": "c1", "Name": "Oak Lane 1"}]  # find: own fields only
        # the terminal names the stores under the document
        out_text = io.StringIO()
        assert run_script(client, 'use app\ndb.Property.get("p1")', out=out_text, err=io.StringIO()) == 0
        assert "-- stores: Expenses lifoStore (1)," in out_text.getvalue()
        assert "Documents blobStore (1)" in out_text.getvalue()


def test_what_a_store_field_refuses(tmp_path):
    with model(tmp_path) as client:
        for statement in ('db.Property["p1"].Expenses.get("e1")', 'db.Property["p1"].Expenses.delete("e1")',
                          'db.Property["p1"].Comments.get("c1")', 'db.Property["p1"].Tickets.delete("t1")'):
            answer = refused(client, statement)  # a queue or heap element has no key
            assert answer["codeName"] == "VERB_NOT_SUPPORTED" and "hashStore copy" in answer["message"], statement
        for statement in ('db.Property["p1"].ExpenseByID.update({_id_: "e1"}, {$set: {Amount: 95}})',
                          'db.Property["p1"].ExpenseDates.update({_id_: "e1"}, {$set: {Amount: 95}})'):
            answer = refused(client, statement)  # no store field has an update verb
            assert answer["codeName"] == "VERB_NOT_SUPPORTED" and "put under the same key" in answer["message"]
        answer = refused(client, 'db.Property["p1"].ExpenseDates.range({$gte: "2026-03-01"})')
        assert answer["codeName"] == "VERB_NOT_SUPPORTED" and "list({after:" in answer["message"]
        # a store field consumes only with pop; claim/ack are a bucket's
        assert refused(client, 'db.Property["p1"].Comments.claim()')["codeName"] == "VERB_NOT_SUPPORTED"
        out = results(client, """
create bucket Jobs { type: fifo }
db.Jobs.push({job: "reindex"})
db.Jobs.claim({lease: 30})
""")
        claim = out[2][0]
        assert claim["element"] == {"job": "reindex"}
        assert results(client, f'db.Jobs.ack("{claim["claimId"]}")\ndb.Jobs.length()') == [{"acked": 1}, 0]


def test_a_btree_store_field_is_paged_by_key_and_the_app_stops_at_the_month(tmp_path):
    with model(tmp_path) as client:
        put = 'db.Property["p1"].ExpenseDates.put("{}", {{Amount: {}}})'
        keys = [("2026-02-27/e0", 5), ("2026-03-14/e1", 120), ("2026-03-31/e2", 10), ("2026-04-01/e3", 7)]
        results(client, "\n".join(put.format(k, a) for k, a in keys))
        page = results(client, 'db.Property["p1"].ExpenseDates.list({after: "2026-03-01/", limit: 50})')[0]
        assert [e["key"] for e in page] == ["2026-03-14/e1", "2026-03-31/e2", "2026-04-01/e3"]  # key order, on
        march = [e for e in page if e["key"].startswith("2026-03")]                              # the app stops
        assert [e["doc"]["Amount"] for e in march] == [120, 10]


def test_a_deleted_expense_leaves_its_queue_element(tmp_path):
    with model(tmp_path) as client:
        out = results(client, """
db.Property["p1"].Expenses.push({Amount: 120, Category: "boiler", Date: "2026-03-14"})
db.Property["p1"].ExpenseByID.put("e1", {Amount: 120, Category: "boiler", Date: "2026-03-14"})
db.Property["p1"].ExpenseDates.put("2026-03-14/e1", {Amount: 120, Category: "boiler", Date: "2026-03-14"})
db.Property["p1"].ExpenseByID.delete("e1")
db.Property["p1"].ExpenseDates.delete("2026-03-14/e1")
db.Property["p1"].ExpenseByID.get("e1")
db.Property["p1"].ExpenseDates.length()
db.Property["p1"].Expenses.peek({limit: 10})
""")
        assert out[5] is None and out[6] == 0
        assert out[7] == [{"Amount": 120, "Category": "boiler", "Date": "2026-03-14"}]  # hoardDB reconciles no copy


def test_indices_serve_equality_lookups_and_nothing_else(tmp_path):
    with model(tmp_path) as client:
        code, answers, _ = run(client, """
use app
db.User.insert({_id_: "u1", Email: "a@example.com", Name: "A"})
db.User.search({Email: "a@example.com"})
db.Property.search({CompanyID: "c1"})
db.Property.search({Name: "Elm Street 4"})
db.Prospect.insert({_id_: "x1", CompanyID: "c1", Stage: "lead"})
db.Prospect.search({Stage: "lead"})
""")
        assert code == 0
        assert answers[2]["index_used"] == "Email_1" and answers[2]["result"][0]["_id_"] == "u1"
        assert answers[3]["index_used"] == "CompanyID_1"
        assert answers[4]["index_used"] == "none — full scan"  # Name has no index: a scan, still correct
        assert answers[4]["result"][0]["_id_"] == "p1"
        assert answers[6]["index_used"] == "Stage_1"
        # indices: is for hash buckets only, and top-level fields only
        answer = refused(client, 'create bucket Sorted { type: btree, indices: ["Name"] }')
        assert answer["codeName"] == "BAD_VALUE" and "only hash buckets" in answer["message"]
        answer = refused(client, 'create bucket Nested { type: hash, indices: ["Address.City"] }')
        assert answer["codeName"] == "BAD_VALUE" and "top-level fields only" in answer["message"]


def hoarddb_cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "hoarddb", *args], cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)


def test_the_migration_with_ingest(tmp_path):
    """The page's ingest steps: a folder into a database, one file with --into, dotted names, --type, the
    indexes reported and not created, a re-run; then the application's own move into the model."""
    folder = tmp_path / "dump" / "app"
    folder.mkdir(parents=True)
    at = datetime.datetime(2026, 3, 14, 9, 30, tzinfo=datetime.timezone.utc)
    props = [{"_id": ObjectId("65f0c0ffee0123456789abc%d" % i), "company_id": "c1", "name": f"Flat {i}",
              "rent": Decimal128("1200.50"), "listed": at} for i in range(3)]
    (folder / "properties.bson").write_bytes(b"".join(bson.encode(d) for d in props))
    (folder / "properties.metadata.json").write_text(json.dumps({"indexes": [
        {"v": 2, "key": {"_id": 1}, "name": "_id_"}, {"v": 2, "key": {"company_id": 1}, "name": "company_id_1"}]}))
    (folder / "expenses.jsonl").write_text(
        '{"_id": "e1", "property_id": {"$oid": "65f0c0ffee0123456789abc0"}, "amount": 120, "date": "2026-03-14"}\n')
    (tmp_path / "events.2024.bson").write_bytes(bson.encode({"_id": 1}))
    data = str(tmp_path / "data")

    # 1. a folder loads with --into-db, one hash bucket per file, named after it
    done = hoarddb_cli("ingest", "./dump/app", "--into-db", "app", "--data", data, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # 3. the indexes are reported, none created
    assert 'create bucket properties { type: hash, indices: [{field: "company_id"}] }' in done.stdout
    # a single file needs --into; a dotted name is refused without --allow-dots
    assert hoarddb_cli("ingest", "dump/app/properties.bson", "--into", "app.props2", "--data", data,
                       cwd=tmp_path).returncode == 0
    dotted = hoarddb_cli("ingest", "events.2024.bson", "--into-db", "app", "--data", data, cwd=tmp_path)
    assert dotted.returncode == 2 and "--allow-dots" in dotted.stderr
    # 2. --type never changes a bucket that exists
    typed = hoarddb_cli("ingest", "dump/app/properties.bson", "--into", "app.properties", "--type", "fifo",
                        "--data", data, cwd=tmp_path)
    assert typed.returncode == 0 and "does not change it" in typed.stdout
    with hoarddb.open(data) as client:
        db = client["app"]
        assert db.buckets() == ["expenses", "properties", "props2"]
        assert db.properties.describe()["type"] == "hash" and db.properties.describe()["indexes"] == []
        assert db.properties.count({}) == 3  # the re-runs over a keyed bucket left one copy of each
        # BSON end to end: ObjectId, Decimal128 and dates keep their types; documents keep their ids
        flat = db.properties.get(ObjectId("65f0c0ffee0123456789abc0"))
        assert flat["_id"] == flat["_id_"] == props[0]["_id"]
        assert flat["rent"] == Decimal128("1200.50") and isinstance(flat["rent"], Decimal128)
        assert flat["listed"] == at
        # to have the index: create the bucket first with indices:, then the same command again
        db.drop_bucket("properties")
        code, answers, _ = run(client, 'use app\ncreate bucket properties { type: hash, indices: [{field: "company_id"}] }')
        assert code == 0, answers
    again = hoarddb_cli("ingest", "./dump/app", "--into-db", "app", "--data", data, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    # over a fifo a re-run appends a second copy
    for _ in range(2):
        assert hoarddb_cli("ingest", "dump/app/expenses.jsonl", "--into", "app.expense_log", "--type", "fifo",
                           "--yes", "--data", data, cwd=tmp_path).returncode == 0

    with hoarddb.open(data) as client:
        db = client["app"]
        found = db.properties.search({"company_id": "c1"})
        assert found.index_used == "company_id_1" and len(found) == 3
        assert db.expense_log.length() == 2
        # 4. the application's migration: the entity document first, then its store fields
        code, answers, err = run(client, MODEL)
        assert code == 0, (answers, err)
        for p in db.properties.find({}):
            key = str(p["_id"])
            db.Property.insert({"_id_": key, "CompanyID": p["company_id"], "Name": p["name"]})
        for e in db.expenses.find({}):
            owner = db.Property[str(e["property_id"])]
            doc = {"Amount": e["amount"], "Date": e["date"]}
            owner.Expenses.push(doc)
            owner.ExpenseByID.put(e["_id"], doc)
            owner.ExpenseDates.put(f'{e["date"]}/{e["_id"]}', doc)
        assert db.Property.search({"CompanyID": "c1"}).index_used == "CompanyID_1"
        moved = db.Property["65f0c0ffee0123456789abc0"]
        assert moved.ExpenseByID.get("e1") == {"Amount": 120, "Date": "2026-03-14"}
        assert moved.ExpenseDates.list()[0]["key"] == "2026-03-14/e1" and moved.Expenses.length() == 1
