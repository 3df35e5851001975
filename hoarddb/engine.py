"""The engine executes operations: the one place where an operation becomes effects.

``Engine.execute(request)`` takes an operation document and returns its answer
``{ok: 1, result: ..., warnings?: [...]}``, or raises a :mod:`hoarddb.errors` error
(the wire turns that into ``{ok: 0, code, codeName, message}``). An operation is looked
up in :mod:`hoarddb.operations`: one the engine runs itself (the catalog's: create/drop of
databases and buckets, describe, stats...) is a function of :mod:`hoarddb.catalog_operations`
(``HANDLERS``); a verb is checked and handed to the bucket's store, or a document's store field.

A data directory, as the engine lays it out:

    DATA/
      LOCK                  pid of the process that has it open (flock)
      catalog/              LMDB: databases and bucket declarations
      <db>/<bucket>/        one folder per bucket, owned by its store type
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import weakref
from pathlib import Path
from typing import Any, Callable

from . import catalog_operations, lifecycle, operations
from .catalog import Catalog, check_name, check_stored_name
from .cursors import Cursors, check_batch_size
from .catalog_operations import bucket_of, db_of
from .declaration import store_type_at
from .indexes.maintenance import Index
from .errors import (BadValueError, BucketNotFoundError, ClosedError, CorruptDataError, DatabaseNotFoundError,
                     HoardError, InternalError, InvalidArgumentError, StorageError,
                     UnknownVerbError, VerbNotSupportedError)
from .indexes.planner import plan
from .indexes.builder import Builder
from .indexes.ttl import Sweeper
from .metrics import Metrics
from .options import Options
from .storage.kv import commits_deferred
from .storage import segment_flush
from .storage.lock import DirectoryLock
from .storage.oserrors import is_full, storage_error
from .stores import store_class
from .stores.base import DAMAGE, Reply, Store
from .stores.claims import move_dead_letters
from .stores.fields import no_store_field

log = logging.getLogger("hoarddb.engine")

#: Operations that change declarations: they empty the engine's cache of (declaration, store).
CATALOG_CHANGES = operations.names(catalog=True)
#: Reads that may touch only one key (see Engine.is_point_read).
POINT_READS = frozenset(n for n, op in operations.VERBS.items() if op.cost in (operations.POINT, operations.INDEXED))
#: Reads that may be quick, and the most elements a quick one touches (Engine.is_quick_read).
QUICK_READS = frozenset(n for n, op in operations.VERBS.items()
                        if op.cost in (operations.POINT, operations.SHORT, operations.INDEXED))
QUICK_READ = 100
#: Verbs whose requests in a row to one queue run together in a group (each store type that
#: can has ``<verb>_each``): one segment append for many pushes, one state write for many pops.
TOGETHER = frozenset(n for n, op in operations.VERBS.items() if op.together)


#: What a value nested past what Python's recursion allows hears (a filter or update walked
#: recursively; MongoDB stops documents at 100 levels).
TOO_DEEP = ("a document, filter or update is nested too deeply to be handled (several hundred levels); "
            "keep nesting under 100 levels, as MongoDB does")


class Engine:
    """Engine is an open data directory: its lock, its catalog and its open stores.

    Why the class is over 400 lines: what is left in it is running requests, and every part
    of that shares the cache of (declaration, store) by bucket and the mutex that keeps it
    right across catalog changes: ``execute`` and ``call`` (one request), ``execute_group``
    (group commit's writes, with the queue runs of ``TOGETHER``), ``is_quick_read`` and
    ``is_point_read`` (the server's choice of where a request runs, asked of that cache), and
    ``sync``/``close``. The catalog's operations are in :mod:`hoarddb.catalog_operations`,
    the life cycle in :mod:`hoarddb.lifecycle`; splitting the rest would spread the cache's
    locking rule over modules, and put a call more on the path of every request.
    """

    def __init__(self, path, options: Options | None = None):
        self.path = Path(path)
        self.options = options or Options()
        lifecycle.refuse_inherited(self.path)
        lifecycle.wait_for_forgotten_close(self.path)
        try:
            if self.path.exists() and not self.path.is_dir():
                raise StorageError(f"cannot open data directory {self.path}: it is a file, not a directory; "
                                   "give the path of a directory (it is created if missing)")
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock = DirectoryLock(self.path)
            self._lock.acquire()
        except OSError as exc:
            if is_full(exc):
                raise storage_error(f"opening data directory {self.path}", exc, "nothing was opened") from None
            raise StorageError(f"cannot open data directory {self.path}: {exc.strerror or exc}; give a directory "
                               "this user may create and write (it is created if missing)") from None
        try:
            self.catalog = Catalog(self.path, sync=self.options.sync)
        except BaseException:
            self._lock.release()
            raise
        self._stores: dict[tuple[str, str], Store] = {}
        self._hot: dict[tuple[str, str], tuple[dict, Store]] = {}  # (db, bucket) -> (declaration, store)
        self._dirty: set[Store] = set()  # stores written since the last sync (sync off: group commit)
        self._catalog_dirty = False
        self._group_lock = threading.Lock()  # one group of writes at a time (execute_group)
        self._mutex = threading.RLock()
        self._closed = False
        self._pid = os.getpid()  # the process that opened it: the only one that may use it
        self._forked = False  # True in a child forked after the open (see lifecycle._disown_after_fork)
        self.metrics = Metrics()
        #: The open cursors (hoarddb/cursors.py): the rest of reads asked with batch_size.
        self.cursors = Cursors(self.options.cursor_timeout, self.options.max_cursors, self.metrics,
                               self.options.max_answer_bytes)
        self.sweeper = Sweeper(lifecycle.weak_ttl_stores(self), self.metrics,
                               self.options.ttl_sweep_seconds, self.options.ttl_sweep_budget_seconds)
        # Nothing the engine owns refers back to it (the sweeper's thread holds it weakly,
        # the handlers are functions of the engine): an engine nobody holds any more is
        # freed at once, and its finalizer closes what it had open (see lifecycle.forgotten).
        # Indexes of an older format (or conflicted) are rebuilt in the background, from now on.
        self.builder = Builder(lifecycle.weak_index_builds(self))
        self._parts = lifecycle.Parts(self.path, self.sweeper, self._mutex, self._stores, self.catalog, self._lock,
                                      self.builder)
        self._finalizer = weakref.finalize(self, lifecycle.forgotten, self._parts)
        self._finalizer.atexit = False  # at exit, lifecycle._close_at_exit closes it (quietly)
        lifecycle.OPEN.add(self)
        self.sweeper.start()
        self.builder.start()

    # -- the one entry point -----------------------------------------------------------

    def execute(self, request: dict) -> dict:
        """Run one operation; its answer ``{ok: 1, result, ...}``, or raise its error."""
        if self._closed:
            raise self._closed_error()
        return self._execute(request, operations.check_request(request))

    def _execute(self, request: dict, name: str) -> dict:
        """execute, for a request ``check_request`` has passed (its op is ``name``)."""
        if self._closed:
            raise self._closed_error()
        handler = HANDLERS.get(name)
        if handler is not None:
            if name in CATALOG_CHANGES:
                # Under the mutex, and the cache emptied after the change too: a call that
                # missed the cache meanwhile fills it under the mutex (see call), so no
                # thread keeps the store of a dropped bucket, or an old declaration.
                with self._mutex:
                    if self._closed:
                        raise self._closed_error()
                    self._hot.clear()
                    self._catalog_dirty = True
                    try:
                        answer = handler(self, request)
                    finally:
                        self._hot.clear()
            else:
                answer = handler(self, request)
            return answer if isinstance(answer, dict) and "ok" in answer else {"ok": 1, "result": answer}
        if "field" in request or "key" in request:
            result = self._field_verb(name, request)
            if isinstance(result, Reply):
                return {"ok": 1, "result": result.result, **result.extras}
            return {"ok": 1, "result": result}
        if name not in operations.VERBS:
            known = sorted(set(HANDLERS) | {op.name for op in operations.VERBS.values()})
            raise UnknownVerbError(f"unknown operation {name!r}; operations: {', '.join(known)}")
        return self._verb(operations.VERBS[name], request)

    def _verb(self, op: operations.Operation, request: dict) -> dict:
        db, bucket = request.get("db"), request.get("bucket")
        args = request.get("args") or {}
        if not isinstance(args, dict):
            raise InvalidArgumentError(f"{op.name}: 'args' must be a document of named arguments")
        return self.call(op, db, bucket, operations.bind(op, (), args))

    def _documents_of(self, db: str, bucket: str) -> list:
        """The documents of the hash bucket ``bucket`` of ``db``, for an operation that joins
        (``Operation.joins``: aggregate's $lookup), within the stage memory limit."""
        check_name(bucket, "bucket")
        with self._mutex:
            decl = self.catalog.bucket(db, bucket)
            store = self._store(db, bucket, decl)
        if decl["type"] != "hash":
            raise BadValueError(f"$lookup joins hash buckets; {bucket!r} is a {decl['type']} bucket")
        return store.documents(self.options.stage_memory_bytes)

    def call(self, op: operations.Operation, db: str, bucket: str, args: dict) -> dict:
        """Run a bucket verb whose arguments ``operations.bind`` has checked; its answer.

        ``execute`` comes here after binding a request's ``args``; the in-process client
        (hoarddb.api) binds once and calls this directly, so a get does not pay for a
        request document and a second binding. The bucket's declaration and open store
        are cached until the next catalog change.
        """
        if self._closed:
            raise self._closed_error()
        try:
            hot = self._hot.get((db, bucket))
        except TypeError:  # a name that is no string, and cannot even be looked up: refused below
            hot = None
        if hot is None:  # (not in an `except KeyError`: a refusal here would carry that KeyError along)
            check_name(db, "database")
            check_stored_name(bucket)  # (a cluster node's hidden partition too: hoarddb/cluster/queues.py)
            with self._mutex:  # not between a catalog change and its emptying of the cache
                decl = self.catalog.bucket(db, bucket)
                hot = self._hot[(db, bucket)] = (decl, self._store(db, bucket, decl))
        decl, store = hot
        if decl["type"] not in op.types:
            raise VerbNotSupportedError(
                f"{decl['type']} bucket {bucket!r} has no verb {op.name!r}; "
                f"a {decl['type']} bucket's verbs: {', '.join(operations.verbs_for(decl['type']))}"
            )
        if op.cursor and args.get("batch_size") is not None:
            return self._open_cursor(op, db, bucket, store, args)
        try:
            if op.single is not None:
                result = getattr(store, op.name)(args[op.single])
            elif op.simple:
                result = getattr(store, op.name)(*[args[n] for n in op.param_names])
            else:
                positional = [args.get(p.name) for p in op.params]
                while positional and positional[-1] is None and not op.params[len(positional) - 1].required:
                    positional.pop()
                keywords = {p.name: args[p.name] for p in op.options if args.get(p.name) is not None}
                if op.joins:
                    keywords["buckets"] = functools.partial(self._documents_of, db)
                result = getattr(store, op.name)(*positional, **keywords)
        except RecursionError:
            raise BadValueError(TOO_DEEP) from None
        except Exception as exc:
            self._check_still_open(db, bucket, store, exc)
            raise
        if op.write:
            if not self.options.sync and store not in self._dirty:  # (in it: a sync that takes it covers this write)
                self._mark_dirty(store)
            if op.name == "claim" and (decl.get("options") or {}).get("dead_letter"):
                try:
                    self._move_dead_letters(db, bucket, decl, store)  # claim/ack's one hook: see there
                except Exception:  # the claim is made and durable: its caller must still get its claimIds
                    log.exception("%s.%s: moving elements past max_deliveries failed; they stay held", db, bucket)
            elif op.name == "load" and hasattr(store, "declarations") and store.declarations() != decl.get("indexes"):
                self.catalog.replace_bucket(db, dict(decl, indexes=store.declarations()))  # a load conflicted an index
                self._hot.clear()
                self._catalog_dirty = True
        if type(result) is Reply:
            return {"ok": 1, "result": result.result, **result.extras}
        return {"ok": 1, "result": result}

    def _open_cursor(self, op: operations.Operation, db: str, bucket: str, store: Store, args: dict) -> dict:
        """A read asked with ``batch_size``: its first batch, and a cursor when more remain
        (hoarddb/cursors.py). The stores that can read as they go (``STREAMED``) are asked
        for an iterator; the others' answer (a list's, at most max_peek) is handed out in batches."""
        size = check_batch_size(args["batch_size"])
        positional = [args.get(p.name) for p in op.params]
        while positional and positional[-1] is None and not op.params[len(positional) - 1].required:
            positional.pop()
        keywords = {p.name: args[p.name] for p in op.options if args.get(p.name) is not None and p.name != "batch_size"}
        streamed = op.cursor == "stream" and not keywords.get("explain")
        if streamed:
            keywords["stream"] = True
        if op.joins:
            keywords["buckets"] = functools.partial(self._documents_of, db)

        def failed(exc: Exception) -> None:
            if isinstance(exc, RecursionError):
                raise BadValueError(TOO_DEEP) from None
            self._check_still_open(db, bucket, store, exc)

        try:
            result = getattr(store, op.name)(*positional, **keywords)
        except Exception as exc:
            failed(exc)
            raise
        extras = {}
        if type(result) is Reply:
            result, extras = result.result, result.extras
        source = result if streamed else iter(result if isinstance(result, list) else [])
        answer = self.cursors.open(f"{op.name} on {db}.{bucket}", source, size, failed)
        return {"ok": 1, **answer, **extras}

    def _check_still_open(self, db: str, bucket: str, store: Store, exc: Exception) -> None:
        """After ``store`` raised ``exc``: if another thread closed the database or dropped the
        bucket meanwhile (so the store was closed under the call), raise what the call
        would meet now, CLOSED or BUCKET_NOT_FOUND, instead of the closed store's error.
        Damaged bytes on disk (``stores.base.DAMAGE``: LMDB's MDB_CORRUPTED, a stored
        document that does not decode) are CORRUPT_DATA naming the bucket, not a traceback."""
        if isinstance(exc, DAMAGE):
            raise store.damaged(exc) from exc
        if self._stores.get((db, bucket)) is store or (isinstance(exc, HoardError) and not isinstance(
                exc, (ClosedError, StorageError))):
            return
        if self._closed:
            raise self._closed_error(during=True) from exc
        self.catalog.bucket(db, bucket)  # dropped: BucketNotFoundError, naming the buckets there are
        raise BucketNotFoundError(f"bucket {bucket!r} of database {db!r} was dropped while this operation ran "
                                  "(it has been created again since); nothing of it was kept") from exc

    def _move_dead_letters(self, db: str, bucket: str, decl: dict, store: Store) -> None:
        """claim's hook: move what a claim found past max_deliveries (stores.claims.move_dead_letters)."""
        move_dead_letters(store, db, bucket, decl["options"]["dead_letter"], lambda name: self.catalog.bucket(db, name),
                          lambda name, d: self._store(db, name, d), None if self.options.sync else self._mark_dirty)

    def _field_verb(self, name: str, request: dict) -> Any:
        """A verb on a document's store field: ``{op, db, bucket, key, field, path?, args}`` (``path``:
        the ``{key, field}`` steps down to a deeper store, checked by ``check_request``). The bucket's
        store fields (``stores/fields.py``) refuse a field it has not and a verb the field's type
        has not (with advice); the table binds the arguments."""
        db, bucket = db_of(request), bucket_of(request)
        decl = self.catalog.bucket(db, bucket)
        field = request.get("field")
        if "key" not in request or not isinstance(field, str):
            raise InvalidArgumentError("a store-field operation names the document's key and the field: "
                                       "{op, db, bucket, key, field, args}")
        store = self._store(db, bucket, decl)
        fields = getattr(store, "fields", None)
        if fields is None:  # a queue, heap or blob bucket: its elements own no stores
            raise no_store_field(bucket, field, {})
        try:
            path = [(step["key"], step["field"]) for step in request.get("path") or ()]
            target = fields.store(request["key"], field, name, path)
            op = operations.FIELD_VERBS[name]
            args = request.get("args") or {}
            if not isinstance(args, dict):
                raise InvalidArgumentError(f"{op.name}: 'args' must be a document of named arguments")
            args = operations.bind(op, (), args)
            positional = [args.get(p.name) for p in op.params]
            while positional and positional[-1] is None and not op.params[len(positional) - 1].required:
                positional.pop()
            keywords = {p.name: args[p.name] for p in op.options if args.get(p.name) is not None}
            result = getattr(target, op.name)(*positional, **keywords)
        except RecursionError:
            raise BadValueError(TOO_DEEP) from None
        except Exception as exc:
            self._check_still_open(db, bucket, store, exc)
            raise
        if op.write and not self.options.sync:
            self._mark_dirty(store)
        return result

    # -- stores --------------------------------------------------------------------

    def _store(self, db: str, bucket: str, decl: dict | None = None) -> Store:
        store = self._stores.get((db, bucket))
        if store is not None:
            return store
        with self._mutex:
            store = self._stores.get((db, bucket))
            if store is None:
                if self._closed:
                    raise self._closed_error()
                # The declaration as it is now, under the mutex that drops take: a caller that
                # read it before a drop must not reopen (and re-create the folder of) the
                # dropped bucket: it hears BUCKET_NOT_FOUND.
                decl = self.catalog.bucket(db, bucket)
                directory = self.path / db / bucket
                if not directory.is_dir() or not any(directory.iterdir()):
                    # A create makes the folder and its files durably before the declaration
                    # (catalog_operations.create_bucket), so no crash leaves a declared bucket
                    # without them: they were deleted. Making them anew would answer as an empty bucket.
                    raise CorruptDataError(
                        f"{directory}: the folder of bucket {bucket!r} of database {db!r} is missing or empty, "
                        "though the catalog declares the bucket: its files were deleted or moved. Nothing was "
                        "changed. Restore the bucket from a backup or a dump (hoarddb restore), or drop it and "
                        "create it again")
                store = store_class(decl["type"])(directory, decl, self.options)
                rebuilt = store.open_indexes() if hasattr(store, "open_indexes") else None
                if rebuilt is not None:
                    self.catalog.replace_bucket(db, dict(decl, indexes=rebuilt))
                    self._catalog_dirty = True
                self._stores[(db, bucket)] = store
            return store

    def _close_store(self, db: str, bucket: str) -> None:
        store = self._stores.pop((db, bucket), None)
        if store is not None:
            self._dirty.discard(store)  # dropped: nothing of it to make durable
            store.close()

    # -- groups of writes ------------------------------------------------------------

    def execute_group(self, requests: list[dict], checked: bool = False) -> list:
        """Run writes that arrived together, in order: each one's answer, or the error it raised.

        Writes to hash, btree and heap buckets (LMDB) share one transaction per bucket, each
        in a child transaction of it (so a refusal undoes only itself), committed once at
        the end: one commit and one data fsync per bucket for the whole group, instead of
        one per write. Other writes run as ``execute`` runs them. One group at a time.

        Other connections see the writes in the order they came: the open transactions are
        committed before a write that is visible at once (a queue's, a blob's), and before
        one that goes back to a bucket after another bucket's was begun.

        A group of one write runs as ``execute`` runs it: its own transaction is all the
        sharing there is, and the outer one would cost a second commit (a lone client's
        every write comes this way).

        A request that fails, for whatever reason (a field of the wrong type, a refusal,
        a bug), fails alone: the others are run and answered as they would have been had
        it never been sent. Each request's shape is checked (``operations.check_request``)
        before any of them runs, so a malformed one never reaches a lookup; ``checked``
        says the caller did that already (a server's dispatch does, for every request).
        """
        if not checked:
            refused: list = []
            for request in requests:
                try:
                    operations.check_request(request)
                    refused.append(None)
                except HoardError as exc:
                    refused.append(exc)
            if any(refused):
                good = [r for r, e in zip(requests, refused) if e is None]
                answers = iter(self._execute_checked(good) if good else ())
                return [next(answers) if e is None else e for e in refused]
        return self._execute_checked(requests)

    def _execute_checked(self, requests: list[dict]) -> list:
        """execute_group's work, for requests check_request has passed."""
        if len(requests) == 1:
            with self._group_lock:
                try:
                    return [self._execute(requests[0], requests[0]["op"])]
                except HoardError as exc:
                    return [exc]
                except Exception as exc:  # a bug: it alone fails
                    return [self._bug_in_group(requests[0], exc)]
        out: list = []
        grouped: list[Store] = []  # stores whose group is open, in the order they were begun
        failure: HoardError | None = None
        with self._group_lock:
            try:
                i = 0
                while i < len(requests):
                    request = requests[i]
                    try:
                        store = self._group_store(request)
                    except Exception:  # refused, or a bug: execute says so as it would alone
                        store = None
                    # Others see a group's writes when it ends, store by store in the order
                    # begun, and a queue's or a blob's at once: end the open groups before a
                    # write that would otherwise become visible ahead of earlier ones (a job
                    # pushed after the order it names, a put after a write to another bucket).
                    if grouped and (store is None or (store in grouped and store is not grouped[-1])):
                        failure = self._end_groups(grouped) or failure
                    if store is None:
                        run = self._queue_run(requests, i)
                        if run:  # pushes or pops of one queue in a row: one append, or one take
                            out += run
                            i += len(run)
                            continue
                    i += 1
                    try:
                        if store is not None and store not in grouped:
                            store.begin_group()
                            grouped.append(store)
                        out.append(self._execute(request, request["op"]))
                    except HoardError as exc:
                        out.append(exc)
                    except Exception as exc:  # a bug in one write: it alone fails (its child transaction is undone)
                        out.append(self._bug_in_group(request, exc))
            finally:
                failure = self._end_groups(grouped) or failure
                if failure is not None:  # the group's writes are not known to be on disk
                    out = [failure if not isinstance(a, HoardError) else a for a in out]
        return out

    @staticmethod
    def _bug_in_group(request: dict, exc: Exception) -> InternalError:
        log.error("a write of a group failed: %.40s", request.get("op"), exc_info=exc)
        return InternalError(f"{type(exc).__name__}: {exc} (please report this)")

    @staticmethod
    def _end_groups(grouped: list) -> HoardError | None:
        """Commit the open groups in the order they were begun and release their stores;
        the first failure, if any (the list is emptied either way)."""
        failure = None
        for store in grouped:
            try:
                store.end_group()  # (a group not kept: the store reloads what it counted)
            except HoardError as exc:
                failure = failure or exc
        grouped.clear()
        return failure

    def _queue_run(self, requests: list, start: int) -> list:
        """The answers of the plain pushes, or plain pops, to one fifo or lifo bucket that
        begin at ``start`` (two or more in a row), run together: the same answers as one
        by one, each push refused alone, with one segment append or one state write for
        them all. [] when there is no such run."""
        first = requests[start]
        op = first.get("op")
        if op not in TOGETHER or start + 1 >= len(requests) or "field" in first or "key" in first or self._closed:
            return []
        # what each request of the run gives: its one document (a push), or nothing (a pop)
        takes = operations.VERBS[op].single
        db, bucket = first.get("db"), first.get("bucket")
        end = start
        while end < len(requests):
            r = requests[end]
            args = r.get("args")
            if (r.get("op") != op or r.get("db") != db or r.get("bucket") != bucket or "field" in r or "key" in r
                    or type(args) is not dict
                    or (takes is not None and (len(args) != 1 or type(args.get(takes)) is not dict))
                    or (takes is None and args and any(v is not None for v in args.values()))):
                break
            end += 1
        if end - start < 2:
            return []
        try:
            hot = self._hot.get((db, bucket))
            decl, store = hot if hot is not None else (self.catalog.bucket(db, bucket), None)
            each = getattr(store_class(decl["type"]), op + "_each", None)  # push_each, pop_each
            if each is None:
                return []
            if store is None:
                store = self._store(db, bucket, decl)
        except Exception:
            return []  # let each one be refused as it would be alone
        try:
            if takes is not None:
                outcomes = each(store, [r["args"][takes] for r in requests[start:end]])
                answers = [e if e is not None else {"ok": 1, "result": None} for e in outcomes]
            else:
                answers = [{"ok": 1, "result": doc} for doc in each(store, end - start)]
        except HoardError as exc:  # the disk refused the append (nothing of it stays): each one hears why
            return [exc] * (end - start)
        except Exception as exc:  # a bug: the run's own writes hear of it, no other of the group
            return [self._bug_in_group(first, exc)] * (end - start)
        if not self.options.sync:
            self._mark_dirty(store)
        return answers

    def _group_store(self, request: dict):
        """The LMDB store a write request goes to, if it is one a group can share."""
        if not isinstance(request, dict) or request.get("op") not in operations.VERBS \
                and request.get("op") not in operations.FIELD_VERBS:
            return None
        try:
            decl = self.catalog.bucket(request.get("db"), request.get("bucket"))
        except HoardError:
            return None
        if not store_class(decl["type"]).groups:
            return None
        return self._store(decl["db"], decl["name"], decl)

    def is_quick_read(self, request: dict) -> bool:
        """Whether a read is known to touch few keys, none of them a file: a point read, a
        peek or list of at most QUICK_READ elements (a bucket's or a store field's), or a
        search whose index holds at most QUICK_READ entries for its values.

        The server runs such reads on its event loop (see is_point_read); the rest may
        scan, and go to a thread.
        """
        if self.is_point_read(request):
            return True
        op = request.get("op")
        if op not in QUICK_READS:
            return False
        entry = operations.VERBS[op]
        args = request.get("args") or {}
        if not isinstance(args, dict):
            return False
        try:
            decl = self.catalog.bucket(request.get("db"), request.get("bucket"))
            if "field" in request:
                kind = store_type_at(decl, request["field"], request.get("path"))
                if kind is None or kind == "blob" or entry.cost == operations.INDEXED:
                    return False
            else:
                kind = decl["type"]
                if kind == "blob":
                    return False
            if entry.cost == operations.INDEXED:
                store = self._stores.get((decl["db"], decl["name"]))
                return (kind == "hash" and store is not None and not args.get("explain")
                        and store.matches_at_most(args.get("filter"), QUICK_READ))
            if entry.cost == operations.POINT:
                return True
            limit = args.get("limit")
            if limit is None:  # what leaving it out means: peek's one element (a list's: not known here)
                param = entry.param("limit")
                limit = param.default if param is not None else None
            return type(limit) is int and 0 < limit <= QUICK_READ
        except (HoardError, KeyError, TypeError):
            return False

    def is_point_read(self, request: dict) -> bool:
        """Whether a request reads at most one key, never a file or a scan: a get or info
        (not of a blob), length, first, last, or a search a unique index answers whole.

        The server runs such reads on its event loop, where a thread hop would cost more
        than the read.
        """
        op = request.get("op")
        if "field" in request or op not in POINT_READS:
            return False
        try:
            hot = self._hot.get((request.get("db"), request.get("bucket")))
            decl = hot[0] if hot is not None else self.catalog.bucket(request.get("db"), request.get("bucket"))
            if operations.VERBS[op].cost != operations.INDEXED:
                return decl["type"] != "blob"
            store = self._stores.get((request["db"], request["bucket"]))
            args = request.get("args") or {}
            if decl["type"] != "hash" or store is None or not isinstance(args, dict) \
                    or not isinstance(args.get("filter"), dict) or args.get("explain"):
                return False
            shape = store.shapes.of(args["filter"])  # a flat equality filter: planned once per shape
            if shape is not None:
                return shape.whole
            p = plan(args["filter"], store.indexes.indexes)
        except (HoardError, TypeError):
            return False  # refused: let the ordinary path say so
        return p.index is not None and p.index.unique and p.covered == len(p.index.fields)

    def _mark_dirty(self, store: Store) -> None:
        """Note a store written with sync off, after the write: a sync that begins after the
        writer hears back (group commit waits for one) then finds it in the set."""
        with self._mutex:
            self._dirty.add(store)

    #: ``with engine.commits_deferred():`` a write run on this thread inside the block
    #: is logged and made durable by :meth:`sync` as usual, but LMDB commits it when the
    #: block ends: a server answers a lone client's write first (storage/kv.py says when
    #: that is safe: nobody else may be served meanwhile).
    commits_deferred = staticmethod(commits_deferred)

    def sync(self) -> None:
        """Make every write acknowledged so far durable: one fsync per store written, but the
        segment logs of the fifo and lifo buckets written, which share their fsyncs
        (hoarddb.storage.segment_flush: one device flush for their overwrites).

        With ``Options(sync=False)`` writes return before they are durable; a server
        calls this once for a group of concurrent writes before answering any of them
        (group commit). With ``sync`` on it costs nothing: each write was durable already.
        """
        if self.options.sync:
            return
        with self._mutex:
            dirty, self._dirty = self._dirty, set()
            catalog, self._catalog_dirty = self._catalog_dirty, False
        if catalog:  # created, altered or dropped buckets
            self.catalog.kv.sync()
        logs: list = []
        for store in dirty:
            store.sync(logs)
        segment_flush.flush(logs)  # the queues' segment logs, after every store's other files: together

    # -- TTL -------------------------------------------------------------------------

    def _ttl_stores(self):
        """The open stores of every hash bucket that has a TTL index."""
        for decl in self.catalog.all_buckets():
            if self._closed:
                return
            if any(ix.get("expire_after_seconds") is not None for ix in decl.get("indexes") or []):
                try:
                    store = self._store(decl["db"], decl["name"], decl)
                except (BucketNotFoundError, DatabaseNotFoundError, ClosedError):
                    continue  # dropped (or closed) since the list was read
                yield store

    def _index_builds(self):
        """``(store, done)`` for each hash bucket with an index to rebuild (see hoarddb.indexes.builder)."""
        for decl in self.catalog.all_buckets():
            if self._closed:
                return
            if any(Index(ix).state in ("building", "conflicted") for ix in decl.get("indexes") or []):
                try:
                    store = self._store(decl["db"], decl["name"])
                except (BucketNotFoundError, DatabaseNotFoundError, ClosedError):
                    continue  # dropped (or closed) since the list was read
                yield store, functools.partial(self._indexes_built, decl["db"], decl["name"], store)

    def _indexes_built(self, db: str, bucket: str, store: Store, indexes: list[dict]) -> None:
        """Persist a bucket's rebuilt index declarations (unless it was dropped meanwhile)."""
        with self._mutex:
            if self._closed or self._stores.get((db, bucket)) is not store:
                return
            self.catalog.replace_bucket(db, dict(self.catalog.bucket(db, bucket), indexes=indexes))
            self._catalog_dirty = True
            self._hot.pop((db, bucket), None)

    # -- life cycle --------------------------------------------------------------------

    def close(self) -> None:
        """Close every store, the catalog and the lock; idempotent.

        A call of another thread that is running meanwhile either completes or raises
        ClosedError; calls made after raise ClosedError. In a process forked from the one
        that opened the database, close touches nothing (the parent's files and locks are
        the parent's): it only refuses later calls.
        """
        if self._forked:
            self._closed = True
            return
        with self._mutex:
            if self._closed:
                return
            self._closed = True
        self._finalizer.detach()  # closed on purpose: no warning, nothing to do when it is freed
        lifecycle.OPEN.discard(self)
        self.cursors.close_all()
        self._parts.close()

    def _closed_error(self, during: bool = False) -> ClosedError:
        """What a call on a closed engine hears: closed (``during`` the call), or used in a forked child."""
        if self._forked:
            return ClosedError(
                f"this database was opened by process {self._pid}, and this process is a child forked from it "
                "after the open: a forked process cannot use its parent's open database (LMDB forbids it, and it "
                "would corrupt the parent's locks). Open a database in the process that uses it: fork before "
                "opening it, or start workers with multiprocessing's 'spawn' method; or serve it (hoarddb server) "
                "and connect from every process")
        if during:
            return ClosedError("the database was closed while this operation ran; "
                               "open it again with hoarddb.open(path)")
        return ClosedError("the database is closed; open it again with hoarddb.open(path)")


#: The operations the engine runs itself (the table's ``runs=ENGINE``: catalog, metrics,
#: TTL, check, backup), each the function of ``(engine, request)`` of the same name in
#: :mod:`hoarddb.catalog_operations`: the engine refers to them without their referring back to it.
def _more(engine: Engine, request: dict) -> dict:
    """The next batch of one of the engine's cursors (hoarddb/cursors.py)."""
    return {"ok": 1, **engine.cursors.more(request.get("cursor"), request.get("batch_size"))}


def _close_cursor(engine: Engine, request: dict) -> dict:
    return {"ok": 1, "result": {"closed": engine.cursors.close(request.get("cursor"))}}


#: The cursors' own operations, which the engine answers from its open cursors.
CURSOR_HANDLERS = {operations.MORE.name: _more, operations.CLOSE_CURSOR.name: _close_cursor}
HANDLERS: dict[str, Callable[[Engine, dict], Any]] = {
    name: CURSOR_HANDLERS.get(name) or getattr(catalog_operations, name)
    for name in sorted(operations.names(runs=operations.ENGINE))}
