"""The engine's life cycle: what closes an open engine when it is forgotten, at exit, and after a fork.

An engine is closed by close(); one dropped without it is closed by its finalizer when
it is freed (with a ResourceWarning, as Python's files are); one still open when the
interpreter exits is closed by _close_at_exit before the interpreter tears down; and in
a child forked after the open, every engine is disowned: refused, and never closed there.
Both hooks are registered when this module is imported (the engine imports it).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import warnings
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .errors import DataDirLockedError
from .storage.lock import held_here

if TYPE_CHECKING:
    from .catalog import Catalog
    from .engine import Engine
    from .indexes.ttl import Sweeper
    from .storage.lock import DirectoryLock

log = logging.getLogger("hoarddb.engine")

#: Every engine open in this process (held weakly).
OPEN: "weakref.WeakSet[Engine]" = weakref.WeakSet()
#: Data directories whose forgotten engine a thread of their own is closing (see forgotten).
_CLOSING: dict[str, threading.Thread] = {}
#: In a forked child: the data directories its parent had open at the fork -> the parent's pid.
_INHERITED: dict[str, int] = {}


class Parts:
    """Parts is what an open engine must close, kept apart from the Engine so that the
    engine's finalizer can close it once the Engine object is gone."""

    def __init__(self, path: Path, sweeper: Sweeper, mutex, stores: dict, catalog: Catalog, lock: DirectoryLock,
                 builder=None):
        self.path = path
        self.sweeper = sweeper
        self.builder = builder
        self.mutex = mutex
        self.stores = stores
        self.catalog = catalog
        self.lock = lock

    def close(self) -> None:
        """Stop the sweeper, close every store (so flushed) and the catalog, release the lock.

        Every store is closed even when one of them cannot be, and the lock is released
        whatever fails: the first failure is raised at the end.
        """
        self.sweeper.stop()
        if self.builder is not None:  # stops between two batches; the next open rebuilds what it left
            self.builder.stop()
        with self.mutex:
            failure: BaseException | None = None
            try:
                for key in list(self.stores):
                    store = self.stores.pop(key, None)
                    if store is None:
                        continue
                    try:
                        store.close()
                    except Exception as exc:
                        log.error("closing bucket %s.%s failed: %s", key[0], key[1], exc)
                        failure = failure or exc
                try:
                    self.catalog.close()
                except Exception as exc:
                    failure = failure or exc
            finally:
                self.lock.release()
            if failure is not None:
                raise failure

    def close_logged(self) -> None:
        """close(), logging a failure instead of raising it (nobody is there to hear it)."""
        try:
            self.close()
        except Exception as exc:
            log.error("closing the database at %s failed: %s; the next open recovers every acknowledged write",
                      self.path, exc)


def forgotten(parts: Parts) -> None:
    """The finalizer of an engine freed without close(): warn, and close what it had open.

    It runs where the last reference went, or where the garbage collector found the
    engine: on any thread, at any allocation. Closing takes the stores' locks and waits
    for the sweeper and for flushes on the checkpoint thread, so on one of hoardDB's own
    threads (the sweeper ending a pass, the checkpoint thread collecting garbage) it
    hands the close to a thread of its own, which the next open of the directory waits
    for; elsewhere no lock of this engine can be held (nothing holds the engine), and it
    closes at once, so that the next open of the directory just works.
    """
    warnings.warn(f"hoarddb: the database at {parts.path} was never closed; it is closed now. Call close() on "
                  "the client, or open it in a with block", ResourceWarning, stacklevel=3)
    if threading.current_thread().name.startswith("hoarddb-"):
        thread = threading.Thread(target=parts.close_logged, name="hoarddb-close")
        _CLOSING[_directory_key(parts.path)] = thread  # before it starts: an open may come at once
        try:
            thread.start()
            return
        except RuntimeError:  # (the interpreter is shutting down: no new threads)
            _CLOSING.pop(_directory_key(parts.path), None)
    parts.close_logged()


def _directory_key(path: Path) -> str:
    return os.path.realpath(path)


def wait_for_forgotten_close(path: Path, timeout: float = 60.0) -> None:
    """Before opening ``path``: let a forgotten engine of it that another thread is closing finish.

    The weak references to a freed engine are cleared before its finalizer runs, so an open
    may come between the two: the directory is then held in this process by no engine
    alive, and _CLOSING does not name it yet. That is waited out too (it lasts as long as
    the finalizer's warning; seen under load as an open refused "open already").
    """
    key = _directory_key(path)
    deadline = time.monotonic() + timeout
    while key not in _CLOSING and held_here(path) and time.monotonic() < deadline \
            and not any(_directory_key(engine.path) == key for engine in list(OPEN)):
        time.sleep(0.001)
    thread = _CLOSING.get(key)
    if thread is not None:
        if thread.ident is not None:  # (started)
            thread.join(timeout)
        else:  # about to start: give it a moment
            deadline = time.monotonic() + timeout
            while thread.ident is None and time.monotonic() < deadline:
                time.sleep(0.001)
            thread.join(max(0.0, deadline - time.monotonic()))
        if not thread.is_alive():
            _CLOSING.pop(_directory_key(path), None)


def refuse_inherited(path: Path) -> None:
    """In a forked child, refuse a directory its parent had open at the fork: py-lmdb counts
    the environments the child inherited as open in the child for as long as it lives (it
    may neither use nor close them), and refuses to open them again."""
    parent = _INHERITED.get(_directory_key(path))
    if parent is not None:
        raise DataDirLockedError(
            f"data directory {path} was open in process {parent} when it forked this process, and a forked "
            "process can never open a database its parent had open (LMDB's files stay the parent's). Open it in "
            "a process that did not inherit it: fork before opening it, or start workers with multiprocessing's "
            "'spawn' method; or serve it (hoarddb server) and connect", pid=str(parent))


def weak_index_builds(engine: Engine) -> Callable[[], Any]:
    """The index builder's view of the engine's buckets to rebuild, holding the engine weakly."""
    ref = weakref.ref(engine)

    def index_builds():
        alive = ref()
        return None if alive is None else alive._index_builds()

    return index_builds


def weak_ttl_stores(engine: Engine) -> Callable[[], Any]:
    """The sweeper's view of the engine's TTL stores, holding the engine weakly: None once it is gone."""
    ref = weakref.ref(engine)

    def ttl_stores():
        alive = ref()
        return None if alive is None else alive._ttl_stores()

    return ttl_stores


@atexit.register
def _close_at_exit() -> None:
    """At interpreter exit, close every engine still open, so the next open replays nothing.

    (Registered when this module is imported; atexit runs after the interpreter has
    joined its non-daemon threads and before it tears modules down.)
    """
    for engine in list(OPEN):
        if engine._closed or engine._forked:
            continue
        try:
            engine.close()
        except Exception as exc:
            log.error("closing the database at %s at exit failed: %s", engine.path, exc)
    for thread in list(_CLOSING.values()):
        thread.join()


def _disown_after_fork() -> None:
    """In a child just forked: refuse every engine the parent had open, and never close one.

    LMDB forbids using an environment in a process forked from the one that opened it:
    its reader slots and locks are the parent's, and a child that read through them, or
    closed them (even by exiting), would release the parent's pinned snapshots under it.
    So the child's copy is left as it is (py-lmdb frees its objects without touching
    LMDB in a child), and the child's copy of the directory lock's descriptor is closed:
    that does not unlock it, and lets the parent's close unlock it.
    """
    for engine in list(OPEN):
        engine._forked = True
        engine._closed = True
        engine._finalizer.detach()
        engine._lock.forget()
        _INHERITED[_directory_key(engine.path)] = engine._pid
    OPEN.clear()
    _CLOSING.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_disown_after_fork)
