"""DbIDs: UUIDv7 layout, and order in creation order within a process."""

from __future__ import annotations

import threading
import time
import uuid

from hoarddb.ids import UUID7Generator, uuid7, uuid7_ms


def test_uuid7_is_a_version_7_rfc_variant_uuid():
    text = uuid7()
    u = uuid.UUID(text)
    assert str(u) == text  # lowercase, canonical 8-4-4-4-12 form
    assert u.version == 7
    assert u.variant == uuid.RFC_4122
    assert (u.int >> 76) & 0xF == 7
    assert (u.int >> 62) & 0b11 == 0b10


def test_uuid7_carries_the_current_unix_milliseconds():
    before = time.time_ns() // 1_000_000
    text = uuid7()
    after = time.time_ns() // 1_000_000
    assert before <= uuid7_ms(text) <= after
    assert uuid7_ms(text) == uuid.UUID(text).int >> 80


def test_uuid7_strictly_increases_over_100k_calls():
    ids = [uuid7() for _ in range(100_000)]
    assert all(a < b for a, b in zip(ids, ids[1:]))
    assert all(uuid.UUID(i).int < uuid.UUID(j).int for i, j in zip(ids[:1000], ids[1:1001]))


def test_ids_in_one_millisecond_still_increase():
    gen = UUID7Generator(clock=lambda: 1_700_000_000_123_456_789)
    ids = [gen() for _ in range(10_000)]
    assert all(a < b for a, b in zip(ids, ids[1:]))
    assert {uuid7_ms(i) for i in ids} == {1_700_000_000_123}
    assert all(uuid.UUID(i).version == 7 for i in ids)


def test_a_clock_stepping_back_does_not_break_the_order():
    now = [2_000_000_000_000_000_000]

    def clock():
        now[0] -= 5_000_000  # five milliseconds back on every call
        return now[0]

    gen = UUID7Generator(clock=clock)
    ids = [gen() for _ in range(1000)]
    assert all(a < b for a, b in zip(ids, ids[1:]))


def test_counter_overflow_moves_to_the_next_millisecond():
    gen = UUID7Generator(clock=lambda: 5_000_000_000)  # 5000 ms
    first = gen()
    gen._counter = (1 << 42) - 1  # as if 2**41 ids were made in this millisecond
    second = gen()
    assert first < second
    assert uuid7_ms(second) == uuid7_ms(first) + 1


def test_concurrent_threads_get_distinct_ids_each_in_order():
    per_thread: list[list[str]] = [[] for _ in range(8)]

    def make(out: list[str]) -> None:
        for _ in range(5000):
            out.append(uuid7())

    threads = [threading.Thread(target=make, args=(out,)) for out in per_thread]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for out in per_thread for i in out]
    assert len(set(every)) == len(every)
    for out in per_thread:
        assert out == sorted(out)
