"""The Go client (clients/go) against real servers: runs its ``go test ./...`` when Go and the
MongoDB Go driver's source are installed (Debian: golang-go, golang-mongodb-mongo-driver-dev),
and is skipped, saying so, where they are not."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CLIENT = REPO / "clients" / "go"
DRIVER = Path("/usr/share/gocode/src/go.mongodb.org/mongo-driver")
INSTALL = "apt-get install -y golang-go golang-mongodb-mongo-driver-dev"


def go_env(tmp: Path, **extra) -> dict:
    """The environment ``go`` runs the client's tests in (Debian's installed module sources only); skips
    the test without Go or the driver's source."""
    if shutil.which("go") is None:
        pytest.skip(f"Go is not installed: the Go client's tests need it ({INSTALL})")
    if not DRIVER.is_dir():
        pytest.skip(f"the MongoDB Go driver's source is not in {DRIVER} ({INSTALL})")
    env = dict(os.environ, HOARDDB_PYTHON=sys.executable, HOARDDB_SRC=str(REPO),
               # Debian's installed source only: a missing module is an error, never a download
               GOPROXY="off", GOFLAGS="-mod=readonly", GOSUMDB="off", GOTOOLCHAIN="local", **extra)
    env.setdefault("GOCACHE", str(tmp / "gocache") if not os.environ.get("HOME") else
                   os.path.join(os.environ["HOME"], ".cache", "go-build"))
    return env


def test_go_client(tmp_path):
    env = go_env(tmp_path)
    go = shutil.which("go")
    deps = subprocess.run([go, "list", "-deps", "-test", "-f", "{{if .Module}}{{.Module.Path}} {{.Module.Dir}}{{end}}",
                           "./..."], cwd=CLIENT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert deps.returncode == 0, deps.stderr
    modules = dict(line.split(" ", 1) for line in set(deps.stdout.split("\n")) if line)
    outside = {m: d for m, d in modules.items() if m != "hoarddb.dev/client" and not d.startswith("/usr/share/gocode/")}
    assert not outside, f"modules built from elsewhere than Debian's /usr/share/gocode: {outside}"
    proc = subprocess.run([go, "test", "-count=1", "./..."], cwd=CLIENT, env=env, capture_output=True, check=False,
                          text=True, timeout=900)
    print(proc.stdout[-20000:], proc.stderr[-5000:])
    assert proc.returncode == 0, f"go test ./... failed:\n{proc.stdout[-8000:]}\n{proc.stderr[-4000:]}"
    assert "ok  \thoarddb.dev/client" in proc.stdout
