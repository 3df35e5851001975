"""The shell on an embedded engine: the spec's store-type examples as written, answers checked.

Every script test runs twice, through the same ``run`` fixture: in process
(``hoarddb.shell.run_script``) and as ``python -m hoarddb.cli shell --data DIR --json -f FILE``
in a child process, so both faces answer alike.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hoarddb
from hoarddb import operations
from hoarddb.shell import Shell, completions, help_text, run_script

from .hql.test_parser import PHOTOJOURNAL_SCHEMA

REPO = Path(__file__).resolve().parents[1]


class Ran:
    """What one shell run printed: its exit status, stdout lines and stderr."""

    def __init__(self, code: int, out: str, err: str, json_mode: bool):
        self.code, self.out, self.err = code, out, err
        self.lines = out.splitlines()
        self.answers = [json.loads(line) for line in self.lines] if json_mode else None

    def results(self) -> list:
        return [a.get("result") for a in self.answers]


def run_in_process(data: Path, text: str, *, json_mode: bool = True, continue_on_error: bool = False) -> Ran:
    out, err = io.StringIO(), io.StringIO()
    with hoarddb.open(data) as client:
        code = run_script(client, text, json_mode=json_mode, continue_on_error=continue_on_error, out=out, err=err)
    return Ran(code, out.getvalue(), err.getvalue(), json_mode)


def run_subprocess(data: Path, text: str, *, json_mode: bool = True, continue_on_error: bool = False) -> Ran:
    script = data.parent / f"script-{os.getpid()}-{abs(hash(text))}.hql"
    script.write_text(text, encoding="utf-8")
    args = [sys.executable, "-m", "hoarddb.cli", "shell", "--data", str(data), "-f", str(script)]
    args += ["--json"] if json_mode else []
    args += ["--continue-on-error"] if continue_on_error else []
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(args, capture_output=True, text=True, cwd=REPO, env=env, timeout=60, stdin=subprocess.DEVNULL)
    return Ran(done.returncode, done.stdout, done.stderr, json_mode)


@pytest.fixture(params=["in-process", "subprocess"])
def run(request, tmp_path):
    """``run(text, json_mode=True, continue_on_error=False) -> Ran`` on one data directory."""
    runner = run_in_process if request.param == "in-process" else run_subprocess
    data = tmp_path / "data"
    return lambda text, **kw: runner(data, text, **kw)


def ok(ran: Ran) -> list:
    assert ran.code == 0, ran.out + ran.err
    assert all(a["ok"] == 1 for a in ran.answers), ran.out
    return ran.results()


# ---- the examples of store-types.md, as the spec writes them ------------------------------------

def test_fifo(run):
    results = ok(run("""
        use MyApp
        create bucket Comments { type: fifo }
        -- Push: append to tail
        db.Comments.push({Author: "Bob", Text: "Nice photo!"});
        db.Comments.push({Author: "Ann", Text: "Me too"});
        -- Peek: look at head without removing
        db.Comments.peek();
        -- Peek N: look at next N without removing
        db.Comments.peek(5);
        db.Comments.peek({limit: 1});
        -- Length: number of items
        db.Comments.length();
        -- Pop: remove and return from head (oldest first)
        db.Comments.pop();
        db.Comments.length();
    """))
    bob, ann = {"Author": "Bob", "Text": "Nice photo!"}, {"Author": "Ann", "Text": "Me too"}
    assert results[2:] == [None, None, bob, [bob, ann], [bob], 2, bob, 1]


def test_lifo(run):
    results = ok(run("""
        use MyApp
        create bucket Sessions { type: lifo }
        db.Sessions.push({IP: "10.0.0.7", UA: "Firefox"});
        db.Sessions.push({IP: "192.168.1.1", UA: "Chrome"});
        db.Sessions.peek();
        db.Sessions.pop();
        -- Returns: {IP: "192.168.1.1", UA: "Chrome"}
        db.Sessions.pop();
        db.Sessions.length();
    """))
    assert results[4:] == [{"IP": "192.168.1.1", "UA": "Chrome"}, {"IP": "192.168.1.1", "UA": "Chrome"},
                           {"IP": "10.0.0.7", "UA": "Firefox"}, 0]


def test_hash(run):
    results = ok(run("""
        use MyApp
        create bucket User { type: hash }
        db.User.insert({_id_: "jane_doe", Name: "Jane", Email: "jane@example.com"});
        db.User.find({_id_: "jane_doe"});
        db.User.find({Email: "jane@example.com"});
        db.User.update({_id_: "jane_doe"}, {$set: {Name: "Janet"}});
        db.User.get("jane_doe");
        db.User.count();
        db.User.delete({_id_: "jane_doe"});
        db.User.count();
    """))
    jane = {"_id_": "jane_doe", "Name": "Jane", "Email": "jane@example.com"}
    assert results[2:5] == ["jane_doe", [jane], [jane]]
    assert results[5]["matched"] == 1
    assert results[6] == {**jane, "Name": "Janet"}
    assert results[7] == 1 and results[9] == 0


def test_btree_leaderboard(run):
    results = ok(run("""
        use MyApp
        create bucket Leaderboard { type: btree, key: Score }
        db.Leaderboard.insert({Score: 100, User: "jane"});
        db.Leaderboard.insert({Score: 85, User: "bob"});
        db.Leaderboard.insert({Score: 92, User: "alice"});
        db.Leaderboard.get({Score: 92});
        db.Leaderboard.range({Score: {$gte: 90}});
        -- Returns all entries with Score >= 90
        db.Leaderboard.first();
        db.Leaderboard.last();
        db.Leaderboard.length();
    """))
    jane, bob, alice = ({"Score": 100, "User": "jane"}, {"Score": 85, "User": "bob"}, {"Score": 92, "User": "alice"})
    assert results[5:] == [alice, [alice, jane], bob, jane, 3]


def test_heap_pop_then_peek(run):
    results = ok(run("""
        use MyApp
        create bucket Alerts { type: heap }
        db.Alerts.push({priority: 10, Msg: "Disk full", Host: "node-1"});
        db.Alerts.push({priority: 5, Msg: "High CPU", Host: "node-2"});
        db.Alerts.push({priority: 8, Msg: "Network latency", Host: "node-3"});
        db.Alerts.pop();
        db.Alerts.peek();
        db.Alerts.length();
    """))
    assert results[5:] == [{"priority": 10, "Msg": "Disk full", "Host": "node-1"},
                           {"priority": 8, "Msg": "Network latency", "Host": "node-3"}, 2]


def test_blob_put_info_get_stream_delete(run):
    put = ok(run("""
        use MyApp
        create bucket Photos { type: blob }
        db.Photos.put({data: BinData(0, "aGVsbG8gd29ybGQ="), name: "sunset.jpg", type: "image/jpeg"});
    """))
    blob_id = put[2]
    assert isinstance(blob_id, str) and len(blob_id) == 36
    sha = "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"  # sha256("hello world")
    results = ok(run(f"""
        use MyApp
        db.Photos.info({{_id_: "{blob_id}"}});
        db.Photos.get({{_id_: "{blob_id}"}});
        db.Photos.stream({{_id_: "{blob_id}"}});
        db.Photos.delete({{_id_: "{blob_id}"}});
    """))
    info, got, streamed = results[1:4]
    assert (info["name"], info["type"], info["size"], info["sha256"]) == ("sunset.jpg", "image/jpeg", 11, sha)
    assert "data" not in info
    assert got["data"] == {"$binary": {"base64": "aGVsbG8gd29ybGQ=", "subType": "00"}}
    assert (got["name"], got["sha256"]) == ("sunset.jpg", sha)
    assert streamed == {"size": 11, "sha256": sha}
    gone = run(f'use MyApp; db.Photos.info("{blob_id}")')
    assert gone.code == 1 and gone.answers[-1]["codeName"] == "NOT_FOUND"


def test_blob_readable(run):
    ok(run('use MyApp\ncreate bucket Photos { type: blob }'))
    blob_id = ok(run('use MyApp; db.Photos.put({data: BinData(0, "aGk="), name: "hi.txt"})'))[1]
    ran = run(f'use MyApp; db.Photos.get("{blob_id}"); db.Photos.stream("{blob_id}")', json_mode=False)
    assert ran.code == 0, ran.err
    assert 'data: BinData(0, "aGk=")' in ran.out
    assert "2 bytes, sha256 8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4" in ran.out


# ---- output shape, errors, exit status ----------------------------------------------------------

def test_json_is_one_line_per_statement(run):
    ran = run('use app; create bucket Q { type: fifo }\ndb.Q.push({a: {b: [1, 2]}, at: ISODate("2026-09-29T10:00:00Z")})\n'
              "db.Q.peek(); help push; exit\ndb.Q.pop()")
    assert len(ran.lines) == 6  # exit ends the script: the pop never runs
    assert ran.answers[0] == {"ok": 1, "result": {"db": "app"},
                              "warnings": ["database 'app' does not exist yet; `create database app` or "
                                           "`create bucket` makes it"]}
    assert ran.answers[3] == {"ok": 1, "result": {"a": {"b": [1, 2]}, "at": {"$date": "2026-09-29T10:00:00Z"}}}
    assert ran.answers[4]["result"].startswith("push(doc)")
    assert ran.answers[5] == {"ok": 1, "result": None}


def test_warnings_and_index_used_are_kept(run):
    ran = run('use app; create bucket U { type: hash, Name string required }; db.U.insert({_id_: "a", Name: "x"})'
              '; db.U.search({Name: "x"})')
    assert ran.code == 0, ran.out
    assert any("required" in w for w in ran.answers[1]["warnings"])
    assert ran.answers[3]["index_used"] == "none — full scan"
    assert list(ran.answers[3])[:2] == ["ok", "result"]


def test_stops_at_the_first_failing_statement(run):
    ran = run("use app; create bucket Q { type: fifo }; db.Q.insert({a: 1}); db.Q.push({a: 1}); db.Q.length()")
    assert ran.code == 1
    assert len(ran.answers) == 3
    assert ran.answers[2] == {"ok": 0, "code": 10, "codeName": "VERB_NOT_SUPPORTED", "message": ran.answers[2]["message"]}


def test_continue_on_error_runs_the_rest_and_still_fails(run):
    ran = run("use app; create bucket Q { type: fifo }; db.Q.insert({a: 1}); db.Q.push({a: 1 b: 2})\n"
              "db.Q.push({a: 1}); db.Q.length()", continue_on_error=True)
    assert ran.code == 1
    assert [a["ok"] for a in ran.answers] == [1, 1, 0, 0, 1, 1]
    assert ran.answers[3]["codeName"] == "SYNTAX_ERROR"
    assert ran.answers[3]["message"].startswith("line 1, column 79: unexpected 'b'")
    assert ran.answers[-1]["result"] == 1


def test_a_statement_that_does_not_parse_runs_nothing(run):
    ran = run("use app; create bucket Q { type: fifo }\ndb.Q.push({a: 1}) db.Q.push({a: 2})\ndb.Q.length()",
              continue_on_error=True)
    assert ran.answers[2]["codeName"] == "SYNTAX_ERROR"
    assert ran.answers[-1]["result"] == 0


def test_readable_mode_prints_documents_and_errors(run):
    ran = run('use app\ncreate bucket C { type: fifo }\ndb.C.push({Author: "Bob", Text: "Nice photo!"})\n'
              "db.C.pop()\ndescribe bucket C\ndb.C.insert({})", json_mode=False)
    assert ran.code == 1
    assert ran.lines[:4] == ["switched to database app", '{name: "C", type: "fifo"}', "ok",
                             '{Author: "Bob", Text: "Nice photo!"}']
    assert ran.lines[4:7] == ["Bucket:   C", "Type:     fifo", "Entries:  0"]
    assert "Indexes:  none" in ran.lines
    assert "error VERB_NOT_SUPPORTED (10): fifo bucket 'C' has no verb 'insert'" in ran.err
    assert "warning: database 'app' does not exist yet" in ran.err


def test_calls_before_use_are_refused(run):
    ran = run("db.Comments.pop()")
    assert ran.code == 1
    assert ran.answers == [{"ok": 0, "code": 6, "codeName": "DATABASE_NOT_FOUND",
                            "message": ran.answers[0]["message"]}]
    assert "use <name>" in ran.answers[0]["message"]


def test_store_field_calls_reach_the_engine(run):
    ran = run('use app; create bucket Property { type: hash, Expenses lifoStore }\n'
              'db.Property.insert({_id_: "p1"})\ndb.Property["p1"].Expenses.push({Amount: 120})')
    # Parsed into a store-field request; the engine answers for it (refuses until store fields land).
    assert ran.answers[1]["ok"] == 1 and ran.answers[2]["ok"] == 1
    assert ran.answers[3]["ok"] == 1 or ran.answers[3]["codeName"] == "VERB_NOT_SUPPORTED"


# ---- help and completion, from the operations table ----------------------------------------------

def test_help_lists_statements_and_every_verb():
    text = help_text()
    for op in {op.name for op in operations.VERBS.values()}:
        assert f"  {op}(" in text
    assert "create bucket NAME" in text and "ISODate(" in text
    push = help_text("push")
    assert push.splitlines()[0].startswith("push(doc)  —  fifo, lifo, heap")
    assert operations.verb("push").example in push
    assert "batchInsert" in help_text("batch_insert") and help_text("batchInsert") == help_text("batch_insert")
    assert "ISODate" in help_text("isodate")


def test_completion(tmp_path):
    with hoarddb.open(tmp_path / "data") as client:
        shell = Shell(client, out=io.StringIO(), err=io.StringIO())
        assert shell.run_text("use app; create bucket Comments { type: fifo }; create bucket Users { type: hash,"
                              " Expenses lifoStore }")
        assert completions(shell, "db.Co") == ("Co", ["Comments", "Users"])
        assert completions(shell, 'db["U')[1] == ["Comments", "Users"]
        word, verbs = completions(shell, "db.Comments.p")
        assert word == "p" and set(verbs) == set(operations.verbs_for("fifo")) | {"batchPush", "stats"}
        assert "insert" not in verbs
        assert "find" in completions(shell, "db.Users.")[1]
        assert completions(shell, 'db.Users["u1"].Expenses.')[1] == sorted(  # a store field's own verbs
            set(operations.field_verbs_for("lifo")) | {"batchPush"})
        assert completions(shell, "describe bucket ")[1] == ["Comments", "Users"]
        assert completions(shell, "use ")[1] == ["app"]
        assert "create" in completions(shell, "cr")[1]
        assert "ISODate" in completions(shell, "db.Comments.push({at: IS")[1]
        assert "push" in completions(shell, "help pu")[1]
        # A bucket created later is offered too.
        shell.run_text("create bucket Cats { type: lifo }")
        assert "Cats" in completions(shell, "db.C")[1]


# ---- audit: values that used to break the shell ---------------------------------------------------

def test_a_date_out_of_range_is_a_bad_value_not_a_traceback(run):
    # ISODate("9999-12-31T23:59:59.999-05:00") overflowed in the parser: the shell died with a
    # traceback and no JSON line; now it is one BAD_VALUE line and the script goes on.
    ran = run('show databases\ndb.X.push({a: ISODate("9999-12-31T23:59:59.999-05:00")})\nshow databases',
              continue_on_error=True)
    assert ran.code == 1
    assert [a["ok"] for a in ran.answers] == [1, 0, 1]
    assert ran.answers[1]["codeName"] == "BAD_VALUE"
    assert ran.answers[1]["message"].startswith("line 2, column 15: ")


def test_a_lone_surrogate_is_a_bad_value(run):
    ran = run(r'use app; create bucket C { type: fifo }; db.C.push({a: "\ud83d"}); db.C.length()',
              continue_on_error=True)
    assert ran.answers[2]["codeName"] == "BAD_VALUE"  # was INTERNAL_ERROR from the engine's BSON encoder
    assert ran.answers[3]["result"] == 0


def test_readable_output_of_dbref_and_code_reads_back(run):
    # BSON decodes {$ref, $id} as a DBRef, which used to print as <DBRef DBRef('u', 1)>.
    ran = run('use app\ncreate bucket C { type: fifo }\ndb.C.push({r: {$ref: "u", $id: 1}, c: Code("f()")})\n'
              "db.C.peek()", json_mode=False)
    assert ran.code == 0, ran.err
    assert ran.lines[-1] == '{r: {$ref: "u", $id: 1}, c: Code("f()")}'


# ---- audit: what a newcomer meets ------------------------------------------------------------------

def test_engine_refusals_name_the_hql_statement_to_run(run):
    # The engine words its hints in operation names ("create it with create_database"), which
    # HQL does not parse; the shell says the statement to type instead, code unchanged.
    ran = run("use nodb; db.Comments.push({a: 1})")
    assert ran.code == 1 and ran.answers[1]["codeName"] == "DATABASE_NOT_FOUND"
    assert "create it with `create database nodb`" in ran.answers[1]["message"]
    assert "create_database" not in ran.answers[1]["message"]
    ran = run("use app; create bucket Comments { type: fifo }; db.Coments.push({a: 1})")
    assert ran.answers[2]["codeName"] == "BUCKET_NOT_FOUND"
    assert "its buckets: Comments" in ran.answers[2]["message"]
    assert "Create it with `create bucket Coments { type: ... }`" in ran.answers[2]["message"]


def test_every_error_with_a_position_shows_its_line_and_a_caret(tmp_path):
    err = io.StringIO()
    with hoarddb.open(tmp_path / "data") as client:
        shell = Shell(client, out=io.StringIO(), err=err)
        text = 'use app\n\tdb.C.push({n: 99999999999999999999})'
        assert not shell.run_text(text, continue_on_error=True, show_source=True)
    lines = err.getvalue().splitlines()
    assert lines[-3].startswith("error BAD_VALUE (2): line 2, column 16: integer 99999999999999999999")
    # a BAD_VALUE has its position as a syntax error does; a tab stays a tab, so the caret lines up
    assert lines[-2:] == ["  \tdb.C.push({n: 99999999999999999999})", "  \t              ^"]


def test_warnings_and_errors_follow_their_answers_on_one_pipe(tmp_path):
    # `hoardDB ... 2>&1 | less`: with stdout block-buffered, a warning came out before the line it is about.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-m", "hoarddb.cli", "shell", "--data", str(tmp_path / "d"), "-e",
                           "use app; create bucket C { type: fifo, Name string required }; db.C.pop(); db.X.pop()"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO, timeout=60,
                          stdin=subprocess.DEVNULL)
    lines = done.stdout.splitlines()
    assert [line.split(":")[0].split(" ")[0] for line in lines] == [
        "switched", "warning", "{name", "warning", "null", "error"], done.stdout


def test_store_types_photojournal_schema_runs_as_written(run):
    # store-types.md's example schema begins `create database PhotoJournal;` and goes on with
    # its buckets; every create bucket was refused (no database selected).
    ran = run(PHOTOJOURNAL_SCHEMA + "show buckets\n")
    assert ok(ran)[-1] == ["Post", "PostComments", "PostPhotos", "User", "UserFriends"]
    readable = run("create database Other\nshow buckets\ncreate database Third\nuse Third", json_mode=False)
    assert readable.lines[:3] == ["ok", "switched to database Other", "(none)"]
    assert readable.lines[3] == "ok"  # a database was current: create database leaves it so


def test_help_on_a_typo_suggests_the_topic():
    from hoarddb.errors import UnknownVerbError

    with pytest.raises(UnknownVerbError, match=r"did you mean help push\?"):
        help_text("pus")
    with pytest.raises(UnknownVerbError, match=r"did you mean help ISODate\?"):
        help_text("isodat")


# ---- the shell a newcomer meets: verbs of the bucket, did you mean, explain, use ---------------------

def test_an_unknown_verb_lists_the_verbs_of_the_buckets_own_type(run):
    ran = run('use app\ncreate bucket Q { type: fifo }\ncreate bucket U { type: hash, Expenses lifoStore }\n'
              'db.Q.psh({a: 1})\ndb.U.lenght()\ndb.U["u1"].Expenses.pusj(1)\ndb.Nope.psh(1)', continue_on_error=True)
    fifo, hash_, field, nowhere = ran.answers[3:]
    assert fifo["codeName"] == "UNKNOWN_VERB"
    assert fifo["message"] == (
        "line 4, column 6: unknown verb 'psh'; did you mean push? verbs of fifo bucket 'Q': "
        + ", ".join(sorted(set(operations.verbs_for("fifo")) | {"stats"})) + " (help VERB describes one)")
    assert "did you mean length?" in hash_["message"] and "verbs of hash bucket 'U': " in hash_["message"]
    assert "find" in hash_["message"] and "push" not in hash_["message"]  # not the 27 verbs of every type
    assert field["message"] == (
        "line 6, column 21: unknown verb 'pusj'; did you mean push? verbs of lifo store field U.Expenses: "
        + ", ".join(operations.field_verbs_for("lifo")) + " (help VERB describes one)")
    # a bucket that does not exist: every verb, as the parser says it
    assert "did you mean push? verbs: ack, aggregate, batch_insert" in nowhere["message"]
    # a verb of another store type: whose it is
    ran = run("use app\ncreate bucket U { type: hash }\ndb.U.psh({a: 1})", continue_on_error=True)
    assert ("unknown verb 'psh'; push is a verb of fifo, lifo and heap buckets, not this one; verbs of hash "
            "bucket 'U': ") in ran.answers[2]["message"]


def test_did_you_mean_a_statement_or_a_bucket_in_another_case(run):
    ran = run("shwo buckets\nuse app\ncreate bucket Users { type: hash }\ndb.users.find()\ndb.Usrs.find()\nuse App",
              continue_on_error=True)
    assert ran.answers[0]["codeName"] == "SYNTAX_ERROR" and ran.answers[0]["message"].endswith("did you mean show?")
    case = ran.answers[3]
    assert case["codeName"] == "BUCKET_NOT_FOUND"
    assert case["message"] == ("bucket 'users' does not exist in database 'app'; did you mean 'Users'? "
                               "Bucket names are case-sensitive.")
    assert "did you mean 'Users'?" in ran.answers[4]["message"] and "its buckets: Users" in ran.answers[4]["message"]
    assert ran.answers[5]["warnings"] == ["database 'App' does not exist; did you mean `use app`? "
                                          "Names are case-sensitive"]


def test_search_with_explain_prints_the_plan_in_the_readable_shell(run):
    script = ('use app\ncreate bucket O { type: hash, indices: ["C"] }\ndb.O.insert({_id_: "o1", C: 1})\n'
              'db.O.search({C: 1}, {explain: true})\ndb.O.search({D: 2}, {explain: true})\ndb.O.search({C: 1})')
    ran = run(script, json_mode=False)
    assert ran.code == 0, ran.err
    plan = ran.out[ran.out.index('[{_id_: "o1", C: 1}]'):].splitlines()
    assert plan[:9] == ['[{_id_: "o1", C: 1}]', "-- plan:", "--   index used:    C_1", "--   keys examined: 1",
                        "--   docs examined: 1", "--   returned:      1", '--   served:        {equality: ["C"]}',
                        "--   considered:", "--     C_1 (covers 1 field): chosen"]
    assert plan[9:12] == ["[]", "-- plan:", "--   index used:    none — full scan"]
    assert plan[-1] == '[{_id_: "o1", C: 1}]'  # without explain: the documents only
    assert ran.out.count("-- plan:") == 2


def test_use_without_a_name_is_refused_at_once_and_the_next_line_stands_alone(run):
    ran = run("use\nshow databases\ncreate database app\ndescribe\n  bucket X", continue_on_error=True)
    assert ran.answers[0] == {"ok": 0, "code": 20, "codeName": "SYNTAX_ERROR", "message":
                              "line 1, column 4: the statement is incomplete at end of line; expected a name or a "
                              "string; write use NAME"}
    assert ran.answers[1] == {"ok": 1, "result": []}  # not `use show`
    assert "write describe bucket NAME" in ran.answers[3]["message"]


def test_completion_offers_the_keywords_the_grammar_takes_there(tmp_path):
    with hoarddb.open(tmp_path / "data") as client:
        shell = Shell(client, out=io.StringIO(), err=io.StringIO())
        assert completions(shell, "describe ") == ("", ["bucket"])
        assert completions(shell, "describe bu") == ("bu", ["bucket"])
        assert completions(shell, "show ")[1] == ["buckets", "databases"]
        assert completions(shell, "create ")[1] == ["bucket", "database"]
        starts = ["alter", "create", "db", "describe", "drop", "exit", "help", "quit", "show", "use"]
        assert completions(shell, "")[1] == starts
        assert completions(shell, "show databases; d") == ("d", starts)
        assert completions(shell, "create bucket X ")[1] == []
