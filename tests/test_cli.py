"""The hoarddb and hoardDB commands: options, exit status, standard input, and a real terminal session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import hoarddb
from hoarddb.cli import main, shell_main

REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def invoke(command, args, input=None):
    return CliRunner().invoke(command, args, input=input)


def test_hoardDB_without_a_server_says_it_cannot_connect(tmp_path):
    import socket
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = invoke(shell_main, ["-insecure", "--host", "127.0.0.1", "--port", str(port), "-e", "show databases"])
    assert result.exit_code != 0
    assert "127.0.0.1" in result.output and str(port) in result.output


def test_hoardDB_is_the_shell(tmp_path):
    result = invoke(shell_main, ["--data", str(tmp_path / "d"), "--json", "-e", "create database app; show databases"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ['{"ok": 1, "result": null}', '{"ok": 1, "result": ["app"]}']


def test_every_execute_runs_in_order(tmp_path):
    """Regression: with -e given more than once, only the last ran (the others were dropped without a word)."""
    result = invoke(main, ["shell", "--data", str(tmp_path / "d"), "--json", "-e", "create database app",
                           "-e", "use app; create bucket Q { type: fifo }", "-e", "show buckets"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.splitlines()[-1]) == {"ok": 1, "result": ["Q"]}


def test_version():
    assert invoke(main, ["--version"]).output.strip() == f"hoardDB, version {hoarddb.__version__}"


def test_usage_errors_exit_2(tmp_path):
    # (no --data and no address is no usage error: the shell looks for a server on 127.0.0.1:7070,
    # tests/client/test_shell_remote.py::test_bare_hoardDB_looks_on_this_machine)
    both = invoke(main, ["shell", "--data", str(tmp_path), "-e", "show databases", "-f", "-"])
    assert both.exit_code == 2 and "not both" in both.output
    assert invoke(main, ["shell", "--data", str(tmp_path), "--frobnicate"]).exit_code == 2


def test_statements_from_standard_input(tmp_path):
    result = invoke(main, ["shell", "--data", str(tmp_path / "d")],
                    input="use app\ncreate bucket Q { type: fifo }\ndb.Q.push({n: 1})\ndb.Q.pop()\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == "{n: 1}"


def test_file_dash_is_standard_input(tmp_path):
    result = invoke(main, ["shell", "--data", str(tmp_path / "d"), "--json", "-f", "-"], input="show databases")
    assert result.output.strip() == '{"ok": 1, "result": []}'


def test_exit_status_and_continue_on_error(tmp_path):
    data = str(tmp_path / "d")
    script = "use app; db.Nope.pop(); show databases"
    stop = invoke(main, ["shell", "--data", data, "--json", "-e", script])
    assert stop.exit_code == 1
    assert [json.loads(line)["ok"] for line in stop.output.splitlines()] == [1, 0]
    go_on = invoke(main, ["shell", "--data", data, "--json", "--continue-on-error", "-e", script])
    assert go_on.exit_code == 1
    assert [json.loads(line)["ok"] for line in go_on.output.splitlines()] == [1, 0, 1]


def test_a_locked_data_directory_is_an_error(tmp_path):
    with hoarddb.open(tmp_path / "d"):
        result = invoke(main, ["shell", "--data", str(tmp_path / "d"), "--json", "-e", "show databases"])
    assert result.exit_code == 1
    assert json.loads(result.output)["codeName"] == "DATA_DIR_LOCKED"


def test_a_data_directory_that_cannot_be_opened_exits_1_with_an_answer(tmp_path):
    (tmp_path / "file").write_text("x")
    for data in (tmp_path / "file", tmp_path / "file" / "below"):
        result = invoke(main, ["shell", "--data", str(data), "--json", "-e", "show databases"])
        assert result.exit_code == 1, result.output
        assert json.loads(result.output)["codeName"] == "STORAGE_ERROR"


def test_a_script_that_is_not_utf8_is_refused_with_a_position(tmp_path):
    (tmp_path / "s.hql").write_bytes(b'show databases\nuse app; db.X.\xff\n')
    result = invoke(main, ["shell", "--data", str(tmp_path / "d"), "--json", "-f", str(tmp_path / "s.hql")])
    assert result.exit_code == 1
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert lines[0]["ok"] == 1 and lines[-1]["ok"] == 0 and "line 2, column 15" in lines[-1]["message"]


def test_a_script_with_a_byte_order_mark_reports_the_column_an_editor_shows(tmp_path):
    (tmp_path / "s.hql").write_bytes("\ufeffdb.X.push({a: 1 b: 2})\n".encode("utf-8"))
    result = invoke(main, ["shell", "--data", str(tmp_path / "d"), "--json", "-f", str(tmp_path / "s.hql")])
    assert json.loads(result.output)["message"].startswith("line 1, column 17: unexpected 'b'")  # was column 18


def test_tour_calls_the_tour(tmp_path, monkeypatch):
    import hoarddb.tour

    seen = []
    monkeypatch.setattr(hoarddb.tour, "main", lambda data_dir: seen.append(data_dir) or 0)
    result = invoke(main, ["tour", "--data", str(tmp_path / "t")])
    assert result.exit_code == 0 and seen == [str(tmp_path / "t")]


def test_console_entry_point_as_a_child_process(tmp_path):
    done = subprocess.run([sys.executable, "-m", "hoarddb.cli", "shell", "--data", str(tmp_path / "d"),
                           "-e", "use app; db.Q.pop("], capture_output=True, text=True, cwd=REPO, env=ENV, timeout=60)
    assert done.returncode == 1
    assert done.stdout == "switched to database app\n"
    assert done.stderr.splitlines()[-1].startswith(
        "error SYNTAX_ERROR (20): line 1, column 19: the statement is incomplete at end of input; expected ')'")


# ---- a real terminal ------------------------------------------------------------------------------

def _drawn(text: str) -> str:
    """A pattern of ``text`` as a terminal may draw it: at once, or in pieces with escape codes between them
    (the typed part first, then what completion added, when they reach the prompt in two reads). A space
    already on the screen may be redrawn as a move of the cursor one column right (``ESC [ C``)."""
    import re

    return r"(?:\x1b\[[0-9;?]*[A-Za-z])*".join(r"(?: |\x1b\[C)" if ch == " " else re.escape(ch) for ch in text)


def test_interactive_session_in_a_pseudo_terminal(tmp_path):
    pexpect = pytest.importorskip("pexpect")
    env = dict(ENV, HOARDDB_HISTORY=str(tmp_path / "history"), PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm")
    child = pexpect.spawn(sys.executable, ["-m", "hoarddb.cli", "shell", "--data", str(tmp_path / "d")],
                          env=env, cwd=str(REPO), encoding="utf-8", timeout=20, dimensions=(40, 160))
    try:
        child.expect("hoarddb>")
        child.send("use app\r")
        child.expect("switched to database app")
        child.expect("app>")
        # A multi-line create bucket: Enter inside the braces continues the statement.
        child.send("create bucket Comments {\r")
        child.expect(r"\.\.\.")
        child.send("  type: fifo\r")
        child.send("}\r")
        child.expect('name: "Comments", type: "fifo"')
        child.expect("app>")
        # TAB completes the bucket name, then the verb (only fifo verbs start with 'pu').
        child.send("db.Comm\t")
        child.expect(_drawn("Comments"))
        child.send(".pu\t")
        child.expect(_drawn("push"))
        child.send('({Author: "Bob", Text: "Nice photo!"})\r')
        child.expect("ok")
        child.expect("app>")
        child.send("db.Comments.pop()\r")
        child.expect(r'\{Author: "Bob", Text: "Nice photo!"\}')
        child.expect("app>")
        # A syntax error is shown with a caret, and the session goes on.
        child.send("db.Comments.push({a: 1 b: 2})\r")
        child.expect(r"error SYNTAX_ERROR \(20\): line 1, column 24")
        child.expect("app>")
        child.send("help peek\r")
        child.expect(r"peek\(limit\?\)")
        child.expect("app>")
        child.send("exit\r")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0  # an interactive session's errors do not make its exit status
    assert (tmp_path / "history").stat().st_mode & 0o777 == 0o600  # what was typed is the user's alone
    history = (tmp_path / "history").read_text()
    assert "create bucket Comments {\n+  type: fifo\n+}" in history


def test_tour_runs_on_a_temporary_database_and_shows_every_store_type():
    result = invoke(main, ["tour"])
    assert result.exit_code == 0, result.output
    for kind in ("fifo", "lifo", "hash", "btree", "heap", "blob", "index_used 'Email_1'", "claim ->"):
        assert kind in result.output
    assert "refused: DUPLICATE_KEY (15)" in result.output  # the code as the shell and errors.md write it (was 0xf)


# ---- audit: the terminal, the history, Ctrl-C ------------------------------------------------------

def _typed_session(tmp_path, keys: str, client, history):
    """Run the interactive loop in process on ``keys`` (as typed), without a terminal; what it printed."""
    import io

    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    from hoarddb.shell import Shell, interactive

    out, err = io.StringIO(), io.StringIO()
    with create_pipe_input() as pipe:
        pipe.send_text(keys)
        shell = Shell(client, out=out, err=err)
        interactive(shell, history=history, input=pipe, output=DummyOutput())
    return out.getvalue(), err.getvalue()


def test_the_history_file_is_private(tmp_path):
    # It holds whatever was typed; it was created 0644 (readable by every user of the machine).
    history = tmp_path / "new" / "history"
    with hoarddb.open(tmp_path / "d") as client:
        _typed_session(tmp_path, "show databases\rexit\r", client, history)
    assert history.stat().st_mode & 0o777 == 0o600
    assert history.parent.stat().st_mode & 0o777 == 0o700
    assert "show databases" in history.read_text()
    # one an older version left readable is made private, and keeps its lines
    old = tmp_path / "old-history"
    old.write_text("\n# 2026-01-01\n+use app\n")
    old.chmod(0o644)
    with hoarddb.open(tmp_path / "d") as client:
        _typed_session(tmp_path, "exit\r", client, old)
    assert old.stat().st_mode & 0o777 == 0o600 and "+use app" in old.read_text()


def test_ctrl_c_during_a_statement_keeps_the_session(tmp_path):
    class Interrupted:
        """A client whose pop is interrupted, as Ctrl-C interrupts a slow answer."""

        def __init__(self, client):
            self.client = client

        def execute(self, request):
            if request.get("op") == "pop":
                raise KeyboardInterrupt
            return self.client.execute(request)

    with hoarddb.open(tmp_path / "d") as client:
        try:
            out, err = _typed_session(tmp_path, "use app\rdb.Q.pop()\rshow databases\rexit\r", Interrupted(client),
                                      tmp_path / "history")
        except KeyboardInterrupt:
            pytest.fail("Ctrl-C during a statement ended the shell with a traceback")
    assert "interrupted: the shell stopped waiting" in err
    assert out.splitlines()[-1] == "(none)"  # the statement after it ran: the session went on


def test_ctrl_c_in_a_script_exits_130_without_a_traceback(tmp_path):
    import signal
    import time

    data = tmp_path / "d"
    # a shell started in the background of another (as `cmd &` does) ignores SIGINT, and Python then
    # keeps it ignored: the child gets the default disposition, as a shell in a terminal has it
    child = subprocess.Popen([sys.executable, "-m", "hoarddb.cli", "shell", "--data", str(data)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=REPO, env=ENV, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 30
        wchan = Path(f"/proc/{child.pid}/wchan")
        if wchan.exists():  # Linux: until the shell sleeps reading its script (stdin is its only pipe)
            while "pipe" not in wchan.read_text() and time.monotonic() < deadline:
                time.sleep(0.02)
        else:
            while not (data.exists() and any(data.iterdir())) and time.monotonic() < deadline:
                time.sleep(0.02)  # the database is open: the shell now waits for its script on stdin
            time.sleep(0.2)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)
    finally:
        child.kill()
    assert child.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err


def test_with_stdout_redirected_the_prompt_goes_to_the_terminal_and_the_file_gets_answers(tmp_path):
    # `hoardDB --data d > out.txt` wrote prompts and terminal escape codes into out.txt.
    pexpect = pytest.importorskip("pexpect")
    env = dict(ENV, HOARDDB_HISTORY=str(tmp_path / "history"), PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm")
    out = tmp_path / "out.txt"
    command = f"'{sys.executable}' -m hoarddb.cli shell --data '{tmp_path / 'd'}' > '{out}'"
    child = pexpect.spawn("/bin/sh", ["-c", command], env=env, cwd=str(REPO), encoding="utf-8", timeout=20,
                          dimensions=(40, 160))
    try:
        child.expect("hoarddb>")  # drawn on the terminal, through stderr
        fresh_prompt = "\x1b[?2004h"  # a prompt starting (a redraw of the typed line does not send it)
        child.send("use app\r")
        child.expect_exact(fresh_prompt)
        child.expect("app>")
        child.send("create database app; show databases\r")
        child.expect_exact(fresh_prompt)  # the terminal is raw again: Ctrl-D reaches the prompt
        child.sendcontrol("d")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert out.read_text() == "switched to database app\nok\napp\n"


# ---- help, and the shell in a terminal: Ctrl-R, `use` alone, completion ------------------------------

def test_bare_hoarddb_prints_the_whole_help_and_succeeds():
    def hoarddb(*args):
        return subprocess.run([sys.executable, "-m", "hoarddb.cli", *args], capture_output=True, text=True, cwd=REPO,
                              env=ENV, timeout=60, stdin=subprocess.DEVNULL)

    done = hoarddb()  # exited 2 with "Missing command"
    assert done.returncode == 0, done.stderr
    assert done.stdout == hoarddb("--help").stdout
    for command in ("shell", "server", "check", "compact", "tour", "user", "help"):
        assert f"\n  {command} " in done.stdout


def test_help_lists_each_commands_first_sentence_whole():
    # click cut them to fit: "Read every file of the data directory DIR and say what is..."
    text = invoke(main, ["--help"]).output
    commands = " ".join(text[text.index("Commands:"):].split())  # as read, whatever the lines' width
    assert "..." not in commands
    assert "check Read every file of the data directory DIR and say what is wrong with it. cluster" in commands
    assert "tour A guided walk through the six store types, on an embedded database." in commands
    users = invoke(main, ["user", "--help"]).output
    assert "..." not in users[users.index("Commands:"):]


def test_hoarddb_help_command():
    assert invoke(main, ["help"]).output == invoke(main, ["--help"]).output
    shell_help = invoke(main, ["help", "shell"])
    assert shell_help.exit_code == 0 and shell_help.output.startswith("Usage: main shell [OPTIONS]")
    assert "--data DIR" in shell_help.output
    assert "Add a user with its roles." in invoke(main, ["help", "user", "add"]).output
    unknown = invoke(main, ["help", "shel"])
    assert unknown.exit_code == 2 and "no command 'shel'" in unknown.output and "shell" in unknown.output


def _terminal(tmp_path, history: str = ""):
    pexpect = pytest.importorskip("pexpect")
    (tmp_path / "history").write_text(history)
    env = dict(ENV, HOARDDB_HISTORY=str(tmp_path / "history"), PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm")
    child = pexpect.spawn(sys.executable, ["-m", "hoarddb.cli", "shell", "--data", str(tmp_path / "d")],
                          env=env, cwd=str(REPO), encoding="utf-8", timeout=20, dimensions=(40, 160))
    return pexpect, child


def test_ctrl_r_then_enter_runs_the_statement_found(tmp_path):
    # Enter used to leave the search prompt empty: only Esc kept the match.
    pexpect, child = _terminal(tmp_path)
    try:
        child.expect("hoarddb>")
        child.send("create database app; use app; create bucket Q { type: fifo }\r")
        child.expect("app>")
        child.send("db.Q.peek()\r")
        child.expect("null")
        child.expect("app>")
        child.send("db.Q.push({n: 41})\r")
        child.expect("ok")
        child.expect("app>")
        child.sendcontrol("r")
        child.expect("I-search backward:")
        child.send("pee")
        child.expect(r"k\(\)")  # the match is drawn: db.Q.[pee]k()
        child.send("\r")
        child.expect(r"\{n: 41\}")  # it ran
        child.expect("app>")
        child.sendcontrol("d")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


def test_use_alone_is_answered_at_once_and_describe_completes_to_bucket(tmp_path):
    pexpect, child = _terminal(tmp_path)
    try:
        child.expect("hoarddb>")
        child.send("create database app; use app; create bucket Comments { type: fifo }\r")
        child.expect("app>")
        child.send("use\r")  # used to wait for a name on the next line
        child.expect(r"error SYNTAX_ERROR \(20\): line 1, column 4: .*write use NAME")
        child.expect("app>")
        child.send("show databases\r")  # a statement of its own, not the name of `use`
        child.expect(r"\x1b\[\?2004lapp\r\n")  # the answer alone: a database list of one
        child.expect("app>")
        child.send("describe \t")  # the one keyword that fits, not every keyword
        child.expect(_drawn("describe bucket"))
        child.send(" Comm\t")
        child.expect(_drawn("Comments"))
        child.send("\r")
        child.expect("Type:     fifo")
        child.expect("app>")
        child.sendcontrol("d")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
