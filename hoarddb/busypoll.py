"""Busy polling: for a moment, a thread that expects bytes on a socket soon waits for them awake instead of asleep.

Why: a thread asleep in ``epoll_wait`` or ``recv`` that a packet wakes costs the machine a
wake-up of an idle CPU, and on a virtual machine that is expensive — the guest halts the
idle vCPU and the host has to schedule it again. Measured on our 2-vCPU VM
(docs/benchmarks.md): two processes sending 200 bytes back and forth over
loopback TCP take 73–84 µs a round trip when both block, 26–32 µs when one of them polls
and 11–16 µs when both do. Linux's ``SO_BUSY_POLL`` and the kernel's own ``haltpoll``
(off on this machine) are the same idea one layer down. Both ends of a connection use it:

- **the server** (``busy_poll`` server option, server/connection.py): after answering its
  only connection, the event loop polls that socket and the listeners, waiting for the
  client's next request. Only while the server has one connection: with more, there is
  always something to do, and CPU is what they need.
- **the client** (``busy_poll`` connection option, client/connection.py): after sending a
  request, the client polls its socket for the answer before it blocks in ``recv``.

Either only when the process may use two CPUs or more — by its CPU set and its cgroup's
quota (on one, the polling would take the CPU from the very process it waits for).

What it costs: up to the budget of CPU per wait, and nothing else. It stands aside by
itself where it does not pay:

- **Slow bytes.** When they come later than the budget (a client that thinks longer, a
  server busy with other clients' group commits), polling fades. The poller keeps a count
  *k* of how many more of the recent waits were slow than quick, and after a poll that
  missed lets 2^k − 1 waits pass unpolled (at most 1,023: *k* stops at 10). A poll that
  saw its bytes in time counts as quick; so does a wait that was not polled, when its
  owner says how long it took (:meth:`BusyPoll.waited`: the client does, the server does
  not), though it does not cut short the skipping under way. So a client among many,
  whose answers mostly wait for others' group commit, polls a few times at its start and
  then about once in a thousand waits, however often a quick answer comes (cutting the
  skipping short at quick ones had them poll ~30 times in 2,000 pushes, a 1 ms poll each,
  measured); a lone client that saw one slow answer (a checkpoint) skips one wait; one
  whose server becomes free again polls once the waits it was letting pass are over.
- **No CPU to spare.** A thread that polls every wait never sleeps, so if it is ever
  runnable but not running, other tasks had every CPU. Where Linux tells a thread how
  long that was (``/proc/self/task/<tid>/schedstat``), the poller reads it as each poll
  begins; when it took over a tenth of the time since the previous poll began, the thread
  polls no more for thirty times as long as it was kept waiting. Only stretches without a
  sleep are weighed: a thread woken from one waits for a CPU too, for the wake-up itself.
  Time is what is weighed, not polls: 16 client processes reading from one server on two
  CPUs get their answers within the budget, poll quickly for a few milliseconds, then
  lose their CPU to one another for tens of milliseconds (measured: 3% of the intervals
  between their polls, 87% of the time); polling for those reads cost a quarter of their
  throughput. A lone client whose CPU a kernel thread takes for a moment stops polling
  for thirty such moments. So does one that sat idle: on our VM the first answers after
  half a second of idling take milliseconds, and part of that the client is kept off its
  CPU (seen: 4 of 10 ms), so it polls again some 100 ms of requests later.

A poll that finds its bytes already there (the rest of a pipeline that came in two
reads) says nothing of the other end and changes nothing. A peer in the same process (a
test's client and server), whose bytes need the GIL the polling thread holds, seldom
comes in time, and so costs a few polls. Where Python has no ``poll()`` (Windows) nobody
busy-polls.
"""

from __future__ import annotations

import os
import select
import threading
import time

#: The longest busy poll accepted (server and client), in microseconds: past a few hundred
#: it mostly burns CPU.
MAX_BUSY_POLL = 10_000
#: When the thread spent more than this share of the time between two polls runnable but
#: waiting for a CPU, it stops polling for HOLD times as long as it waited.
CROWDED = 0.1
HOLD = 30
#: The most *k* counts: after a poll missed at k = 10, 2**10 - 1 waits pass unpolled.
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
    """BusyPoll waits, awake, for one of a few sockets to become readable; it polls less
    when waits are mostly longer than its budget, and stops for a while when its thread was
    kept waiting for a CPU.

    :param fds: the sockets to watch (the server: its connection's, then the listeners).
    :param budget: seconds to poll at most each time.
    """

    __slots__ = ("budget", "polls", "hits", "_poll", "_skip", "_misses", "_sched", "_thread", "_then",
                 "_until")

    def __init__(self, fds: list[int], budget: float):
        self._sched: int | None = None  # the polling thread's /proc schedstat, open
        self.budget = budget
        self.polls = self.hits = 0  # polls that waited, and those that saw their bytes in time
        self._poll = select.poll()
        for fd in fds:
            self._poll.register(fd, select.POLLIN)
        self._skip = 0  # waits still to let pass without polling (slow waits)
        self._misses = 0  # k: recent slow waits less quick ones (0..MAX_MISSES)
        self._thread = None  # the thread _sched is of
        self._then: tuple[int, float] | None = None  # its run delay (ns) and the clock at the last poll's start
        self._until = 0.0  # no polling before this clock time (no CPU to spare)

    def __del__(self):
        if self._sched is not None:
            os.close(self._sched)

    def wanted(self) -> bool:
        """Whether to poll this time: not while backing off after slow waits, nor for a
        while after the thread was kept waiting for a CPU."""
        held = self._until and time.monotonic() < self._until  # (time, not waits: no skip counted)
        if not held:
            if not self._skip:
                return True
            self._skip -= 1
        self._then = None  # this wait sleeps: the time until the next poll says nothing of the CPUs
        return False

    def run(self) -> bool:
        """Poll until something is readable (True) or the budget is spent (False)."""
        poll = self._poll.poll
        if poll(0):  # already there (the rest of a pipeline): no sign of how quick the other end is
            return True
        self.polls += 1
        self._weigh_cpus()
        clock = time.monotonic
        end = clock() + self.budget
        while not poll(0):
            if clock() >= end:
                self._misses = min(self._misses + 1, MAX_MISSES)
                self._skip = (1 << self._misses) - 1
                self._then = None  # the caller sleeps now
                return False
        self.hits += 1
        if self._misses:
            self._misses -= 1
        return True

    def waited(self, seconds: float) -> None:
        """A wait that was not polled took ``seconds`` until its bytes came: count it as a poll would have."""
        if seconds > self.budget:
            self._misses = min(self._misses + 1, MAX_MISSES)
        elif self._misses:
            self._misses -= 1

    def _weigh_cpus(self) -> None:
        """At a poll's start: how long was the thread runnable but not running since the last
        poll began (Linux's per-thread schedstat: run time, run delay, slices), if it never
        slept in between — a thread that does not sleep waits for a CPU only when other tasks
        have them all? Over CROWDED of that time, polling stops for HOLD times as long as the
        thread was kept waiting. Nothing where schedstat cannot be read."""
        thread = threading.get_ident()
        if thread != self._thread:  # the first poll, or the connection changed threads
            if self._sched is not None:
                os.close(self._sched)
                self._sched = None
            self._thread, self._then = thread, None
            try:
                self._sched = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
            except (OSError, AttributeError):
                return
        if self._sched is None:
            return
        try:
            delay = int(os.pread(self._sched, 64, 0).split()[1])
        except (OSError, ValueError, IndexError):
            return
        now = time.monotonic()
        if self._then is not None:
            before, then = self._then
            kept = (delay - before) / 1e9
            if kept > CROWDED * (now - then):  # kept off its CPU: stand aside for a while
                self._until = now + HOLD * kept
        self._then = (delay, now)
