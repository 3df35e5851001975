"""The shell and HQL examples of README.md, docs/user/hql.md and docs/user/shell.md, run as written.

The pages mark their examples, and this file runs them:

* a ```hql block is a script that runs on a fresh database with every statement succeeding;
* a ```text block is schematic (``db.Bucket.verb(arg, ...)``) and is not run;
* README's session (``$ hoarddb shell --data ./data``, then ``app> `` prompts) must print
  exactly what it shows, and its server and Python examples must work against that data;
* shell.md's script lines, its ``describe bucket`` sample and its error lines, and hql.md's
  values table and syntax-error sample, are checked one by one below.

A page that gains an untagged fence fails ``test_every_fence_says_whether_it_runs``.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import hoarddb
from hoarddb.hql import parse_value
from hoarddb.shell import Shell, run_script

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
HQL_MD = REPO / "docs" / "user" / "hql.md"
SHELL_MD = REPO / "docs" / "user" / "shell.md"
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))

#: How the pages' commands run here: the same entry points, through this interpreter.
COMMANDS = {
    "hoarddb": [sys.executable, "-m", "hoarddb.cli"],
    "hoardDB": [sys.executable, "-c", "from hoarddb.cli import shell_main; shell_main(prog_name='hoardDB')"],
}


def fences(path: Path) -> list[tuple[str, str]]:
    """Every fenced block of a page: (its language tag, or "", its text)."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```$", path.read_text(), re.M | re.S)]


def indented(path: Path) -> list[str]:
    """Every indented code block of a page, outside fences, its four spaces taken off."""
    text = re.sub(r"^```.*?^```$", "", path.read_text(), flags=re.M | re.S)
    blocks = re.findall(r"(?:^\n)((?:(?: {4}.*|)\n)+)", text, re.M)
    return [re.sub(r"^ {4}", "", b, flags=re.M).strip("\n") for b in blocks if b.strip()]


def command(line: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run a page's command line (``echo '...' | hoarddb shell ...`` too) with the entry points above."""
    stdin = None
    if "|" in line:
        producer, line = (part.strip() for part in line.split("|", 1))
        stdin = shlex.split(producer)[1] + "\n"
    argv = shlex.split(line)
    return subprocess.run(COMMANDS[argv[0]] + argv[1:], input=stdin, capture_output=True, text=True, cwd=cwd,
                          env=ENV, timeout=60)


# ---- README ----------------------------------------------------------------------------------------

def readme_session() -> tuple[str, list[tuple[str, list[str]]]]:
    """README's shell session: its data directory, and each statement with the lines it prints."""
    (block,) = [text for _, text in fences(README) if text.startswith("$ hoarddb shell")]
    first, *lines = block.splitlines()
    data = shlex.split(first[2:])[shlex.split(first[2:]).index("--data") + 1]
    steps: list[tuple[str, list[str]]] = []
    for line in lines:
        prompt = re.match(r"^[\w-]+> (.*)$", line)
        if prompt:
            steps.append((prompt.group(1), []))
        else:
            steps[-1][1].append(line)
    return data, steps


def run_readme_session(cwd: Path) -> Path:
    data, steps = readme_session()
    screen = io.StringIO()  # standard output and standard error on one terminal
    with hoarddb.open(cwd / data) as client:
        shell = Shell(client, out=screen, err=screen)
        for statement, shown in steps:
            start = screen.tell()
            assert shell.run_text(statement), screen.getvalue()
            assert screen.getvalue()[start:].splitlines() == shown, statement
    return cwd / data


def test_readme_session_prints_what_it_shows(tmp_path):
    run_readme_session(tmp_path)


def test_readme_server_and_python_examples(tmp_path):
    from hoarddb.testing import ServerProcess

    data = run_readme_session(tmp_path)
    python = [text for lang, text in fences(README) if lang == "python"]
    started, connect = [t for t in python if "hoarddb.open" in t], [t for t in python if "hoarddb.connect" in t]
    exec(compile(started[0].replace('"./pydata"', repr(str(tmp_path / "pydata"))), "README.md", "exec"), {})
    (server_block,) = [text for _, text in fences(README) if text.startswith("$ hoarddb server")]
    shell_line = [line[2:] for line in server_block.splitlines() if line.startswith("$ hoardDB")][0]
    with ServerProcess(data, port=0) as server:
        done = command(f"{shell_line} --port {server.port}", tmp_path)
        assert (done.returncode, done.stdout) == (0, "switched to database app\nComments\n"), done.stderr
        url = re.search(r'hoarddb\.connect\("([^"]+)"\)', connect[0]).group(1).replace(":7070", f":{server.port}")
        with hoarddb.connect(url) as client:
            assert client["app"].buckets() == ["Comments"]


# ---- hql.md ----------------------------------------------------------------------------------------

def test_every_fence_says_whether_it_runs():
    for page in (HQL_MD, SHELL_MD):
        assert {lang for lang, _ in fences(page)} <= {"hql", "text"}, page


@pytest.mark.parametrize("block", [text for lang, text in fences(HQL_MD) if lang == "hql"],
                         ids=lambda text: text.splitlines()[1][:30])
def test_hql_md_blocks_run_as_written(tmp_path, block):
    out, err = io.StringIO(), io.StringIO()
    with hoarddb.open(tmp_path / "data") as client:
        code = run_script(client, block, json_mode=True, out=out, err=err)
    answers = [json.loads(line) for line in out.getvalue().splitlines()]
    assert code == 0 and all(a["ok"] == 1 for a in answers), answers
    if "db.Comments.peek(5)" in block:  # the comment inside the document is not part of it
        bob = {"Author": "Bob", "Text": "Nice photo!"}
        assert [a["result"] for a in answers[-3:]] == [None, [bob], 1]


def test_hql_md_values_table_parses():
    table = HQL_MD.read_text().split("| you write | you get |")[1].split("\n\n")[0]
    written = [span for row in table.splitlines()[2:] for span in re.findall(r"`([^`]+)`", row.split(" | ")[0])]
    assert len(written) > 25
    for text in written:
        if "..." not in text:  # {Name: "Jane", $set: {...}} shows a shape
            parse_value(text)
    with pytest.raises(hoarddb.HoardError, match='write a string as "hello"'):
        parse_value("{a: hello}")  # "A bare word anywhere else is an error ... suggests quoting it"


def test_hql_md_syntax_error_sample(tmp_path):
    (sample,) = [b for b in indented(HQL_MD) if "error SYNTAX_ERROR" in b]
    statement, shown = sample.split("\n\n")
    err = io.StringIO()
    with hoarddb.open(tmp_path / "data") as client:
        assert run_script(client, "use app\ncreate bucket Comments { type: fifo }", out=io.StringIO(),
                          err=io.StringIO()) == 0
        assert run_script(client, statement, db="app", out=io.StringIO(), err=err) == 1
    assert err.getvalue().splitlines()[0] == shown


# ---- shell.md --------------------------------------------------------------------------------------

def test_shell_md_script_lines(tmp_path):
    run_readme_session(tmp_path)  # ./data as README leaves it: app.Comments, empty again
    (lines,) = [b for b in indented(SHELL_MD) if b.startswith("hoarddb shell --data ./data -e")]
    (tmp_path / "setup.hql").write_text("use app\ncreate bucket Setup { type: hash }\n")
    execute, script, piped = (command(line, tmp_path) for line in lines.splitlines())
    assert (execute.returncode, execute.stdout) == (0, "switched to database app\n0\n"), execute.stderr
    assert (script.returncode, script.stdout) == (0, 'switched to database app\n{name: "Setup", type: "hash"}\n')
    assert (piped.returncode, piped.stdout) == (0, '{"ok": 1, "result": ["app"]}\n')


def test_shell_md_describe_sample(tmp_path):
    (sample,) = [b for b in indented(SHELL_MD) if b.startswith("Bucket:   Users")]
    out = io.StringIO()
    with hoarddb.open(tmp_path / "data") as client:
        assert run_script(client, """
use app
create bucket Users {
    type: hash, Email string unique,
    indices: [{fields: ["CustomerID", "CreatedAt"]}, {field: "CreatedAt", expire_after_seconds: 3600}]
}
db.Users.insert({_id_: "u1", Email: "a@example.com"})
db.Users.insert({_id_: "u2", Email: "b@example.com"})
describe bucket Users
""", out=out, err=io.StringIO()) == 0
    shown = out.getvalue().splitlines()[-len(sample.splitlines()):]
    bytes_line = r"Bytes:    \d+ on disk, \d+ of data"
    assert [re.sub(bytes_line, "Bytes:    N on disk, M of data", line) for line in shown] == \
           [re.sub(bytes_line, "Bytes:    N on disk, M of data", line) for line in sample.splitlines()]


def test_shell_md_error_and_warning_lines(tmp_path):
    (sample,) = [b for b in indented(SHELL_MD) if b.startswith("error DUPLICATE_KEY")]
    error, warning = sample.splitlines()
    err = io.StringIO()
    with hoarddb.open(tmp_path / "data") as client:
        run_script(client, 'use app; create bucket U { type: hash, Email string unique, Name string required }\n'
                           'db.U.insert({_id_: "a", Email: "x"}); db.U.insert({_id_: "b", Email: "x"})',
                   out=io.StringIO(), err=err, continue_on_error=True)
    lines = err.getvalue().splitlines()
    assert warning in lines
    assert any(line.startswith(error.removesuffix("...")) for line in lines), lines


def test_shell_md_explain_sample(tmp_path):
    (sample,) = [b for b in indented(SHELL_MD) if b.startswith('[{_id_: "o1"')]
    out = io.StringIO()
    with hoarddb.open(tmp_path / "data") as client:
        assert run_script(client, 'use app\ncreate bucket Orders { type: hash, indices: ["CustomerID"] }\n'
                                  'db.Orders.insert({_id_: "o1", CustomerID: "c1"})\n'
                                  'db.Orders.search({CustomerID: "c1"}, {explain: true})',
                          out=out, err=io.StringIO()) == 0
    assert out.getvalue().splitlines()[-len(sample.splitlines()):] == sample.splitlines()
