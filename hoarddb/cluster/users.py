"""A cluster's users: kept in etcd (``users/<user>``), mirrored into each node's users file, watched by every node.

etcd holds the users of a cluster; each node keeps a copy in its own users file
(hoarddb/server/users.py, reached through the server this node is: the cluster sits below
the server and imports nothing of it), which is what its logins read. So:

- a change made on a node (over the wire: create_user, update_user, set_roles, drop_user;
  or ``hoarddb user`` on its data directory) is applied to its file first, where every check
  a single server makes is made, then written to etcd (:meth:`ClusterUsers.publish`; a
  ``hoarddb user`` edit is found by the server's look at its file, :meth:`ClusterUsers.local_changed`);
- every node watches ``users/`` and writes each change into its file, then applies it to its
  open connections (``Server.users_changed``): a removed user's connections and those of a
  user whose password changed are refused at their next request and closed; a changed role
  holds from the next request on — on every node, within the watch's delay.

At start a node first offers etcd the users of its file that etcd lacks (so the first
node of a cluster brings its users; a later node's are taken only where the cluster has no
user of that name: the cluster's record wins), then makes its file what etcd holds. A user
the cluster had when this node last heard of it (``DATA/_cluster/users.json``) is never
offered again: if etcd lacks it, it was removed while the node was away.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

from .. import operations
from ..errors import BadValueError, HoardError
from .catalog import CLUSTER_DIR, write_json
from .coord import DELETE, Coordinator, WatchCompacted
from .tasks import cancel_and_wait

log = logging.getLogger("hoarddb.cluster")


class ClusterUsers:
    """ClusterUsers keeps one node's users file the same as the cluster's users in etcd, both ways."""

    def __init__(self, server, coord: Coordinator):
        self.server = server
        self.coord = coord
        #: the users as last agreed with etcd: {name: record} (what a local edit is compared with)
        self.known: dict[str, dict] = {}
        self._task: asyncio.Task | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Offer etcd the users it lacks (not those it had and removed), make the file what etcd holds, and watch."""
        await self.coord.snapshot("users")  # (the etcd cluster's id)
        agreed = self._read_agreed()
        for record in await self._run(self.server.users.users):
            if record["name"] in agreed:
                continue  # the cluster had it: if etcd has it no more, it was removed while this node was away
            if await self.coord.create_user(self.server.users.to_portable(record)):
                log.info("user %s of this node's users file is now the cluster's", record["name"])
        revision = await self._resync()
        self._task = asyncio.get_running_loop().create_task(self._watch(revision))

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    async def _resync(self) -> int:
        """Make the file what etcd holds now; the revision read at."""
        async with self._lock:
            return await self._resync_locked()

    async def _resync_locked(self) -> int:
        changes, revision = await self.coord.snapshot("users")
        cluster = {}
        for change in changes:
            try:
                cluster[change.name] = self.server.users.from_portable(change.value)
            except HoardError as e:
                log.error("user %s in etcd is left out: %s", change.name, e.message)
        here = {u["name"] for u in await self._run(self.server.users.users)}
        await self._apply({**{n: None for n in here - set(cluster)}, **cluster})
        return revision

    async def _watch(self, revision: int) -> None:
        """Apply every change to ``users/`` after ``revision``, for as long as the node runs."""
        while True:
            try:
                async for change in self.coord.watch(revision, "users"):
                    revision = change.revision
                    try:
                        record = None if change.kind == DELETE else self.server.users.from_portable(change.value)
                    except HoardError as e:
                        log.error("user %s in etcd is left out: %s", change.name, e.message)
                        continue
                    async with self._lock:
                        await self._apply({change.name: record})
            except asyncio.CancelledError:
                raise
            except WatchCompacted:
                revision = await self._resync_later()
                continue
            except Exception as exc:  # etcd unreachable past the client's retries: start again
                log.warning("the watch of the cluster's users stopped (%s); starting it again", exc)
            await asyncio.sleep(0.5)
            revision = await self._resync_later()

    async def _resync_later(self) -> int:
        while True:
            try:
                return await self._resync()
            except HoardError as e:
                log.warning("cannot read the cluster's users yet: %s", e.message)
                await asyncio.sleep(1.0)

    async def _apply(self, changes: dict) -> None:
        """Write ``{name: record or None}`` into the file, remember it as agreed, apply it to open connections."""
        if not changes:
            return
        if await self._run(self.server.users.mirror, changes):
            log.info("users changed in the cluster: %s", ", ".join(sorted(changes)))
        for name, record in changes.items():
            if record is None:
                self.known.pop(name, None)
            else:
                self.known[name] = record
        self._write_agreed()
        self.server.users_changed()

    # -- changes made on this node

    async def publish(self, op: str, name) -> None:
        """Write to etcd a change just made to this node's file by ``op`` (create_user, update_user,
        set_roles, drop_user) on user ``name``."""
        async with self._lock:
            record = await self._run(self.server.users.get, name) if isinstance(name, str) else None
            if record is None:
                await self.coord.drop_user(name)
                self.known.pop(name, None)
                self._write_agreed()
                return
            portable = self.server.users.to_portable(record)
            if op == operations.CREATE_USER.name and not await self.coord.create_user(portable) \
                    and await self.coord.user(name) != portable:
                # made meanwhile on another node (not this one's own record, sent already by
                # local_changed when it saw the file change): the cluster's record wins here too
                await self._resync_locked()
                raise BadValueError(f"user {name!r} exists already in the cluster (made on another node meanwhile); "
                                    f"set its password with `hoarddb user passwd {name}`")
            if op != operations.CREATE_USER.name:
                await self.coord.put_user(portable)
            self.known[name] = record
            self._write_agreed()

    async def local_changed(self) -> None:
        """The users file changed outside the server (``hoarddb user``): write its differences to etcd
        (tried again every second while etcd does not answer)."""
        while True:
            try:
                return await self._send_local()
            except HoardError as e:
                log.warning("cannot send this node's change of users to the cluster yet: %s", e.message)
                await asyncio.sleep(1.0)

    async def _send_local(self) -> None:
        async with self._lock:
            try:
                here = {u["name"]: u for u in await self._run(self.server.users.users)}
            except HoardError:
                return  # damaged: users.py says so; nothing is sent
            for name in set(here) | set(self.known):
                mine, agreed = here.get(name), self.known.get(name)
                if mine == agreed:
                    continue
                if mine is None:
                    await self.coord.drop_user(name)
                    self.known.pop(name, None)
                elif agreed is None and not await self.coord.create_user(self.server.users.to_portable(mine)):
                    log.warning("user %s added to this node's file exists already in the cluster: the cluster's "
                                "record stays", name)
                    await self._resync_locked()
                    return
                else:
                    if agreed is not None:
                        await self.coord.put_user(self.server.users.to_portable(mine))
                    self.known[name] = mine
                log.info("user %s changed in this node's users file: sent to the cluster", name)
            self._write_agreed()

    # -- DATA/_cluster/users.json: the names of the users last agreed with etcd (and which etcd)

    @property
    def _agreed_path(self) -> Path:
        return Path(self.server.config.data) / CLUSTER_DIR / "users.json"

    def _read_agreed(self) -> set[str]:
        """The users this node last knew the cluster to have, if that was this etcd; else none."""
        try:
            saved = json.loads(self._agreed_path.read_text("utf-8"))
        except (OSError, ValueError):
            return set()
        if saved.get("etcd") != str(self.coord.etcd_cluster_id):
            return set()
        return set(saved.get("names") or [])

    def _write_agreed(self) -> None:
        write_json(self._agreed_path, {"etcd": str(self.coord.etcd_cluster_id), "names": sorted(self.known)})

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
