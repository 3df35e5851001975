"""How many logins may fail: a lockout with a time, per user name and per client address.

Every failed login (an unknown user or a wrong password) is counted twice: against the
user name it tried, and against the address it came from (the IP, without the port).
Failures older than ``lockout`` seconds are forgotten. When a name reaches
``user_failures`` failures within that time, every login to that name is refused for
``lockout`` seconds, the right password included, without looking at the password: a
guesser gets no answer to its guesses meanwhile, however many connections it opens. An
address that reaches ``address_failures`` is refused the same way, whatever name it
tries (a guesser spraying one password over many names), except for the names that
have logged in from that address before: someone else's failures from a shared
address (a NAT, a proxy) never lock out a user who has logged in from it, and failures
on one user never slow a login to another. Names that do not exist are counted and
locked like real ones, so a lockout never tells which names exist.

All of it lives on the event loop's thread: no locks. The tables are bounded
(``MAX_ENTRIES`` each, the oldest forgotten first), so a guesser trying millions of
names or addresses holds a bounded amount of memory.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict

#: Entries kept per table (names, addresses, names known at an address) before the oldest go.
MAX_ENTRIES = 100_000
#: Characters of a name kept as its key (a real one has at most 64; a guesser's may be 16 KiB).
MAX_KEY = 128


class _Counts:
    """_Counts is failures per key within a window, and the keys locked out until when."""

    def __init__(self, limit: int, window: float, clock):
        self.limit = limit
        self.window = window
        self.clock = clock
        self._failures: OrderedDict[str, list] = OrderedDict()  # key -> [count, first failure, locked until]

    def locked_for(self, key: str) -> float:
        """Seconds the key stays locked out (0.0 when it is not)."""
        entry = self._failures.get(key)
        if entry is None:
            return 0.0
        return max(0.0, entry[2] - self.clock())

    def failed(self, key: str) -> bool:
        """Count one failure; True when it locks the key out (from now for ``window`` seconds)."""
        if not self.limit:
            return False
        now = self.clock()
        entry = self._failures.get(key)
        if entry is None or now - entry[1] > self.window:
            entry = [0, now, entry[2] if entry is not None else 0.0]
        entry[0] += 1
        self._failures[key] = entry
        self._failures.move_to_end(key)
        while len(self._failures) > MAX_ENTRIES:
            self._failures.popitem(last=False)
        if entry[0] >= self.limit:
            entry[0], entry[1], entry[2] = 0, now, now + self.window
            return True
        return False

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)


class LoginLimiter:
    """LoginLimiter says whether a login may be tried, and counts those that fail.

    :param user_failures: failed logins to one name that lock it out (0: no limit per name).
    :param address_failures: failed logins from one address that lock it out (0: no limit).
    :param lockout: seconds failures are remembered, and a lockout lasts (0: no lockouts).
    """

    def __init__(self, user_failures: int = 5, address_failures: int = 20, lockout: float = 60.0,
                 clock=time.monotonic):
        self.lockout = lockout
        self._users = _Counts(user_failures if lockout else 0, lockout, clock)
        self._addresses = _Counts(address_failures if lockout else 0, lockout, clock)
        self._known: OrderedDict[tuple[str, str], None] = OrderedDict()  # (address, user) that logged in

    def refusal(self, user: str, address: str) -> tuple[str, str] | None:
        """``(reason, message)`` if a login to ``user`` from ``address`` is locked out now, else None."""
        user = user[:MAX_KEY]
        seconds = self._users.locked_for(user)
        if seconds:
            return "locked_user", (f"too many failed logins to user {user!r:.70}: its logins are refused for "
                                   f"{math.ceil(seconds)} s more, whatever the password; try again then")
        seconds = self._addresses.locked_for(address)
        if seconds and (address, user) not in self._known:
            return "locked_address", (f"too many failed logins from {address}: logins from it are refused for "
                                      f"{math.ceil(seconds)} s more (users who logged in from it before are let in); "
                                      "try again then")
        return None

    def failed(self, user: str, address: str) -> list[str]:
        """Count a failed login; what it locked out (``["user", "address"]``, or fewer)."""
        user = user[:MAX_KEY]
        locked = []
        if self._users.failed(user):
            locked.append("user")
        if self._addresses.failed(address):
            locked.append("address")
        return locked

    def succeeded(self, user: str, address: str) -> None:
        """A login that worked: the name's failures are forgotten, and the name is known at the address."""
        user = user[:MAX_KEY]
        self._users.forget(user)
        key = (address, user)
        self._known[key] = None
        self._known.move_to_end(key)
        while len(self._known) > MAX_ENTRIES:
            self._known.popitem(last=False)
