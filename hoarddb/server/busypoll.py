"""Busy polling: for a moment after answering a lone client, the event loop's thread waits for its next request awake instead of asleep.

Why: a thread asleep in ``epoll_wait`` that a packet wakes costs the machine a wake-up of
an idle CPU, and on a virtual machine that is expensive — the guest halts the idle vCPU
and the host has to schedule it again. Measured on our 2-vCPU VM (docs/benchmarks.md,
session 6): two processes sending 200 bytes back and forth over loopback TCP take
73–84 µs a round trip when both block, 26–32 µs when one of them polls. A client that
sends its next request soon after its answer (a loop of inserts, a dashboard's reads)
pays one such wake-up per request on the server's side; polling the socket for up to
``busy_poll`` microseconds after the answer takes it away. Linux's ``SO_BUSY_POLL`` and
the kernel's own ``haltpoll`` (off on this machine) are the same idea one layer down.

When: only while the server has one connection (with more, there is always something
to do, and CPU is what they need), only when the process may use two CPUs or more — by
its CPU set and its cgroup's quota (on one, the polling would take the CPU from the very
client it waits for) — and only after the connection's last request is answered (and,
for a write, after its LMDB commit: see commit.py). The poll watches the connection's
socket and the listening sockets, so a new connection ends it too.

What it costs: up to ``busy_poll`` µs of the loop's CPU per answer, and nothing else —
the loop is idle meanwhile, timers are at most that late. A poll that ends without a
request (a client that thinks longer than that) makes the next ones rarer: after *k*
misses in a row, the next 2^k − 1 idle moments are let pass without polling (up to
1,023), and one poll that waited for a request and saw it in time starts over (one that
finds it already there — the rest of a pipeline that came in two reads — says nothing of
the client and changes nothing: with a pipelining client, those could otherwise undo the
backoff after each miss). A slow client thus pays for a handful of polls in all, and so
does a client in the server's own process (a test's), whose next request needs the GIL
the polling thread holds and so seldom comes in time. Where Python has no ``poll()``
(Windows) the server does not busy-poll.
"""

from __future__ import annotations

import os
import select
import time

#: Misses in a row after which the backoff stops growing: 2**10 - 1 idle moments skipped.
MAX_MISSES = 10


def cpus(cpu_max: str | None = None) -> int:
    """Whole CPUs this process may use: those it may run on, fewer if its cgroup (v2) has a
    quota of less (its ``cpu.max`` "150000 100000" is 1.5 CPUs: 1)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        n = os.cpu_count() or 1
    try:
        if cpu_max is None:
            with open("/proc/self/cgroup") as f:  # "0::/its/path" under cgroup v2
                path = next(line[3:].strip() for line in f if line.startswith("0::"))
            cpu_max = f"/sys/fs/cgroup{path.rstrip('/')}/cpu.max"
        with open(cpu_max) as f:
            quota, period = f.read().split()
        if quota != "max":
            return min(n, max(1, int(quota) // int(period)))
    except (OSError, ValueError, StopIteration):  # no cgroup v2 here, or a file we do not understand
        return n
    return n


def unavailable() -> str | None:
    """Why this process cannot busy-poll, or None if it can."""
    if not hasattr(select, "poll"):
        return "no poll() here"  # Windows
    if cpus() < 2:
        return "one CPU"
    return None


class BusyPoll:
    """BusyPoll waits, awake, for one connection's socket or a listener to become readable.

    :param fds: the connection's socket first, then the listening sockets.
    :param budget: seconds to poll at most each time.
    """

    __slots__ = ("budget", "_poll", "_skip", "_misses")

    def __init__(self, fds: list[int], budget: float):
        self.budget = budget
        self._poll = select.poll()
        for fd in fds:
            self._poll.register(fd, select.POLLIN)
        self._skip = 0  # idle moments still to let pass (backoff)
        self._misses = 0  # polls in a row that ended without a request

    def wanted(self) -> bool:
        """Whether to poll at this idle moment (False while backing off after misses)."""
        if self._skip:
            self._skip -= 1
            return False
        return True

    def run(self) -> bool:
        """Poll until something is readable (True) or the budget is spent (False)."""
        poll = self._poll.poll
        if poll(0):  # already there (the rest of a pipeline): no sign of how quick the client is
            return True
        clock = time.monotonic
        end = clock() + self.budget
        while not poll(0):
            if clock() >= end:
                self._misses = min(self._misses + 1, MAX_MISSES)
                self._skip = (1 << self._misses) - 1
                return False
        self._misses = 0
        return True
