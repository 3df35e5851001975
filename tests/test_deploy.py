"""deploy/: the systemd unit's command starts a server that answers a ping, and the Dockerfile runs the same command.

No container runtime can build the image here (no registry to pull a base image from),
so the image's command is checked to be the unit's, and that command is run: with the
data directory, listening address and port moved to a temporary directory, 127.0.0.1 and
a free port, and the installed ``hoarddb`` script replaced by this Python's ``-m hoarddb``.
The Dockerfile's HEALTHCHECK is run against it the same way.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
UNIT = REPO / "deploy" / "hoarddb.service"
DOCKERFILE = REPO / "deploy" / "Dockerfile"
EXE = "/usr/local/bin/hoarddb"
DATA = "/var/lib/hoarddb"


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string(UNIT.read_text())
    return parser


def dockerfile_instruction(name: str) -> list[str]:
    """The exec-form JSON array of the Dockerfile's ``name`` instruction (line continuations joined)."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    lines = [line for line in text.splitlines() if line.split(None, 1)[:1] == [name]]
    assert len(lines) == 1, f"one {name} instruction, found {len(lines)}"
    rest = lines[0].split(None, 1)[1]
    if name == "HEALTHCHECK":
        rest = rest.split("CMD", 1)[1]
    return json.loads(rest)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def here(argv: list[str], data: Path, port: int) -> list[str]:
    """``argv`` as it runs in this test: this Python's hoarddb, a temporary data directory, 127.0.0.1, a free port."""
    assert argv[0] == EXE
    moved = {DATA: str(data), "0.0.0.0": "127.0.0.1", "7070": str(port)}
    out = [sys.executable, "-m", "hoarddb"]
    for arg in argv[1:]:
        if arg.startswith(DATA + "/"):
            out.append(str(data) + arg[len(DATA):])
        else:
            out.append(moved.get(arg, arg))
    return out


def test_the_image_runs_the_units_command():
    exec_start = shlex.split(unit()["Service"]["ExecStart"])
    assert exec_start == [EXE, "server", "--data", DATA, "--host", "0.0.0.0", "--port", "7070"]
    assert dockerfile_instruction("CMD") == exec_start
    assert unit()["Service"]["StateDirectory"] == Path(DATA).name  # systemd makes /var/lib/hoarddb, owned by User
    assert f"VOLUME {DATA}" in DOCKERFILE.read_text()


def test_the_units_command_starts_a_server_that_answers_ping_and_stops_on_sigterm(tmp_path):
    data, port = tmp_path / "data", free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "HOARDDB_ADMIN_PASSWORD": "first-start-password",
           "HOARDDB_METRICS_PORT": "0"}
    server = subprocess.Popen(here(shlex.split(unit()["Service"]["ExecStart"]), data, port), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        log = []
        for line in server.stdout:  # until it listens (or exits, which fails below)
            log.append(line)
            if "listening on" in line:
                break
        assert f"listening on 127.0.0.1:{port}" in "".join(log), "".join(log)

        health = subprocess.run(here(dockerfile_instruction("HEALTHCHECK"), data, port), env=env,
                                capture_output=True, text=True, timeout=60, check=False)
        assert health.returncode == 0, health.stdout + health.stderr
        assert f"127.0.0.1:{port}: a hoardDB server answered" in health.stdout and "asks for a login" in health.stdout

        logged_in = subprocess.run(
            [sys.executable, "-m", "hoarddb", "ping", "--port", str(port), "--tls-ca", str(data / "tls/server.crt"),
             "--user", "admin", "--password", "first-start-password"], env=env, capture_output=True, text=True,
            timeout=60, check=False)
        assert logged_in.returncode == 0 and "round trip" in logged_in.stdout, logged_in.stdout + logged_in.stderr

        server.send_signal(signal.SIGTERM)  # systemctl stop (KillSignal=SIGTERM)
        assert server.wait(timeout=float(unit()["Service"]["TimeoutStopSec"])) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        server.stdout.close()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_systemd_accepts_the_unit(tmp_path):
    """systemd-analyze verify, with the hoarddb script at a path that exists here."""
    script = tmp_path / "hoarddb"
    script.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m hoarddb \"$@\"\n")
    script.chmod(0o755)
    copy = tmp_path / "hoarddb.service"
    copy.write_text(UNIT.read_text().replace(EXE, str(script)))
    result = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr.strip() == "", result.stderr
