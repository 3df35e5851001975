"""DbIDs: UUIDv7 strings that sort in the order they were made.

A DbID names a blob (and its file), and any document that asks for ``uuid auto``.
It is a UUID version 7 (RFC 9562, section 5.7) written as the usual lowercase
36-character text, so that comparing two ids as strings compares their times:

    >>> from hoarddb.ids import uuid7
    >>> a, b = uuid7(), uuid7()
    >>> a < b
    True

The 128 bits, most significant first:

    +------------------------+-------+------------+-----+----------------------+------------+
    | unix_ts_ms             | ver=7 | counter hi | var | counter lo           | random     |
    | 48 bits                | 4     | 12 (rand_a)| 2   | 30 bits              | 32 bits    |
    +------------------------+-------+------------+-----+----------------------+------------+

The 42-bit counter is RFC 9562's "fixed-length dedicated counter" (method 1): on each new
millisecond it starts from a random value below 2**41 (so at least 2**41 more ids fit in
that millisecond), and every further id in the same millisecond adds one. Ids made by
one process are therefore strictly increasing, even when many share a millisecond or the
clock steps back (the generator then keeps the last timestamp and counts on). If the
counter would overflow, the timestamp is advanced by one millisecond, as the RFC allows.
The last 32 bits stay random, so two processes writing in the same millisecond do not
collide. The generator is thread-safe, and a forked child starts a fresh sequence.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

_COUNTER_BITS = 42
_COUNTER_LIMIT = 1 << _COUNTER_BITS
_COUNTER_LO_BITS = 30
_COUNTER_LO_MASK = (1 << _COUNTER_LO_BITS) - 1
_VERSION = 0x7 << 76
_VARIANT = 0b10 << 62


class UUID7Generator:
    """UUID7Generator makes monotonic UUIDv7 strings; call it to get the next one.

    :param clock: nanoseconds since the unix epoch (``time.time_ns``); tests pass a
        frozen or backward-stepping clock.
    :param randbytes: ``n -> n random bytes`` (``os.urandom``).
    """

    def __init__(
        self,
        clock: Callable[[], int] = time.time_ns,
        randbytes: Callable[[int], bytes] = os.urandom,
    ):
        self._clock = clock
        self._randbytes = randbytes
        self.reset()

    def reset(self) -> None:
        """Forget the last id: the next one starts a new millisecond's sequence."""
        self._lock = threading.Lock()
        self._last_ms = -1
        self._counter = 0

    def __call__(self) -> str:
        ms = self._clock() // 1_000_000
        # 80 random bits: the top 41 seed a new millisecond's counter, the low 32 are
        # the id's random tail.
        rnd = int.from_bytes(self._randbytes(10), "big")
        seed, tail = rnd >> 39, rnd & 0xFFFFFFFF
        with self._lock:
            if ms > self._last_ms:
                counter = seed
            else:  # same millisecond, or the clock stepped back: count on
                ms = self._last_ms
                counter = self._counter + 1
                if counter >= _COUNTER_LIMIT:
                    ms += 1
                    counter = seed
            self._last_ms, self._counter = ms, counter
        value = (
            (ms & 0xFFFF_FFFF_FFFF) << 80
            | _VERSION
            | (counter >> _COUNTER_LO_BITS) << 64
            | _VARIANT
            | (counter & _COUNTER_LO_MASK) << 32
            | tail
        )
        h = f"{value:032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_generator = UUID7Generator()
if hasattr(os, "register_at_fork"):
    # A child must not continue its parent's sequence (nor inherit a held lock).
    os.register_at_fork(after_in_child=_generator.reset)


def uuid7() -> str:
    """A new DbID: a UUIDv7 string greater than every one this process made before."""
    return _generator()


def uuid7_ms(dbid: str) -> int:
    """The unix time in milliseconds a DbID made by :func:`uuid7` carries."""
    return int(dbid[:8] + dbid[9:13], 16)
