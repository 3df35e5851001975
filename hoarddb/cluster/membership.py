"""A node's own join and drain: taking its share of the cluster's partitions once it is up (``hoarddb server --join``), and giving them to the others before it stops (``--drain-on-stop``).

Both run the plan that ``hoarddb cluster add-node`` / ``remove-node`` run (:func:`moves.plan`),
for this node, from the node itself; the nodes' movers then move the partitions as they do
for those commands (hoarddb/cluster/moves.py). This module only decides when to plan, and
follows the moves it planned:

- **join**: once the node has started (its catalog caught up, its mover running), it plans
  its own addition, which records it as a member (hoarddb/cluster/members.py) even when no
  partition moves to it; while moves are under way or the plan is refused (a node of the
  cluster down), it tries again every few seconds, saying why once. The node serves from
  the start; the partitions arrive one move at a time.
- **drain**: at the first SIGTERM or SIGINT (hoarddb/server/server.py), it waits for moves
  under way, plans its own removal (which ends its membership, even when it held nothing),
  and waits for every move from it to end, while serving, within ``drain_timeout``; then the
  server stops. A refused plan (a queue bucket whose partitions cannot move, the last node of
  the cluster, a node down) is logged with its reason, and the node stops without draining.
  A drain cut short (its timeout, a second signal) leaves its moves recorded: the node's
  partitions not yet moved are unavailable until it starts again, and the moves resume then.

While either runs, ``state/<node>`` in etcd (under the node's lease) says so, with the
partitions left to move: ``hoarddb cluster status`` shows it beside the node.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ..errors import HoardError
from .moves import plan
from .tasks import cancel_and_wait

log = logging.getLogger("hoarddb.cluster")

#: Seconds between a join's tries while it cannot plan yet, and between looks at the moves it follows.
RETRY = 2.0
POLL = 0.5


class Membership:
    """Membership is one node's join at start and drain at stop (the plans of add-node and remove-node, for itself)."""

    def __init__(self, node):
        self.node = node
        self.coord = node.coord
        self._join: asyncio.Task | None = None

    def start(self, join: bool) -> None:
        """Begin the join in the background (when asked): the node serves meanwhile."""
        if join:
            self._join = asyncio.get_running_loop().create_task(self._joining())

    async def stop(self) -> None:
        if self._join is not None and not self._join.done():
            await cancel_and_wait(self._join)

    # -- join

    async def _joining(self) -> None:
        try:
            await self._join_once()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("join: unexpected failure; this node takes no share by itself (run hoarddb cluster "
                          "add-node for it)")

    async def _join_once(self) -> None:
        me = self.node.node_id
        said = None
        while True:
            try:
                pending = await self.coord.moves()
                if pending:
                    why = f"{len(pending)} partition move(s) are under way; the join waits for them to end"
                else:
                    planned = await plan(self.coord, add=me)
                    break
            except HoardError as e:
                why = e.message
            if why != said:
                log.warning("join: this node cannot take its share yet: %s (trying again every %.0f s)", why, RETRY)
                said = why
            await asyncio.sleep(RETRY)
        moves = planned["moves"]
        if not moves:
            log.info("join: this node is a member, and holds its share of every bucket already; nothing to move")
            return
        log.info("join: %d partition(s) to move to this node (%s)", len(moves), _per_bucket(moves))
        await self._follow("joining", lambda m: m.get("to") == me, None)
        try:
            mine = sum(o == me for a in (await self.coord.assignments()).values() for o in a["owners"])
        except HoardError:
            mine = "its"
        log.info("join: done; this node is assigned %s partition(s)", mine)

    # -- drain

    async def drain(self, timeout: float) -> bool:
        """Move every partition of this node to the others (``remove-node`` for itself), within ``timeout``
        seconds; whether it was drained. Called at the first stop signal, the node serving meanwhile."""
        try:
            return await self._drain(timeout)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("drain: unexpected failure; stopping without draining the rest")
            return False

    async def _drain(self, timeout: float) -> bool:
        await self.stop()  # a join still under way ends here
        me = self.node.node_id
        deadline = time.monotonic() + timeout
        log.info("drain: moving this node's partitions to the other nodes before stopping (up to %.0f s; "
                 "a second stop signal stops at once)", timeout)
        said = None
        while True:
            try:
                pending = await self.coord.moves()
            except HoardError as e:
                pending, why = None, e.message
            else:
                why = f"{len(pending)} partition move(s) are under way; the drain waits for them to end"
            if pending == {}:
                break
            if why != said:
                log.warning("drain: %s", why)
                said = why
            if time.monotonic() > deadline:
                log.error("drain: not begun within %.0f s (%s); stopping without draining: this node's partitions "
                          "are unavailable (PARTITION_UNAVAILABLE) until it starts again", timeout, why)
                return False
            await asyncio.sleep(POLL)
        try:
            assigned = sum(o == me for a in (await self.coord.assignments()).values() for o in a["owners"])
            planned = await plan(self.coord, remove=me)  # (holding nothing, it only leaves the members)
            if not assigned:
                log.info("drain: this node is assigned no partition; nothing to move (it is no longer a member)")
                return True
        except HoardError as e:
            log.error("drain refused: %s; stopping without draining: this node's partitions are unavailable "
                      "(PARTITION_UNAVAILABLE) until it starts again", e.message)
            return False
        moves = planned["moves"]
        if moves:
            log.info("drain: %d partition(s) to move off this node (%s)", len(moves), _per_bucket(moves))
        if not await self._follow("draining", lambda m: m.get("from") == me, deadline):
            left = [m for m in (await self._moves_or_none() or {}).values() if m.get("from") == me]
            log.error("drain: %d partition(s) not moved within %.0f s; stopping anyway: they are unavailable "
                      "(PARTITION_UNAVAILABLE) until this node starts again, and their moves resume then",
                      len(left), timeout)
            return False
        log.info("drain: done; every partition of this node is served by the others (this node is taken out of "
                 "the maps: start it with --join to give it a share again)")
        return True

    # -- following the moves planned

    async def _follow(self, state: str, mine, deadline: float | None) -> bool:
        """Wait until no recorded move is ``mine``, logging how many are left as it changes and noting it in
        ``state/<node>``; False when ``deadline`` (monotonic) passes first."""
        left = None
        since = time.time()
        while True:
            moves = await self._moves_or_none()
            if moves is not None:
                now = sorted(k for k, m in moves.items() if mine(m))
                if len(now) != left:
                    if now and left is not None:
                        log.info("%s: %d partition(s) left to move", state.removesuffix("ing"), len(now))
                    left = len(now)
                    await self._note({"state": state, "left": left, "since": since} if now else None)
                if not now:
                    return True
            if deadline is not None and time.monotonic() > deadline:
                return False
            await asyncio.sleep(POLL)

    async def _moves_or_none(self) -> dict | None:
        try:
            return await self.coord.moves()
        except HoardError as e:
            log.warning("cannot read the moves: %s", e.message)
            return None

    async def _note(self, state: dict | None) -> None:
        try:
            await self.coord.put_state(state)
        except HoardError as e:
            log.warning("cannot note this node's state in etcd: %s", e.message)


def _per_bucket(moves: list[dict]) -> str:
    counts: dict[str, int] = {}
    for m in moves:
        counts[m["bucket"]] = counts.get(m["bucket"], 0) + 1
    return ", ".join(f"{b}: {n}" for b, n in sorted(counts.items()))
