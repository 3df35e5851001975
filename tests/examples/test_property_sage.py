"""case-study-property-sage.md, run through the shell as the page writes it: the model, the three copies
of an expense, the correction by put, billing, the month report and the ExpenseByDate range."""

from __future__ import annotations

import io
import json

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
        # field keywords other than unique are noted, placement is recorded
        assert any("placement" in w for a in answers for w in a.get("warnings", []))

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
        ids = lambda a: [d["_id_"] for d in a["result"]]
        assert ids(answers[4]) == ["2026-03-14/e1"]  # the page's bounds miss March 31 (see docs)
        assert ids(answers[5]) == ids(answers[6]) == ["2026-03-14/e1", "2026-03-31/e2"]
