"""HQL statements to operation requests: every statement form, the spec's examples, errors and their positions."""

from __future__ import annotations

import datetime

import pytest

from hoarddb import operations
from hoarddb.errors import (BadValueError, DatabaseNotFoundError, HoardError, InvalidArgumentError, SyntaxError_,
                            UnknownVerbError)
from hoarddb.hql import is_complete, parse, parse_statement, statements


def request(text: str, db: str | None = "app") -> dict:
    return parse_statement(text).to_request(db)


# ---- statements ---------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("create database PhotoJournal", {"op": "create_database", "db": "PhotoJournal"}),
    ("drop database PhotoJournal", {"op": "drop_database", "db": "PhotoJournal"}),
    ("show databases", {"op": "list_databases"}),
    ("show buckets", {"op": "list_buckets", "db": "app"}),
    ("describe bucket Users", {"op": "describe_bucket", "db": "app", "bucket": "Users"}),
    ("drop bucket Users", {"op": "drop_bucket", "db": "app", "bucket": "Users"}),
    ("create bucket Users", {"op": "create_bucket", "db": "app", "bucket": "Users", "options": {}}),
    ("create bucket Q { type: fifo }", {"op": "create_bucket", "db": "app", "bucket": "Q", "options": {"type": "fifo"}}),
    ("alter bucket Q { segment_size: 4096 }",
     {"op": "alter_bucket", "db": "app", "bucket": "Q", "options": {"segment_size": 4096}}),
    ("db.Users.stats()", {"op": "stats", "db": "app", "bucket": "Users"}),
    ('create database "my-app"', {"op": "create_database", "db": "my-app"}),
    ("CREATE DATABASE X", {"op": "create_database", "db": "X"}),
    ("Show Buckets", {"op": "list_buckets", "db": "app"}),
])
def test_statement(text, expected):
    assert request(text) == expected


def test_use_help_exit_are_shell_statements():
    use, help_all, help_push, leave, quit_ = parse("use app; help; help push; exit; quit")
    assert (use.kind, use.name) == ("use", "app")
    assert (help_all.kind, help_all.name) == ("help", None)
    assert (help_push.kind, help_push.name) == ("help", "push")
    assert leave.kind == quit_.kind == "exit"


def test_calls_need_a_database():
    with pytest.raises(DatabaseNotFoundError, match="use <name>"):
        request("db.Comments.pop()", db=None)
    with pytest.raises(DatabaseNotFoundError):
        request("show buckets", db=None)
    assert request("show databases", db=None) == {"op": "list_databases"}


# ---- bucket bodies --------------------------------------------------------------------------

def test_body_with_options_fields_and_store_fields():
    text = """create bucket Property {
        type: hash,
        CompanyID string,
        Name string,
        Expenses lifoStore,
        ExpenseByID hashStore,
        ExpenseDates btreeStore,
        Tickets heapStore,
        Comments fifoStore,
        Documents blobStore,
        indices: ["CompanyID"]
    };"""
    options = request(text)["options"]
    assert options == {
        "type": "hash",
        "fields": [{"name": "CompanyID", "type": "string", "keywords": []},
                   {"name": "Name", "type": "string", "keywords": []}],
        "store_fields": [{"name": "Expenses", "type": "lifo"}, {"name": "ExpenseByID", "type": "hash"},
                         {"name": "ExpenseDates", "type": "btree"}, {"name": "Tickets", "type": "heap"},
                         {"name": "Comments", "type": "fifo"}, {"name": "Documents", "type": "blob"}],
        "indices": ["CompanyID"],
    }


def test_field_lines_with_keywords_and_array_types_without_commas():
    text = """create bucket User {
        _id_      uuid auto
        FirstName string required
        Email     string unique
        Posts     []uuid
    }"""
    assert request(text)["options"]["fields"] == [
        {"name": "_id_", "type": "uuid", "keywords": ["auto"]},
        {"name": "FirstName", "type": "string", "keywords": ["required"]},
        {"name": "Email", "type": "string", "keywords": ["unique"]},
        {"name": "Posts", "type": "[]uuid", "keywords": []},
    ]


def test_one_line_body_and_options_as_given():
    options = request("create bucket User { type: hash, placement: whole, Email string unique, Name string };")["options"]
    assert options["type"] == "hash" and options["placement"] == "whole"
    assert [f["name"] for f in options["fields"]] == ["Email", "Name"]
    # Options are passed as written: the engine, not the parser, knows which exist.
    assert request("create bucket B { colour: blue, key: Score, segment_size: 4096 }")["options"] == {
        "colour": "blue", "key": "Score", "segment_size": 4096}
    options = request('create bucket S { type: hash, indices: [{field: "CreatedAt", expire_after_seconds: 3600}] }')
    assert options["options"]["indices"] == [{"field": "CreatedAt", "expire_after_seconds": 3600}]


def test_option_values_may_span_lines():
    text = """create bucket Orders {
        type: hash,
        indices: [
            {fields: ["CustomerID", "CreatedAt"]},
            "Status"
        ]
    }"""
    assert request(text)["options"]["indices"] == [{"fields": ["CustomerID", "CreatedAt"]}, "Status"]


def test_body_refusals():
    with pytest.raises(BadValueError, match="given twice"):
        parse("create bucket A { type: fifo, type: lifo }")
    with pytest.raises(BadValueError, match="takes no keywords"):
        parse("create bucket A { Expenses lifoStore unique }")


def test_keywords_are_plain_names_where_no_keyword_fits():
    assert request("create bucket bucket { type: fifo }")["bucket"] == "bucket"
    assert request("db.db.push({use: 1, create: 2})") == {
        "op": "push", "db": "app", "bucket": "db", "args": {"doc": {"use": 1, "create": 2}}}
    assert parse_statement("use use").name == "use"


# ---- calls ----------------------------------------------------------------------------------

def test_call_binds_arguments_through_the_operations_table():
    assert request("db.Comments.peek(5)") == request("db.Comments.peek({limit: 5})") == {
        "op": "peek", "db": "app", "bucket": "Comments", "args": {"limit": 5}}
    assert request("db.Comments.peek()")["args"] == {}
    assert request('db.User.update({_id_: "jane_doe"}, {$set: {Name: "Janet"}})')["args"] == {
        "filter": {"_id_": "jane_doe"}, "update": {"$set": {"Name": "Janet"}}}
    assert request("db.Comments.list({after: 100, limit: 50})")["args"] == {"after": 100, "limit": 50}


def test_every_verb_and_alias_is_callable():
    for name, op in operations.VERBS.items():
        args = {"doc": "{a: 1}", "docs": "[{a: 1}]", "filter": "{a: 1}", "update": "{$set: {a: 2}}",
                "int": "1", "any": '"k"', "data": '"k"', "str": '"k"', "list": "[]"}
        text = f"db.B.{name}({', '.join(args[p.kind] for p in op.params if p.required)})"
        assert request(text)["op"] == op.name, text


def test_aliases_map_to_their_verb():
    assert request('db.Users.batchInsert([{_id_: "a"}, {_id_: "b"}])') == {
        "op": "batch_insert", "db": "app", "bucket": "Users", "args": {"docs": [{"_id_": "a"}, {"_id_": "b"}]}}
    assert request("db.Q.batchPush([{a: 1}])")["op"] == "batch_push"


def test_bucket_by_string():
    assert request('db["My Bucket"].length()') == {"op": "length", "db": "app", "bucket": "My Bucket", "args": {}}


def test_store_field_calls():
    assert request('db.Property["p1"].Expenses.push({Amount: 120, Category: "boiler"})') == {
        "op": "push", "db": "app", "bucket": "Property", "key": "p1", "field": "Expenses",
        "args": {"doc": {"Amount": 120, "Category": "boiler"}}}
    assert request('db["Property"]["p1"]["Tickets"].peek({limit: 3})') == {
        "op": "peek", "db": "app", "bucket": "Property", "key": "p1", "field": "Tickets", "args": {"limit": 3}}
    assert request('db.P[UUID("0192a3b4-c5d6-7890-abcd-ef12345678a1")].F.length()')["key"].hex.startswith("0192")


def test_unknown_verbs_and_bad_arguments_are_refused_with_position():
    with pytest.raises(UnknownVerbError) as e:
        parse("use app\ndb.Comments.pusj({a: 1})")
    assert (e.value.line, e.value.column) == (2, 13)
    assert "verbs:" in e.value.message
    with pytest.raises(InvalidArgumentError, match="limit"):
        parse('db.Comments.peek("five")')
    with pytest.raises(InvalidArgumentError, match="at most"):
        parse("db.Comments.pop(1, 2, 3)")
    with pytest.raises(InvalidArgumentError):
        parse("db.Users.stats(1)")


def test_values_in_calls():
    args = request('db.S.insert({_id_: "s1", CreatedAt: ISODate("2026-09-29T10:00:00Z"), n: -1.5})')["args"]
    assert args["doc"]["CreatedAt"] == datetime.datetime(2026, 9, 29, 10, tzinfo=datetime.timezone.utc)
    assert args["doc"]["n"] == -1.5


# ---- the spec's examples ---------------------------------------------------------------------

#: store-types.md's example schema, whole (tests/test_shell.py runs it too)
PHOTOJOURNAL_SCHEMA = '''
create database PhotoJournal;

create bucket User {
    _id_      uuid auto,
    FirstName string required,
    LastName  string required,
    Email     string unique,
    Posts     []uuid
};

create bucket Post {
    _id_      uuid auto,
    Caption   string
};

create bucket UserFriends {
    type: heap,
    indices: []
};

create bucket PostPhotos {
    type: blob,
    indices: []
};

create bucket PostComments {
    type: fifo,
    indices: []
};
'''

STORE_TYPES_MD = r'''
db.Comments.push({Author: "Bob", Text: "Nice photo!"});
db.Comments.pop();
-- Returns: {Author: "Bob", Text: "Nice photo!"}
db.Comments.peek();
db.Comments.peek(5);
db.Comments.length();
db.Sessions.push({IP: "192.168.1.1", UA: "Chrome"});
db.Sessions.pop();
db.User.insert({_id_: "jane_doe", Name: "Jane", Email: "jane@example.com"});
db.User.find({_id_: "jane_doe"});
db.User.find({Email: "jane@example.com"});
db.User.update({_id_: "jane_doe"}, {$set: {Name: "Janet"}});
db.User.delete({_id_: "jane_doe"});
db.User.count();
db.Leaderboard.insert({Score: 100, User: "jane"});
db.Leaderboard.get({Score: 92});
db.Leaderboard.range({Score: {$gte: 90}});
db.Leaderboard.first();
db.Leaderboard.last();
db.Alerts.push({priority: 10, Msg: "Disk full", Host: "node-1"});
db.Photos.put({data: BinData(0, "aGk="), name: "sunset.jpg", type: "image/jpeg"});
db.Photos.get({_id_: "0192a3b4-c5d6-7890-abcd-ef12345678a1"});
db.Photos.info({_id_: "0192a3b4-c5d6-7890-abcd-ef12345678a1"});
db.Photos.delete({_id_: "0192a3b4-c5d6-7890-abcd-ef12345678a1"});
db.Photos.stream({_id_: "0192a3b4-c5d6-7890-abcd-ef12345678a1"});

''' + PHOTOJOURNAL_SCHEMA


CASE_STUDY_MD = r'''
create bucket Company {
    type: hash,
    Name string,
    Users hashStore,
    Vendors hashStore,
    Notifications lifoStore,
    Activity lifoStore,
    Audit fifoStore
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

create bucket ExpenseByDate { type: btree };
-- key each document "2026-03-14/<expenseID>"; read with:
-- db.ExpenseByDate.range({$gte: "2026-03-01", $lte: "2026-03-31"})
db.ExpenseByDate.range({$gte: "2026-03-01", $lte: "2026-03-31"})
db.Property["p1"].Tickets.push({priority: 3, Subject: "Boiler"})
db.Property["p1"].Expenses.push({Amount: 120, Category: "boiler", Date: "2026-03-14"});  -- newest-first feed
'''

INDEXES_MD = r'''
create bucket Users { type: hash, indices: ["Email"] }
create bucket Users { type: hash, indices: [{field: "Email", unique: true}] }
db.Users.insert({_id_: "u1", Email: "dalek@example.com"})
create bucket Users { type: hash, Email string unique }
create bucket Orders { type: hash, indices: [{fields: ["CustomerID", "CreatedAt"]}] }
create bucket Sessions { type: hash, indices: [{field: "CreatedAt", expire_after_seconds: 3600}] }
db.Sessions.insert({_id_: "s1", CreatedAt: now()})
db.Users.stats()
'''


@pytest.mark.parametrize("script", [STORE_TYPES_MD, CASE_STUDY_MD, INDEXES_MD], ids=["store-types", "case-study", "indexes"])
def test_spec_examples_parse(script):
    found = list(statements(script))
    errors = [s for s in found if isinstance(s, HoardError)]
    assert not errors, errors
    assert len(found) == len([line for line in script.splitlines()
                              if line.strip() and not line.startswith(("--", " ", "}"))])


def test_spec_calls_on_verbs_not_yet_in_the_table_parse_but_are_refused_by_the_table():
    # search (indexes issue) and put(key, doc) on a keyed store field (store-fields issue)
    # are valid HQL; the operations table decides whether the verb and its arguments exist.
    for text in ['db.Orders.search({CustomerID: "c1", CreatedAt: ISODate("2026-09-29T10:00:00Z")})',
                 'db.Property["p1"].ExpenseByID.put("<expenseID>", {Amount: 120, Category: "boiler"})']:
        try:
            parse(text)
        except HoardError as e:
            assert not isinstance(e, SyntaxError_), e


# ---- lines, semicolons, comments --------------------------------------------------------------

def test_statements_split_on_semicolons_and_line_ends():
    found = parse("use app; show buckets\n\ndb.A.pop()   -- the oldest\n  ;; db.B.length();")
    assert [s.text for s in found] == ["use app", "show buckets", "db.A.pop()", "db.B.length()"]
    assert [(s.line, s.column) for s in found] == [(1, 1), (1, 10), (3, 1), (4, 6)]


def test_a_statement_may_span_lines():
    found = parse('db.Comments.push({\n  Author: "Bob",\n  Text: "Nice photo!"\n})\ndb.Comments\n  .pop()')
    assert [s.request["op"] for s in found] == ["push", "pop"]
    assert found[0].request["args"]["doc"] == {"Author": "Bob", "Text": "Nice photo!"}


def test_a_body_may_open_on_the_next_line():
    (stmt,) = parse("create bucket Q\n{\n  type: fifo\n}")
    assert stmt.request["options"] == {"type": "fifo"}


# ---- errors ----------------------------------------------------------------------------------

#: Common mistakes, each explained at its position: what to write instead.
MISTAKES = [
    # JavaScript and mongosh habits: the message names what HQL writes instead
    ("db.C.push({at: new Date()})", 1, 16,
     "HQL calls a value constructor without `new`: Date(\"2026-09-29\"), or Date() for now"),
    ('db.C.push({at: new ISODate("2026-01-01")})', 1, 16, "without `new`: ISODate("),
    ("db.C.push({at: Date.now()})", 1, 16, "the current time is now()"),
    ("db.C.push({content-type: 1})", 1, 12, 'a key with \'-\' in it is quoted: write "content-type"'),
    ("create bucket Q { segment-size: 1 }", 1, 19, "an option or field name is letters, digits and _"),
    ("db.C.push({a: /ab/})", 1, 15, "no /regex/ literal; write Regex("),
    ("db.C.push({a: +5})", 1, 15, "no '+' sign"),
    ("db.C.push({a: 1}) # note", 1, 19, "'--' starts a comment"),
    ("db.C.push({a: `x`})", 1, 15, "not backticks"),
    ("db.C.push({a = 1})", 1, 14, "with ':'"),
    ("db.C.push({a: \u201cx\u201d})", 1, 15, "a typographic quote"),
    ("db.C.push({a: 1_000})", 1, 15, "1_000 is not a number HQL reads"),
    ("db.C.push({a: 1n})", 1, 15, "1n is not a number HQL reads"),
    # unbalanced brackets: which one is open, or that nothing is
    ("db.C.push({a: 1}))", 1, 18, "this ')' closes nothing, no bracket is open"),
    ("db.C.push({a: [1, 2}})", 1, 20, "the '[' at line 1, column 15 is still open: close it with ']' first"),
    ("db.C.push({a: 1,\n  b: 2\ndb.C.pop()", 3, 1, "(the '{' at line 1, column 11 is still open)"),
    ("db.C.push({a: 1,\n  b: [2, 3}\n)", 2, 11, "the '[' at line 2, column 6 is still open"),
    # two statements on a line need a ';'
    ("db.C.push({a: 1}) db.C.pop()", 1, 19, "unexpected 'db'; expected '.' or ';' or the end of the line"),
]


@pytest.mark.parametrize("text,line,column,fragment", [
    ("show tables", 1, 6, "unexpected 'tables'; expected buckets or databases"),
    ("use app\ncreate bucket X { type: fifo\n  Email string unique \"x\" }", 3, 23, "unexpected '\"x\"'"),
    ("db.Comments.push({a: 1 b: 2})", 1, 24, "expected ',' or '}'"),
    ("db.Comments.push({a: 1}", 1, 24, "incomplete at end of input; expected ')' or ','"),
    ("creat database x", 1, 1, "expected alter, create, db"),
    ("db.Comments.push({a: 1});\ndb.Comments.pop(@)", 2, 17, "unexpected character '@'"),
    ("create bucket X {", 1, 18, "incomplete"),
    *MISTAKES,
])
def test_syntax_error_positions(text, line, column, fragment):
    with pytest.raises(SyntaxError_) as e:
        parse(text)
    assert (e.value.line, e.value.column) == (line, column)
    assert fragment in e.value.message
    assert e.value.message.startswith(f"line {line}, column {column}: ")


def test_parsing_goes_on_after_an_error_with_the_next_statement():
    script = "use app\ndb.A.push({a: 1 b: 2})\ndb.B.pop()\ncreate bucket C { type: fifo\ndb.D.pop()\n@ db.E.pop()\ndb.F.pop()"
    found = list(statements(script))
    shape = [type(s).__name__ if isinstance(s, HoardError) else s.request["bucket"] if s.request else s.kind
             for s in found]
    # The unclosed body swallows lines up to the next statement at the start of a line.
    assert shape == ["use", "SyntaxError_", "B", "SyntaxError_", "F"]


def test_statements_are_parsed_lazily():
    # The generator has not looked at line 2 when it hands over line 1.
    it = statements("db.A.pop()\ndb.B.pop(")
    assert next(it).request["bucket"] == "A"
    assert isinstance(next(it), SyntaxError_)


@pytest.mark.parametrize("text,complete", [
    ("db.Comments.pop()", True),
    ("db.Comments.push({a: 1", False),
    ("db.Comments.push({a: 1,\n", False),
    ("create bucket X {", False),
    ("create bucket X {\n  type: fifo\n", False),
    ("create bucket X {\n  type: fifo\n}", True),
    ("create bucket X", True),
    ("", True),
    ("-- just a comment", True),
    ("show tables", True),        # clearly wrong: run it, and show the error
    ('db.X.push({a: "open', True),
    ("use app; db.X.pop(", False),
])
def test_is_complete(text, complete):
    assert is_complete(text) is complete


# ---- audit: the mistakes a newcomer makes get a hint, at the right column --------------------------

def test_an_unclosed_bracket_at_the_end_names_where_it_opened():
    with pytest.raises(SyntaxError_) as e:
        parse("db.C.push({\n  a: 1,\n  b: 2\n")
    assert "incomplete at end of input" in e.value.message
    assert e.value.message.endswith("(the '{' at line 1, column 11 is still open)")


@pytest.mark.parametrize("text,fragment", [
    ("db.C.push({a: None})", "unquoted word None: HQL writes null"),
    ("db.C.push({a: undefined})", "unquoted word undefined: HQL writes null"),
    ("db.C.push({at: ISODate})", 'ISODate is a value constructor, so call it: ISODate("2026-09-29T10:00:00Z")'),
])
def test_bare_words_say_what_to_write(text, fragment):
    with pytest.raises(SyntaxError_, match=None) as e:
        parse(text)
    assert fragment in e.value.message


def test_a_field_line_typed_with_a_store_type_is_a_missing_colon_or_store():
    with pytest.raises(BadValueError) as e:
        parse("create bucket Q { type fifo }")  # was a hash bucket with a field named type
    assert "the bucket's type is the option `type: fifo`, with a colon" in e.value.message
    assert (e.value.line, e.value.column) == (1, 19)
    with pytest.raises(BadValueError, match="`Expenses lifoStore`"):
        parse("create bucket P { type: hash, Expenses lifo }")
    assert request("create bucket P { type string }")["options"]["fields"][0]["type"] == "string"


@pytest.mark.parametrize("text,guess", [
    ("db.Comments.psh({a: 1})", "push"),
    ("db.Comments.Push({a: 1})", "push"),
    ("db.Users.findOne({a: 1})", "find"),
    ("db.Users.stat()", "stats"),
    ('db.P["p1"].Expenses.psh({a: 1})', "push"),
])
def test_an_unknown_verb_suggests_the_one_meant(text, guess):
    with pytest.raises(UnknownVerbError) as e:
        parse(text)
    assert f"did you mean {guess}?" in e.value.message
    assert "verbs: " in e.value.message and "batchPush" not in e.value.message


def test_an_unknown_verb_on_a_store_field_is_unknown_verb_before_anything_runs():
    # hql.md: "A verb that does not exist is refused with UNKNOWN_VERB ... before anything runs";
    # on a store field it reached the engine and came back VERB_NOT_SUPPORTED.
    with pytest.raises(UnknownVerbError) as e:
        parse('db.Property["p1"].Expenses.frobnicate()')
    assert (e.value.line, e.value.column) == (1, 28)
    assert "did you mean" not in e.value.message
    assert "verbs: batch_push, delete, get" in e.value.message
    # a verb that exists but that no store field has still goes to the engine, which explains
    assert request('db.Property["p1"].Expenses.update({a: 1}, {$set: {b: 1}})')["op"] == "update"


# ---- lark's public API only --------------------------------------------------------------

def test_the_parser_uses_only_larks_public_api():
    # A lark upgrade must not break the shell: no import from lark's parser internals
    # (lark.parsers.lalr_analysis's Shift once was), no reading of its parse tables.
    import ast
    from pathlib import Path

    import hoarddb.hql

    for path in Path(hoarddb.hql.__file__).parent.glob("*.py"):
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lark"):
                assert node.module in ("lark", "lark.exceptions"), (path.name, node.module)
            if isinstance(node, ast.Import):
                assert all(a.name in ("lark",) or not a.name.startswith("lark") for a in node.names), path.name
            if isinstance(node, ast.Attribute):
                assert node.attr not in ("parser_state", "parse_conf", "parse_table", "states", "state_stack"), \
                    (path.name, node.attr, node.lineno)


@pytest.mark.parametrize("text,column", [("db.X.push({a: 1}})", 17), ("db.X.push({a: [1,]] })", 19)])
def test_a_token_refused_after_a_reduction_still_names_what_was_expected(text, column):
    # LALR may reduce before it finds that a bracket does not fit; the parser is rebuilt
    # from the statement's tokens so that the message lists what could have come there.
    found = list(statements(text + "\nshow databases"))
    assert isinstance(found[0], SyntaxError_) and found[0].column == column
    assert "expected ')' or ','" in found[0].message or "expected ',' or '}'" in found[0].message
    assert found[1].request == {"op": "list_databases"}


def test_a_body_line_break_lookahead_leaves_the_statement_whole():
    # A new line in a bucket body is fed to a copy first, to see whether the next line
    # continues it; what the statement parsed so far stays as it was.
    text = "create bucket X {\n  type:\n    hash\n  Email string unique\n  Exp lifoStore\n}\nshow buckets"
    first, second = parse(text)
    assert first.request["options"] == {"type": "hash",
                                        "fields": [{"name": "Email", "type": "string", "keywords": ["unique"]}],
                                        "store_fields": [{"name": "Exp", "type": "lifo"}]}
    assert second.request == {"op": "list_buckets"}


# ---- statements that end with their line, did you mean, what may come next -------------------------

@pytest.mark.parametrize("text,usage", [
    ("use", "write use NAME"), ("use\n", "write use NAME"), ("show", "write show databases or show buckets"),
    ("describe bucket", "write describe bucket NAME"), ("drop database;", "write drop database NAME"),
    ("drop", "write drop database NAME or drop bucket NAME"),
])
def test_one_line_statements_are_refused_at_their_lines_end(text, usage):
    # `use` on its own waited for a name and took the next line as it.
    assert is_complete(text)  # the shell answers at once instead of reading another line
    found = list(statements(text + "\nshow databases"))
    assert isinstance(found[0], SyntaxError_) and found[0].message.endswith(usage)
    assert found[1].request == {"op": "list_databases"}


def test_other_statements_still_span_lines():
    assert not is_complete("create bucket X {") and not is_complete("db.X.push(")
    assert parse("create bucket X\n{ type: fifo }")[0].request["options"] == {"type": "fifo"}


@pytest.mark.parametrize("text,meant", [("shwo buckets", "show"), ("show bukets", "buckets"),
                                        ("create buckt X", "bucket"), ("DESCRIBE BUCKT X", "bucket")])
def test_a_mistyped_keyword_gets_did_you_mean(text, meant):
    with pytest.raises(SyntaxError_, match=rf"did you mean {meant}\?$"):
        parse(text)


def test_next_keywords_are_what_the_grammar_takes_there():
    from hoarddb.hql.parser import next_keywords

    starts = ["alter", "create", "db", "describe", "drop", "exit", "help", "quit", "show", "use"]
    assert next_keywords("") == starts and next_keywords("use app; ") == starts
    assert next_keywords("describe ") == ["bucket"]
    assert next_keywords("drop ") == ["bucket", "database"]
    assert next_keywords("db.X.push(") == [] and next_keywords("create bucket X ") == []


def test_an_unknown_verb_says_what_it_was_called_on():
    found = list(statements('db.Q.psh(1)\ndb.Q["k"].F.pus(1)'))
    assert [e.called_on for e in found] == [("Q", None, "psh"), ("Q", "F", "pus")]


# -- find and search chain mongosh's cursor methods -------------------------------------------

@pytest.mark.parametrize("text, request_", [
    ('db.T.find({Cat: "x"}).sort({Date: -1}).limit(10)',
     {"op": "find", "bucket": "T", "args": {"filter": {"Cat": "x"}, "sort": {"Date": -1}, "limit": 10}}),
    ("db.T.search({a: 1}).skip(5).limit(5).projection({a: 1, _id_: 0})",
     {"op": "search", "bucket": "T", "args": {"filter": {"a": 1}, "skip": 5, "limit": 5,
                                              "projection": {"a": 1, "_id_": 0}}}),
    ("db.T.find({a: 1}).sort({b: 1}).count()", {"op": "count", "bucket": "T", "args": {"filter": {"a": 1}}}),
    ("db.T.find({a: 1}).explain()", {"op": "search", "bucket": "T", "args": {"filter": {"a": 1}, "explain": True}}),
])
def test_chained_cursor_methods(text, request_):
    (statement,) = list(statements(text))
    assert statement.request == request_


@pytest.mark.parametrize("text, says", [
    ('db.T.get("k").sort({a: 1})', "get() takes no chained methods; find, search, window do"),
    ("db.T.find().next()", "unknown method .next() after find(); accepted: .limit(), .sort(), .skip(), "
                           ".projection(), .batch_size(), .count(), .explain()"),
    ("db.T.find().limit()", ".limit() takes one argument"),
    ("db.T.find().count(5)", ".count() takes no arguments"),
    ('db.T.find().limit("ten")', "limit"),
    ("db.T.find().filter({a: 1})", "unknown method .filter()"),
])
def test_chained_cursor_method_refusals(text, says):
    (err,) = list(statements(text))
    assert says in err.message
