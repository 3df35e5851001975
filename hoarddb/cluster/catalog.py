"""A node's copy of the cluster's catalog: caught up with etcd at start, then kept so by watching it.

It watches ``catalog/`` (buckets and databases) and ``assign/`` (each bucket's map).

The node that is asked to create, alter or drop a bucket, or to create or drop a database,
records it in etcd and then tells every live node (hoarddb/cluster/node.py), so that the
change is done everywhere before its answer. An alter is recorded in the bucket's
declaration (:meth:`CatalogWatch.record_alter`: its ``altered`` changes, one transaction on
the declaration as read), and each node makes its own declaration the one etcd has
(``_declare``). A node that was down then, or that the message did not reach, learns it
here:

- at start, from a snapshot of ``catalog/``: a bucket this node made for the cluster that is
  no longer there — or is there as a newer bucket of the same name (dropped and created
  again) — is dropped here; a database likewise; every bucket of the cluster is created here
  if it is not yet (and altered as etcd's declaration says), and its partitions taken;
- then from the watch of ``catalog/`` (buckets and databases created and dropped) and of
  ``assign/`` (a bucket's map: the owners of its partitions), resumed by the etcd client
  when a member dies, started again from a snapshot when etcd's history was compacted.

Which buckets and databases this node made for the cluster, and at which etcd revision
they were created, is kept in ``DATA/_cluster/catalog.json``: a drop seen late removes only
what the cluster made (never a bucket of the data directory the cluster does not know),
and a change seen twice (told, then watched) is done once. The file names the etcd cluster
too: a node started against another etcd (or one whose data was lost) drops nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

from .. import operations
from ..catalog_operations import ALTERABLE, alter_declaration
from ..declaration import check_fields, declare_bucket
from ..errors import HoardError
from ..storage.oserrors import fsync_directory
from .coord import DELETE, WatchCompacted
from .tasks import cancel_and_wait

log = logging.getLogger("hoarddb.cluster")

#: The directory of a node's own cluster state, in its data directory.
CLUSTER_DIR = "_cluster"
_DROP_BUCKET = next(n for n, o in operations.ADMIN.items() if o.change == "drop" and o.scope == operations.BUCKET)
_DROP_DATABASE = next(n for n, o in operations.ADMIN.items() if o.change == "drop" and o.scope == operations.DATABASE)
_ALTER_BUCKET = next(n for n, o in operations.ADMIN.items() if o.change == "alter" and o.scope == operations.BUCKET)
_DESCRIBE_BUCKET = operations.DESCRIBE_BUCKET.name


class CatalogWatch:
    """CatalogWatch keeps one node's buckets and placements the same as the cluster's catalog in etcd."""

    def __init__(self, node):
        self.node = node
        self.coord = node.coord
        self.path = Path(node.server.config.data) / CLUSTER_DIR / "catalog.json"
        #: what this node made for the cluster: {"buckets": {"db/bucket": created}, "databases": {db: created}}
        self.made = self._read()
        #: held while a catalog change is done here (told by a node, or watched)
        self.lock = asyncio.Lock()
        self._tasks: list[asyncio.Task] = []
        #: drops this node is making itself ("db/bucket", or "db" for a database): its watch leaves them
        #: to the node's own part of the change (told), which answers the client
        self._own: set[str] = set()
        #: the mod revision of each bucket's declaration last made so here ("db/bucket"): an older one seen
        #: late by the watch (an alter told first, then watched) is not applied over a newer one
        self._altered_at: dict[str, int] = {}

    # -- life cycle

    async def start(self) -> None:
        """Catch up with etcd's catalog, then watch it."""
        revision = await self._catch_up()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._follow("catalog", revision, self._catalog_changed)),
                       loop.create_task(self._follow("assign", revision, self._assignment_changed))]

    async def stop(self) -> None:
        await cancel_and_wait(*self._tasks)

    async def _catch_up(self) -> int:
        """Make this node's buckets the cluster's, from a snapshot of ``catalog/``; the revision read at."""
        changes, revision = await self.coord.snapshot("catalog")
        buckets = {c.name[len("buckets/"):]: c for c in changes if c.name.startswith("buckets/")}
        databases = {c.name[len("databases/"):]: c for c in changes if c.name.startswith("databases/")}
        async with self.lock:
            etcd = str(self.coord.etcd_cluster_id)
            latest = max([*self.made["buckets"].values(), *self.made["databases"].values(), 0])
            if self.made.get("etcd") not in (None, etcd) or latest > revision:
                # another etcd than the one this node's record came from (or one started again empty):
                # its catalog says nothing of what was dropped, so nothing is dropped here
                log.warning("this node's record of the cluster's buckets came from another etcd (cluster id %s, "
                            "revision %d; now %s at revision %d): no bucket is dropped here, the buckets of the "
                            "cluster's catalog are adopted", self.made.get("etcd"), latest, etcd, revision)
                self.made["buckets"], self.made["databases"] = {}, {}
            self.made["etcd"] = etcd
            for name, created in list(self.made["buckets"].items()):
                entry = buckets.get(name)
                if entry is None or entry.created != created:
                    log.info("bucket %s was dropped from the cluster while this node was away: dropped here", name)
                    await self._drop_bucket(*name.split("/", 1))
            for db, created in list(self.made["databases"].items()):
                entry = databases.get(db)
                if entry is None or entry.created != created:
                    log.info("database %s was dropped from the cluster while this node was away: dropped here", db)
                    await self._drop_database(db)
            for db, entry in databases.items():
                self.made["databases"][db] = entry.created
            for name, entry in buckets.items():
                await self._adopt(name, entry)
            self._write()
        return revision

    async def _follow(self, prefix: str, revision: int, handle) -> None:
        """Hand every change under ``prefix`` after ``revision`` to ``handle``, for as long as the node runs."""
        while True:
            try:
                async for change in self.coord.watch(revision, prefix):
                    revision = change.revision
                    try:
                        await handle(change)
                    except HoardError as e:
                        log.error("the cluster's change of %s%s could not be applied here: %s", prefix + "/",
                                  change.name, e.message)
                continue  # the stream ended (the client gave it up): watch again from where it was
            except asyncio.CancelledError:
                raise
            except WatchCompacted as e:
                log.warning("%s; catching up with a new snapshot", e.message)
            except Exception as exc:
                log.warning("the watch of the cluster's %s/ stopped (%s); starting it again", prefix, exc)
            await asyncio.sleep(0.5)
            while True:
                try:
                    revision = await self._catch_up()
                    break
                except HoardError as e:
                    log.warning("cannot read the cluster's catalog yet: %s", e.message)
                    await asyncio.sleep(1.0)

    # -- changes

    def expect(self, op: operations.Operation, db, bucket) -> None:
        """This node is about to drop a bucket or a database in etcd, and then here (``told``)."""
        if op.change == "drop" and isinstance(db, str):
            self._own.add(db if op.scope == operations.DATABASE else f"{db}/{bucket}")

    def done(self, op: operations.Operation, db, bucket) -> None:
        """This node's own drop is done here (or failed): the watch looks at that name again."""
        self._own.discard(db if op.scope == operations.DATABASE else f"{db}/{bucket}")

    def _is_own(self, name: str) -> bool:
        return name in self._own or name.split("/", 1)[0] in self._own

    async def _catalog_changed(self, change) -> None:
        kind, name = change.kind, change.name
        async with self.lock:
            if name.startswith("buckets/"):
                name = name[len("buckets/"):]
                made = self.made["buckets"].get(name)
                if kind == DELETE:
                    if (made is not None and made > change.revision) or self._is_own(name):
                        return  # a newer bucket of the name is here already; or this node's own drop
                    if made is not None or tuple(name.split("/", 1)) in self.node.placements:
                        await self._drop_bucket(*name.split("/", 1))
                else:
                    if made == change.created:  # this bucket, told already; its declaration may be altered
                        await self._declare(name, change)
                        return
                    if made is not None:  # an older bucket of the name: dropped first
                        await self._drop_bucket(*name.split("/", 1))
                    await self._adopt(name, change)
            elif name.startswith("databases/"):
                db = name[len("databases/"):]
                made = self.made["databases"].get(db)
                if kind == DELETE:
                    if (made is not None and made > change.revision) or db in self._own:
                        return
                    if made is not None or any(k[0] == db for k in self.node.placements):
                        await self._drop_database(db)
                else:
                    self.made["databases"][db] = change.created
            self._write()

    async def _assignment_changed(self, change) -> None:
        """A bucket's map changed: its owners as etcd has them now."""
        db, _, bucket = change.name.partition("/")
        place = self.node.placements.get((db, bucket))
        if place is not None and change.kind != DELETE and change.value:
            place["owners"] = list(change.value["owners"])

    async def told(self, op: operations.Operation, doc: dict, apply) -> dict:
        """Apply a catalog change another node recorded and told this one (``apply``: node.py's), and note it."""
        async with self.lock:
            db, bucket = doc.get("db"), doc.get("bucket")
            if op.change == "alter" and isinstance(db, str) and isinstance(bucket, str):
                entry = await self.coord.bucket_entry(db, bucket)
                if entry is not None and self.made["buckets"].get(entry.name) == entry.created:
                    return await self._declare(entry.name, entry)  # as etcd has it now, whichever alter was last
            answer = await apply(op, doc)
            if op.change == "create" and op.scope == operations.BUCKET and answer.get("ok") == 1:
                entry = await self.coord.bucket_entry(db, bucket)
                if entry is not None:
                    self.made["buckets"][f"{db}/{bucket}"] = entry.created
            elif op.change == "drop" and op.scope == operations.BUCKET:
                self.made["buckets"].pop(f"{db}/{bucket}", None)
            elif op.change == "drop" and op.scope == operations.DATABASE:
                self._forget_database(db)
            self._write()
            return answer

    # -- an alter: recorded in etcd's declaration, made so on every node

    async def record_alter(self, doc: dict) -> dict | None:
        """An ``alter_bucket`` asked of this node, checked against the cluster's declaration and recorded in it
        in one transaction (the changes of every alter so far are its ``altered``); the client's answer. None
        when the bucket is not one of the cluster's (the engine here answers)."""
        db, bucket, raw = doc.get("db"), doc.get("bucket"), doc.get("options")
        if not isinstance(db, str) or not isinstance(bucket, str):
            return None
        for _ in range(10):
            entry = await self.coord.bucket_entry(db, bucket)
            if entry is None:
                return None
            _changed, warnings = alter_declaration(declared(bucket, entry.value), raw)  # every refusal, first
            altered = {**(entry.value.get("altered") or {}), **{k: raw[k] for k in ALTERABLE if k in raw}}
            if await self.coord.alter_bucket(entry, {**entry.value, "altered": altered}):
                answer = {"ok": 1, "result": {"name": bucket, "altered": sorted(k for k in raw if k != "type")}}
                if warnings:
                    answer["warnings"] = warnings
                return answer
        raise HoardError(f"bucket {db}.{bucket}: its declaration kept changing in etcd while this alter was "
                         "recorded; try again")

    async def _declare(self, name: str, entry) -> dict:
        """Make this node's declaration of a bucket of the cluster the one etcd has (``entry``): its ``altered``
        changes applied here (an alter_bucket of the differences); the answer."""
        db, bucket = name.split("/", 1)
        done = {"ok": 1, "result": {"name": bucket, "altered": []}}
        if entry.revision < self._altered_at.get(name, 0):
            return done  # an older declaration than the one made here already
        wanted = (entry.value or {}).get("altered") or {}
        if not wanted:
            return done
        described = await self.node.server.run_here({"op": _DESCRIBE_BUCKET, "db": db, "bucket": bucket})
        if described.get("ok") != 1:
            return described
        here = described["result"]
        change = {}
        try:
            if "fields" in wanted and check_fields(wanted["fields"], []) != here.get("fields", []):
                change["fields"] = wanted["fields"]
        except HoardError as e:
            log.error("bucket %s.%s: the cluster's declaration has field lines this node refuses: %s", db, bucket,
                      e.message)
        if "placement" in wanted and wanted["placement"] != here.get("placement"):
            change["placement"] = wanted["placement"]
        answer = done
        if change:
            answer = await self.node.server.run_here({"op": _ALTER_BUCKET, "db": db, "bucket": bucket,
                                                      "options": change})
            if answer.get("ok") == 1:
                log.info("bucket %s.%s altered here as the cluster declares it (%s)", db, bucket,
                         ", ".join(sorted(change)))
            else:
                log.error("bucket %s.%s: the cluster's alter (%s) cannot be made here: %s", db, bucket,
                          ", ".join(sorted(change)), answer.get("message"))
                return answer
        self._altered_at[name] = entry.revision
        return answer

    # -- here

    async def _adopt(self, name: str, entry) -> None:
        db, bucket = name.split("/", 1)
        await self.node._apply_bucket(db, bucket, entry.value)
        await self.node._claim_assigned(db, bucket)
        if (db, bucket) in self.node.placements:
            self.made["buckets"][name] = entry.created
            await self._declare(name, entry)

    async def _drop_bucket(self, db: str, bucket: str) -> None:
        answer = await self.node.server.run_here({"op": _DROP_BUCKET, "db": db, "bucket": bucket})
        if answer.get("ok") != 1 and not str(answer.get("codeName")).endswith("NOT_FOUND"):
            log.warning("dropping %s.%s here: %s", db, bucket, answer.get("message"))
        self.node.placements.pop((db, bucket), None)
        for held in [h for h in self.coord.held if h[:2] == (db, bucket)]:
            del self.coord.held[held]
        self.made["buckets"].pop(f"{db}/{bucket}", None)

    async def _drop_database(self, db: str) -> None:
        answer = await self.node.server.run_here({"op": _DROP_DATABASE, "db": db})
        if answer.get("ok") != 1 and not str(answer.get("codeName")).endswith("NOT_FOUND"):
            log.warning("dropping database %s here: %s", db, answer.get("message"))
        for key in [k for k in self.node.placements if k[0] == db]:
            del self.node.placements[key]
        for held in [h for h in self.coord.held if h[0] == db]:
            del self.coord.held[held]
        self._forget_database(db)

    def _forget_database(self, db: str) -> None:
        self.made["databases"].pop(db, None)
        for name in [n for n in self.made["buckets"] if n.split("/", 1)[0] == db]:
            del self.made["buckets"][name]

    # -- DATA/_cluster/catalog.json

    def _read(self) -> dict:
        try:
            made = json.loads(self.path.read_text("utf-8"))
        except FileNotFoundError:
            return {"buckets": {}, "databases": {}}
        except (OSError, ValueError) as exc:
            log.warning("%s cannot be read (%s): this node starts without knowing which buckets it made for "
                        "the cluster (a bucket dropped while it was away stays here)", self.path, exc)
            return {"buckets": {}, "databases": {}}
        return {"buckets": dict(made.get("buckets") or {}), "databases": dict(made.get("databases") or {}),
                "etcd": made.get("etcd")}

    def _write(self) -> None:
        write_json(self.path, self.made)


def declared(bucket: str, value: dict) -> dict:
    """The declaration a bucket of the cluster has (etcd's ``{options, partitions, altered?}``): created from
    its options, then altered."""
    decl, _warnings = declare_bucket(bucket, value.get("options") or {})
    if value.get("altered"):
        decl, _warnings = alter_declaration(decl, value["altered"])
    return decl


def write_json(path: Path, value) -> None:
    """Write ``value`` as JSON to ``path`` whole or not at all (a temporary file, fsynced, renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(path.name + ".tmp")
    with open(temp, "w", encoding="utf-8") as f:
        json.dump(value, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)
    fsync_directory(path.parent)
