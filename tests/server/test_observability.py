"""What an operator sees of a running server: request latency in /metrics, the slow log, the log lines."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import hoarddb
from hoarddb.errors import HoardError, UnauthorizedError
from hoarddb.testing import ServerProcess, ServerThread


def _metrics(server) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).read().decode()


def _get_latency(text: str) -> tuple[dict[float, int], int, float]:
    """The get histogram of /metrics: its cumulative buckets by bound, its count and its sum."""
    buckets = {float(le): int(float(n)) for le, n in re.findall(
        r'hoarddb_server_request_seconds_bucket\{le="([^"]+)",op="get"\} (\S+)', text)}
    count = int(float(re.search(r'hoarddb_server_request_seconds_count\{op="get"\} (\S+)', text).group(1)))
    total = float(re.search(r'hoarddb_server_request_seconds_sum\{op="get"\} (\S+)', text).group(1))
    return buckets, count, total


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerThread(tmp_path_factory.mktemp("observed") / "data", insecure=True) as server:
        yield server


def test_a_get_of_a_hundred_microseconds_lands_in_a_sub_millisecond_bucket(server):
    with hoarddb.connect(server.url()) as client:
        db = client["latency"]
        db.create_bucket("Users", type="hash")
        db.Users.insert({"_id_": "u1", "Name": "Ann"})
        for _ in range(50):
            assert db.Users.get("u1")["Name"] == "Ann"
    buckets, count, total = _get_latency(_metrics(server))
    assert count == 50
    # Timed by the event loop's clock (1 ms steps under uvloop), most of these read 0 and
    # the sum is a whole number of milliseconds; timed to the nanosecond, none is 0.
    assert total > 0
    assert abs(total * 1000 - round(total * 1000)) > 1e-6, f"the sum {total} is whole milliseconds"
    assert buckets[0.001] >= 45, buckets  # a one-key read on the loop takes well under a millisecond
    assert buckets[0.0005] >= 1, buckets


def _hoarddb(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    repo = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=repo)
    env.pop("HOARDDB_PASSWORD", None)
    return subprocess.run([sys.executable, "-m", "hoarddb.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def test_the_slow_log_keeps_the_last_slow_requests_and_hoarddb_slowlog_shows_them(tmp_path):
    # slow_ms 0 keeps every request: each is "slow", which a test can make happen without sleeping
    with ServerThread(tmp_path / "data", insecure=True, slow_ms=0, slowlog_length=3) as server:
        with hoarddb.connect(server.url()) as client:
            db = client["slow"]
            db.create_bucket("Users", type="hash")
            db.Users.insert({"_id_": "u1"})
            with pytest.raises(HoardError):
                client.execute({"op": "get", "db": "slow", "bucket": "Nope", "args": {"key": "x"}})
            answer = client.execute({"op": "slowlog"})["result"]
            assert answer["slow_ms"] == 0 and answer["slowlog_length"] == 3
            entries = answer["entries"]
            assert len(entries) == 3  # only the last three are kept
            assert entries[0]["id"] > entries[1]["id"] > entries[2]["id"]  # newest first
            newest = entries[0]
            assert newest["op"] == "get" and newest["db"] == "slow" and newest["bucket"] == "Nope"
            assert newest["code"] is not None and newest["micros"] >= 0 and newest["peer"].startswith("127.0.0.1:")
            assert "args" not in newest and "key" not in newest  # never what a request carried
        run = _hoarddb("slowlog", "--insecure", "--port", str(server.port), "--limit", "2")
        assert run.returncode == 0, run.stderr
        lines = run.stdout.splitlines()
        assert len(lines) == 3 and "slowlog" in lines[0] and "2 slow request(s) (slow_ms 0" in lines[-1]
        run = _hoarddb("slowlog", "--insecure", "--port", str(server.port), "--json", "--reset")
        assert run.returncode == 0, run.stderr
        assert len(json.loads(run.stdout)["entries"]) == 3
        with hoarddb.connect(server.url()) as client:
            entries = client.execute({"op": "slowlog"})["result"]["entries"]
        assert not any(e["op"] == "get" for e in entries), "--reset forgot nothing"


def test_the_slow_log_is_for_admins(tmp_path):
    from .server_users import add_users

    add_users(tmp_path / "data")
    with ServerThread(tmp_path / "data") as server:
        with hoarddb.connect(server.url("reader", "reader-pw")) as client:
            with pytest.raises(UnauthorizedError):
                client.execute({"op": "slowlog"})


def test_json_logs_one_object_a_line_with_connections_and_slow_requests(tmp_path):
    with ServerProcess(tmp_path / "data", "--log-format", "json", "--slow-ms", "0") as server:
        with hoarddb.connect(server.url()) as client:
            client["j"].create_bucket("Q", type="fifo")
            client["j"].Q.push({"n": 1})
            client.execute({"op": "check"})
        deadline = time.monotonic() + 20
        while "closed after" not in server.log_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        text = server.log_text()
    records = [json.loads(line) for line in text.splitlines() if line.strip()]  # every line is JSON
    assert all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    assert any("listening on" in r["message"] for r in records)
    opened = [r for r in records if r.get("event") == "open"]
    closed = [r for r in records if r.get("event") == "close"]
    assert opened and closed and opened[0]["peer"] == closed[0]["peer"]
    slow = [r for r in records if r["message"].startswith("slow request: push on j.Q")]
    assert slow and slow[0]["level"] == "warning" and slow[0]["op"] == "push" and slow[0]["micros"] >= 0
    check = [r for r in records if r.get("event") == "check"]
    assert check and check[0]["message"].endswith(": 1 buckets, 0 problems"), check


def test_user_changes_reloads_and_connections_are_logged(tmp_path, caplog):
    from hoarddb.server.users import UserStore

    from .server_users import add_users

    add_users(tmp_path / "data")
    caplog.set_level(logging.INFO, logger="hoarddb")
    with ServerThread(tmp_path / "data") as server:
        UserStore(server.data).add("dave", "dave-password", ["read:app"], iterations=4096)
        with hoarddb.connect(server.url("admin", "admin-pw")) as admin:
            admin.execute({"op": "set_roles", "user": "dave", "roles": ["readWrite:app"]})
            deadline = time.monotonic() + 20
            while "the users file" not in caplog.text and time.monotonic() < deadline:
                time.sleep(0.05)
    text = caplog.text
    assert "user 'dave' given new roles by 'admin'" in text
    assert "the users file" in text and "changed" in text  # a reload (the add above, by another writer)
    assert re.search(r"connection 127\.0\.0\.1:\d+ opened", text)
    assert re.search(r"connection 127\.0\.0\.1:\d+ of user 'admin' closed after", text)


def test_a_ttl_sweep_that_expires_documents_is_logged(tmp_path, caplog):
    import datetime

    caplog.set_level(logging.INFO, logger="hoarddb")
    with hoarddb.open(tmp_path, ttl_sweep_seconds=0) as c:
        b = c["app"].create_bucket("S", type="hash", indices=[{"field": "At", "expire_after_seconds": 0}])
        b.insert({"_id_": "old", "At": datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)})
        assert c.sweep_ttl()["expired"] == 1
    assert "TTL sweep of app.S: 1 documents expired" in caplog.text, caplog.text
