"""Fixtures shared by the whole suite: a fresh embedded database in a temporary directory, and a
check that the machine has a CPU to spare (for the tests of busy polling, which stands aside when not)."""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import HealthCheck, settings

import hoarddb

settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("slow", max_examples=500, deadline=None)
settings.load_profile("slow" if os.environ.get("HOARDDB_SLOW") == "1" else "ci")


@pytest.fixture
def client(tmp_path):
    """An open embedded hoardDB in a fresh data directory."""
    with hoarddb.open(tmp_path / "data") as c:
        yield c


@pytest.fixture
def db(client):
    """The database ``app`` of a fresh embedded hoardDB."""
    return client["app"]


def _busy_cpus(seconds: float = 0.3) -> float | None:
    """How many CPUs' worth of the machine other tasks kept busy over ``seconds`` (Linux's
    /proc/stat), or None where that cannot be read."""
    def sample():
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return sum(fields) - fields[3] - fields[4], sum(fields)  # busy (all but idle, iowait), all
    try:
        busy0, all0 = sample()
        time.sleep(seconds)
        busy1, all1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return (busy1 - busy0) / max(1, all1 - all0) * (os.cpu_count() or 1)


@pytest.fixture
def spare_cpu():
    """Skip unless the machine is nearly idle: busy polling stands aside when other tasks
    want the CPUs (hoarddb/busypoll.py), so tests that expect polls need one to spare."""
    busy = _busy_cpus()
    if busy is not None and busy > 0.3:
        pytest.skip(f"the machine is busy ({busy:.1f} CPUs' worth of other work): busy polling stands aside")
