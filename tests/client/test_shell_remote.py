"""The shell on a server: ``hoardDB -insecure`` against a local server, and ``hoarddb shell`` with TLS and a user."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
