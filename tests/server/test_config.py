"""Server options: where a value comes from, and bad values refused with a clear error and exit status."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hoarddb.errors import BadValueError
from hoarddb.server.config import ServerConfig
from hoarddb.server.users import UserStore
from hoarddb.testing.raw import RawConnection
from hoarddb.testing import ServerThread

REPO = Path(__file__).resolve().parents[2]


def test_a_flag_wins_over_the_variable_which_wins_over_the_file(tmp_path):
    conf = tmp_path / "c.yaml"
    conf.write_text("data: /from/file\nport: 7001\nidle_timeout: 11\nmax_pipeline: 7\n")
    env = {"HOARDDB_PORT": "7002", "HOARDDB_IDLE_TIMEOUT": "12"}
    c = ServerConfig.load({"port": 7003}, str(conf), environ=env)
    assert (c.data, c.port, c.idle_timeout, c.max_pipeline) == ("/from/file", 7003, 12.0, 7)


@pytest.mark.parametrize("yaml_text, word", [
    ("host:\n", "host"),                      # a key without a value used to become the host "None"
    ("max_connections: 1.7\n", "max_connections"),  # used to become 1
    ("idle_timeout: .nan\n", "idle_timeout"),        # used to turn the idle and handshake sweeps off
    ("shutdown_timeout: .inf\n", "shutdown_timeout"),
    ("port: [1, 2]\n", "port"),
    ("host: [a, b]\n", "host"),
])
def test_bad_values_in_the_file_are_refused_naming_the_option(tmp_path, yaml_text, word):
    conf = tmp_path / "c.yaml"
    conf.write_text("data: d\n" + yaml_text)
    with pytest.raises(BadValueError, match=word) as e:
        ServerConfig.load({}, str(conf), environ={})
    assert e.value.code == 2


def test_bad_values_in_the_environment_and_constructed(tmp_path):
    for name, raw in (("HOARDDB_IDLE_TIMEOUT", "nan"), ("HOARDDB_HANDSHAKE_TIMEOUT", "inf"),
                      ("HOARDDB_MAX_PIPELINE", "2.5"), ("HOARDDB_INSECURE", "maybe")):
        with pytest.raises(BadValueError, match=name):
            ServerConfig.load({"data": "d"}, None, environ={name: raw})
    with pytest.raises(BadValueError, match="handshake_timeout"):
        ServerConfig(data="d", handshake_timeout=float("nan")).check()


def _server_cli(*args, env=None, timeout=60):
    environ = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    return subprocess.run([sys.executable, "-m", "hoarddb.cli", "server", "--port", "0", "--metrics-port", "-1",
                           *args], capture_output=True, text=True, env=environ, timeout=timeout)


def test_the_command_exits_2_on_a_bad_option_and_1_when_it_cannot_start(tmp_path):
    conf = tmp_path / "c.yaml"
    conf.write_text(f"data: {tmp_path / 'd'}\nhost:\n")
    run = _server_cli("--config", str(conf), "--insecure")
    assert run.returncode == 2 and "host" in run.stderr
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("x")
    run = _server_cli("--insecure", env={"HOARDDB_DATA": str(a_file)})
    assert run.returncode == 1
    assert "data directory" in run.stderr and "cannot listen" not in run.stderr  # it used to blame the port


def test_decoy_iterations_match_the_real_users(tmp_path):
    """An unknown user's server-first message carries the iteration count real users have,
    so the count does not tell names that exist from names that do not."""
    store = UserStore(tmp_path)
    store.add("ann", "pw-ann", ["read:app"], iterations=4096)
    with ServerThread(tmp_path, auth_failure_delay=0) as server:
        firsts = {}
        for name in ("ann", "nobody"):
            with RawConnection("127.0.0.1", server.port, tls=True, timeout=10) as raw:
                raw.hello()
                raw.send_doc({"id": 1, "op": "auth_start", "mechanism": "SCRAM-SHA-256",
                              "payload": f"n,,n={name},r=abcdefgh"})
                firsts[name] = dict(p.split("=", 1) for p in raw.recv_doc()["result"]["payload"].split(","))
    assert firsts["ann"]["i"] == firsts["nobody"]["i"] == "4096"
    assert len(firsts["ann"]["s"]) == len(firsts["nobody"]["s"])
