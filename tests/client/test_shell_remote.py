"""The shell on a server: ``hoardDB -insecure`` against a local server, and ``hoarddb shell`` with TLS and a user."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hoarddb
from hoarddb.testing import ServerProcess

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "server"))
from server_users import add_users  # noqa: E402


def shell(*args, env=None, input=None):
    e = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    code = "import sys; from hoarddb.cli import shell_main; shell_main(sys.argv[1:], prog_name='hoardDB')"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=e,
                          input=input, timeout=60)


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("shell") / "data", port=0) as server:
        yield server


def test_hoardDB_insecure_against_a_local_server(local):
    script = 'use app; create bucket Users { type: hash, indices: [{field: "Email", unique: true}] }; ' \
             'db.Users.insert({_id_: "u1", Email: "dalek@example.com"}); ' \
             'db.Users.insert({_id_: "u2", Email: "dalek@example.com"}); db.Users.get("u1")'
    result = shell("-insecure", "--port", str(local.port), "--json", "--continue-on-error", "-e", script)
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert result.returncode == 1
    assert lines[3]["codeName"] == "DUPLICATE_KEY" and lines[3]["code"] == 15
    assert lines[4]["result"] == {"_id_": "u1", "Email": "dalek@example.com"}
    listed = shell("--url", f"hoarddb://127.0.0.1:{local.port}/?insecure=true", "--json", "-e", "show databases")
    assert json.loads(listed.stdout) == {"ok": 1, "result": ["app"]}


def test_connection_refused_is_a_clear_error(tmp_path):
    result = shell("-insecure", "--port", "1", "-e", "show databases")
    assert result.returncode == 1 and "cannot connect" in result.stderr


def test_both_data_and_host_is_a_usage_error(tmp_path):
    result = shell("--data", str(tmp_path), "--host", "127.0.0.1", "-e", "show databases")
    assert result.returncode == 2


def test_shell_with_tls_and_a_user(tmp_path):
    data = tmp_path / "data"
    add_users(data)
    with ServerProcess(data, insecure=False) as server:
        base = ["--port", str(server.port), "--tls-fingerprint", server.fingerprint, "--json"]
        ok = shell(*base, "--user", "writer", "-e", "use app; create bucket X", env={"HOARDDB_PASSWORD": "writer-pw"})
        assert json.loads(ok.stdout.splitlines()[-1])["codeName"] == "UNAUTHORIZED"
        ok = shell(*base, "--user", "admin", "--password", "admin-pw", "-e", "show databases")
        assert ok.returncode == 0, ok.stdout + ok.stderr
        cmd = [sys.executable, "-m", "hoarddb.cli", "shell", "--port", str(server.port), "--tls-ca", str(server.cert),
               "--user", "reader", "-e", "show databases"]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                                env=dict(os.environ, PYTHONPATH=str(REPO), HOARDDB_PASSWORD="reader-pw"))
        assert result.returncode == 0, result.stderr
        bad = shell(*base, "--user", "admin", "--password", "nope", "-e", "show databases")
        assert bad.returncode == 1 and "AUTH_FAILED" in bad.stdout
        readable = shell(*base[:-1], "--user", "admin", "--password", "nope", "-e", "show databases")
        assert (readable.returncode, readable.stdout) == (1, "")
        assert readable.stderr.startswith("error AUTH_FAILED (27): ") and "Traceback" not in readable.stderr
        plain = shell("--port", str(server.port), "-insecure", "-e", "show databases")  # TLS server, no TLS
        assert plain.returncode == 1 and "leave out -insecure" in plain.stderr


@pytest.mark.parametrize("url,says", [("http://127.0.0.1:7070", "starts with hoarddb://"),
                                      ("hoarddb://127.0.0.1:notaport", "not a number")])
def test_a_malformed_url_is_a_usage_error(url, says):
    result = shell("--url", url, "-e", "show databases")
    assert result.returncode == 2 and says in result.stderr and "Traceback" not in result.stderr


# ---- trust on first use, and the password asked for after the server is verified ----------------

def _hoardDB_on_a_terminal(tmp_path, *args, env=None):
    pexpect = pytest.importorskip("pexpect")
    e = dict(os.environ, PYTHONPATH=str(REPO), XDG_CONFIG_HOME=str(tmp_path / "config"),
             HOARDDB_HISTORY=str(tmp_path / "history"), PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm", **(env or {}))
    e.pop("HOARDDB_PASSWORD", None)
    code = "import sys; from hoarddb.cli import shell_main; shell_main(sys.argv[1:], prog_name='hoardDB')"
    child = pexpect.spawn(sys.executable, ["-c", code, *args], env=e, encoding="utf-8", timeout=30,
                          dimensions=(40, 200))
    return pexpect, child


@pytest.fixture
def secure(tmp_path):
    data = tmp_path / "data"
    add_users(data)
    with ServerProcess(data, insecure=False) as server:
        yield server


def test_first_use_shows_the_fingerprint_asks_once_remembers_it_then_asks_the_password(tmp_path, secure):
    pexpect, child = _hoardDB_on_a_terminal(tmp_path, "--port", str(secure.port), "--user", "admin")
    try:
        child.expect_exact(f"The server at 127.0.0.1:{secure.port} is not known yet")
        child.expect_exact(secure.fingerprint)
        index = child.expect([r"Trust this server and remember it in .*known_hosts\?", "password for"])
        assert index == 0, "the password was asked for before the server was trusted"
        child.send("y\r")
        child.expect_exact(f"remembered 127.0.0.1:{secure.port}")
        child.expect_exact("password for admin")
        child.send("admin-pw\r")
        # the banner: where, the server's version, the user and the database
        child.expect_exact(f"connected to 127.0.0.1:{secure.port} (hoardDB {hoarddb.__version__}, TLS) as user "
                           "admin; no database yet")
        child.expect("hoarddb>")
        child.send("exit\r")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    known = tmp_path / "config" / "hoarddb" / "known_hosts"
    assert (known.stat().st_mode & 0o777) == 0o600
    assert known.read_text() == f"127.0.0.1:{secure.port} SHA256 {secure.fingerprint}\n"
    # remembered: the next time nothing is asked, from a script too
    again = shell("--port", str(secure.port), "--user", "admin", "--json", "-e", "show databases",
                  env={"XDG_CONFIG_HOME": str(tmp_path / "config"), "HOARDDB_PASSWORD": "admin-pw"})
    assert again.returncode == 0 and json.loads(again.stdout)["ok"] == 1, again.stderr

    # a new certificate on the same address: refused loudly, saying what to do
    secure.stop()
    for f in (secure.data / "tls").iterdir():
        f.unlink()
    secure.start()
    pexpect, child = _hoardDB_on_a_terminal(tmp_path, "--port", str(secure.port), "--user", "admin")
    try:
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    said = child.before
    assert child.exitstatus == 1
    assert f"THE CERTIFICATE OF THE SERVER AT 127.0.0.1:{secure.port} HAS CHANGED" in said.replace("\r\n", " ")
    assert secure.fingerprint in said.replace("\r\n", "") and "remove the line" in said
    assert "password for" not in said and "Trust this server" not in said
    assert known.read_text() != f"127.0.0.1:{secure.port} SHA256 {secure.fingerprint}\n"  # the old one kept


def test_a_pinned_fingerprint_that_does_not_match_is_refused_before_the_password_is_asked(tmp_path, secure):
    wrong = "AB:" * 31 + "AB"
    pexpect, child = _hoardDB_on_a_terminal(tmp_path, "--port", str(secure.port), "--user", "admin",
                                            "--tls-fingerprint", wrong)
    try:
        index = child.expect(["password for", pexpect.EOF])
    finally:
        child.close(force=True)
    assert index == 1, "the password was asked for before the TLS handshake was verified"
    assert "not the pinned" in child.before and child.exitstatus == 1


def test_a_script_with_no_fingerprint_known_is_refused_with_the_flags_to_give(tmp_path, secure):
    result = shell("--port", str(secure.port), "--user", "admin", "-e", "show databases",
                   env={"XDG_CONFIG_HOME": str(tmp_path / "config"), "HOARDDB_PASSWORD": "admin-pw"})
    assert result.returncode == 1
    assert secure.fingerprint in result.stderr and "pass --tls-fingerprint" in result.stderr
    assert "tls_fingerprint=" not in result.stderr  # the shell's user is told flags, not keyword arguments
    assert not (tmp_path / "config" / "hoarddb" / "known_hosts").exists()


def test_a_tls_server_reached_without_tls_flags_says_the_flag(tmp_path, secure):
    # the client's advice names keyword arguments (insecure=True); the shell says its flag
    plain_server = shell("--port", str(secure.port), "-insecure", "-e", "show databases")
    assert plain_server.returncode == 1 and "insecure=True" not in plain_server.stderr


def test_bare_hoardDB_looks_on_this_machine(tmp_path):
    import socket

    probe = socket.socket()
    try:
        if probe.connect_ex(("127.0.0.1", 7070)) == 0:
            pytest.skip("something listens on 127.0.0.1:7070 here")
    finally:
        probe.close()
    result = shell("-e", "show databases", env={"XDG_CONFIG_HOME": str(tmp_path / "config")})
    assert result.returncode == 1
    assert "no hoardDB server answers at 127.0.0.1:7070" in result.stderr and "--data DIR" in result.stderr


def test_every_command_is_told_its_flags_and_a_program_its_keywords(tmp_path, secure):
    status = subprocess.run([sys.executable, "-m", "hoarddb.cli", "status", "--port", str(secure.port)],
                            capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert status.returncode != 0
    assert "--tls-fingerprint" in status.stderr and "tls_fingerprint=" not in status.stderr, status.stderr
    import hoarddb
    from hoarddb.errors import HoardConnectionError

    with pytest.raises(HoardConnectionError) as refused:
        hoarddb.connect(port=secure.port)
    assert "tls_fingerprint=" in refused.value.message and "--tls" not in refused.value.message
