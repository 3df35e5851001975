"""What an operator sees of a running server: request latency in /metrics, the slow log, the log lines."""

from __future__ import annotations

import re
import urllib.request

import pytest

import hoarddb
from hoarddb.testing import ServerThread


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
