"""Waiting for the background index builder: the tests wait on the state describe shows, never on a time."""

from __future__ import annotations

import time

#: How long a test waits before it gives up on a build that never ends (a hang, not a speed).
GIVE_UP = 300


def wait_built(bucket) -> list[dict]:
    """Wait until no index of ``bucket`` is ``building``; its indexes as describe shows them."""
    deadline = time.monotonic() + GIVE_UP
    while True:
        indexes = bucket.describe()["indexes"]
        if all(ix["state"] != "building" for ix in indexes):
            return indexes
        assert time.monotonic() < deadline, f"still building after {GIVE_UP}s: {indexes}"
        time.sleep(0.005)
