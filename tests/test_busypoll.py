"""BusyPoll on real sockets: a poll ends when bytes come, backs off when they come late, learns
from waits it let pass, and stands aside while its thread waits for a CPU (the server's and
the client's use of it: tests/server/test_busy_poll.py, tests/client/test_busy_poll.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hoarddb.busypoll import MAX_MISSES, BusyPoll, cpus

linux_schedstat = pytest.mark.skipif(not Path(f"/proc/self/task/{threading.get_native_id()}/schedstat").exists(),
                                     reason="needs Linux's per-thread schedstat")


@pytest.fixture
def calm(monkeypatch):
    """No weighing of the CPUs: these tests are about the backoff on slow bytes alone (a
    loaded machine would otherwise hold polling off, as it should)."""
    monkeypatch.setattr(BusyPoll, "_weigh_cpus", lambda self: None)


def skipped(poller) -> int:
    """Waits the backoff lets pass before the next poll."""
    n = 0
    while not poller.wanted():
        n += 1
    return n


# -- BusyPoll on real sockets

@pytest.fixture
def pair():
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    conn, _ = listener.accept()
    yield listener, client, conn
    for s in (listener, client, conn):
        s.close()


def test_a_poll_ends_when_the_connection_sends(pair):
    listener, client, conn = pair
    client.sendall(b"next request")
    started = time.monotonic()
    assert BusyPoll([conn.fileno(), listener.fileno()], 5.0).run() is True
    assert time.monotonic() - started < 1


def test_a_poll_ends_when_a_new_connection_waits_on_a_listener(pair):
    listener, client, conn = pair
    newcomer = socket.create_connection(listener.getsockname())  # queued for accept: the listener is readable
    try:
        started = time.monotonic()
        assert BusyPoll([conn.fileno(), listener.fileno()], 5.0).run() is True
        assert time.monotonic() - started < 1
    finally:
        newcomer.close()


def test_misses_back_off_and_a_hit_takes_one_step_back(pair, calm):
    listener, client, conn = pair
    poller = BusyPoll([conn.fileno(), listener.fileno()], 0.001)
    pattern = []
    for _ in range(15):  # nothing ever arrives: a poll at idle moments 1, 3, 7 and 15
        if poller.wanted():
            started = time.monotonic()
            assert poller.run() is False
            assert time.monotonic() - started >= 0.001
            pattern.append(1)
        else:
            pattern.append(0)
    assert pattern == [1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1]
    client.sendall(b"x")  # already there when the poll starts: says nothing of the client
    skipped(poller)
    assert poller.run() is True
    conn.recv(10)
    assert poller.wanted() and poller.run() is False  # the backoff goes on: the 5th miss ...
    assert skipped(poller) == 31  # ... lets 2**5 - 1 idle moments pass
    poller.budget = 5.0
    timer = threading.Timer(0.01, client.sendall, (b"y",))  # comes while the poll waits
    timer.start()
    assert poller.run() is True
    timer.join()
    conn.recv(10)
    assert poller.wanted()  # a poll that waited and saw a request takes one step back (4 misses) ...
    poller.budget = 0.001
    assert poller.run() is False
    assert skipped(poller) == 31  # ... so the next miss lets 2**5 - 1 pass again (not 1, as after 0 misses)


def test_the_backoff_stops_growing(pair, calm):
    listener, client, conn = pair
    poller = BusyPoll([conn.fileno()], 0.0)
    for _ in range(MAX_MISSES + 5):
        skipped(poller)
        poller.run()
    assert skipped(poller) == 2 ** MAX_MISSES - 1




def test_a_cgroup_quota_counts_as_fewer_cpus(tmp_path):
    mine = len(os.sched_getaffinity(0))
    cpu_max = tmp_path / "cpu.max"
    for text, expected in (("max 100000\n", mine), ("150000 100000\n", 1), ("50000 100000\n", 1),
                           (f"{100000 * (mine + 4)} 100000\n", mine), ("garbage\n", mine)):
        cpu_max.write_text(text)
        assert cpus(str(cpu_max)) == expected, text
    assert cpus(str(tmp_path / "missing")) == mine


def test_polls_and_hits_are_counted(pair, calm):
    listener, client, conn = pair
    poller = BusyPoll([conn.fileno()], 0.001)
    assert poller.run() is False
    client.sendall(b"x")
    assert poller.run() is True  # already there: no poll waited
    conn.recv(10)
    timer = threading.Timer(0.2, client.sendall, (b"y",))  # (long enough that the poll surely starts first)
    poller.budget = 5.0
    timer.start()
    assert poller.run() is True
    timer.join()
    assert (poller.polls, poller.hits) == (2, 1)


def test_waits_not_polled_teach_the_poller(pair, calm):
    listener, client, conn = pair
    poller = BusyPoll([conn.fileno()], 0.001)
    for _ in range(4):  # four misses in a row: 15 waits to let pass
        skipped(poller)
        assert poller.run() is False
    assert poller._skip == 15
    poller.waited(0.010)  # a slow answer to a wait let pass: k = 5, the skipping goes on as it was
    assert (poller._misses, poller._skip) == (5, 15)
    for _ in range(5):  # quick answers again: k = 0, the skipping goes on ...
        poller.waited(0.0001)
    assert (poller._misses, poller._skip) == (0, 15)
    assert skipped(poller) == 15  # ... to its end, and then every wait is polled
    assert poller.wanted() and poller.wanted()


HOG = r"""
import os, sys, time, socket, subprocess
from hoarddb.busypoll import BusyPoll
mine, *others = sorted(os.sched_getaffinity(0))
os.sched_setaffinity(0, {mine})
a, b = socket.socketpair()
echo = subprocess.Popen([sys.executable, "-c", f"import os, socket\nos.sched_setaffinity(0, {{{others[0]}}})\n"
                         f"s = socket.socket(fileno={b.fileno()})\nwhile True: s.sendall(s.recv(1))"], pass_fds=[b.fileno()])
poller = BusyPoll([a.fileno()], 0.05)

def waits(n):  # n requests to the echo on the other CPU, each after ~0.5 ms of work
    out = ""
    for _ in range(n):
        end = time.thread_time() + 0.0005
        while time.thread_time() < end:
            pass  # work: the thread stays runnable, as a polling one is
        a.sendall(b"x")
        polled = poller.wanted()
        if polled:
            poller.run()
        a.recv(1)
        out += "1" if polled else "0"
    return out

try:
    a.sendall(b"x")  # the echo is up (until then it ran on this CPU too: it starts with our CPU set)
    a.recv(1)
    print(waits(40))
    hog = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{mine}}})\nwhile True: pass"])
    try:
        time.sleep(0.1)
        print(waits(100))
    finally:
        hog.kill()
        hog.wait()
    print(waits(400))
finally:
    echo.kill()
"""


@linux_schedstat
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the echo needs a CPU of its own")
def test_no_polls_while_the_thread_waits_for_a_cpu(spare_cpu):
    # A child process polls for an echo from a process on another CPU; a CPU hog then
    # shares the child's CPU: the child, runnable all the time, runs half of it, which its
    # schedstat says, and it stops polling; once the hog is gone it polls again.
    out = subprocess.run([sys.executable, "-c", HOG], capture_output=True, text=True, timeout=120, check=True,
                         env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])))
    alone, shared, after = out.stdout.split()
    spare_cpu.expect("1" * 5 in alone, alone)  # polling (a moment off the CPU, to a third task, may pause it)
    assert shared.count("1") <= 30, shared  # a poll now and then, to look again
    spare_cpu.expect("1" * 40 in after, after)  # and polling all the time again once the CPU is free
