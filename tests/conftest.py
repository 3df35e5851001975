"""Fixtures shared by the whole suite: a fresh embedded database in a temporary directory, and a
check that the machine has a CPU to spare (for the tests of busy polling, which stands aside when not)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time

import pytest
from hypothesis import HealthCheck, settings

import hoarddb


def pytest_sessionstart(session):
    """Stop at once, saying why, when the disk cannot hold a run (else: dozens of unexplained errors)."""
    free = shutil.disk_usage(tempfile.gettempdir()).free
    if free < 512 * 2**20:
        pytest.exit(f"only {free / 2**20:.0f} MiB free in {tempfile.gettempdir()}: the suite needs 512 MiB or more "
                    "(its largest tests write ~100 MB at once); free some space, or point TMPDIR elsewhere", returncode=1)


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


def _machine_ticks() -> tuple[int, int]:
    """Busy and total clock ticks of all CPUs so far (/proc/stat; idle and iowait are not busy)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def _process_ticks(pid: int, children: bool = False) -> int:
    """Clock ticks a process ran, all its threads (and, with ``children``, its waited-for children)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # fields[0] is the state, the 3rd field of stat(5)
    return sum(int(x) for x in fields[11:15 if children else 13])  # utime stime [cutime cstime]


def _busy_cpus(seconds: float = 0.3) -> float | None:
    """How many CPUs' worth of the machine other tasks kept busy over ``seconds`` (Linux's
    /proc/stat), or None where that cannot be read."""
    try:
        busy0, all0 = _machine_ticks()
        time.sleep(seconds)
        busy1, all1 = _machine_ticks()
    except (OSError, ValueError, IndexError):
        return None
    return (busy1 - busy0) / max(1, all1 - all0) * (os.cpu_count() or 1)


class SpareCpu:
    """The other work a machine did while a test ran, the test's own processes counted out.

    ``count_out(pid)`` adds a process of the test's (this one and its waited-for children
    always are); ``expect(ok, message)`` fails with ``message`` unless ``ok`` — or skips
    when other tasks kept more than 0.3 CPUs busy meanwhile, since busy polling rightly
    stands aside then and a test of it has nothing to say.
    """

    LIMIT = 0.3

    def __init__(self):
        try:
            self._machine = _machine_ticks()
            self._ours = _process_ticks(os.getpid(), children=True)
        except (OSError, ValueError, IndexError):
            self._machine = None
        self._pids: dict[int, int] = {}

    def count_out(self, pid: int) -> None:
        if self._machine is not None:
            self._pids[pid] = _process_ticks(pid)

    def other_work(self) -> float | None:
        """CPUs' worth of work by other tasks since the test began, or None where unknown."""
        if self._machine is None:
            return None
        try:
            busy, total = _machine_ticks()
            ours = _process_ticks(os.getpid(), children=True) - self._ours
            ours += sum(_process_ticks(pid) - start for pid, start in self._pids.items())
        except (OSError, ValueError, IndexError):
            return None
        busy0, total0 = self._machine
        return (busy - busy0 - ours) / max(1, total - total0) * (os.cpu_count() or 1)

    def expect(self, ok: bool, message) -> None:
        if ok:
            return
        other = self.other_work()
        if other is not None and other > self.LIMIT:
            pytest.skip(f"the machine got busy ({other:.1f} CPUs' worth of other work) and busy polling "
                        f"stood aside: {message}")
        pytest.fail(f"{message} (other work meanwhile: {other if other is None else round(other, 2)} CPUs)")


@pytest.fixture
def spare_cpu():
    """Skip unless the machine is nearly idle, then watch it: busy polling stands aside when
    other tasks want the CPUs (hoarddb/busypoll.py), so tests that expect polls need one to
    spare, before and while they run (``SpareCpu.expect``)."""
    busy = _busy_cpus()
    if busy is not None and busy > SpareCpu.LIMIT:
        pytest.skip(f"the machine is busy ({busy:.1f} CPUs' worth of other work): busy polling stands aside")
    return SpareCpu()
