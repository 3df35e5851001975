"""A KV environment's group transactions: many writes, each in a child transaction of one, one commit.

:class:`KVGroups` is a mixin of :class:`hoarddb.storage.kv.KV`: a group holds the KV's
commit lock and outer transaction from :meth:`~KVGroups.begin_group` to
:meth:`~KVGroups.end_group`, and ``KV.write`` on the group's thread runs inside it, so
these are the KV's methods, kept here so that a reader of a lone write need not hold them.

A server runs the writes that arrive together as one group: each in a child transaction
of one outer transaction, committed once at the end and flushed by sync(). Only one
thread writes to the environment meanwhile (the commit lock is held by the group).
"""

from __future__ import annotations

import logging
import threading

import lmdb

from ..errors import StorageError
from .oserrors import DiskFullError, storage_error
from .wal import PUT, Recording

log = logging.getLogger("hoarddb.kv")

#: A group's write is counted as taking this many pages of the map, plus its bytes twice
#: (see KV._write_in_group): generous, so that a group is committed before the map fills.
GROUP_WRITE_PAGES = 8


class KVGroups:
    """KVGroups runs the writes of a group in child transactions of one, committed once."""

    def begin_group(self) -> None:
        """Open the outer transaction of a group of writes on this thread (a group is
        made durable right after it ends: a server syncs each one)."""
        self._commit_held_here()
        self._commit_lock.acquire()
        try:
            if self._broken is not None:
                raise self._broken
            self._catch_up()
            self._note_used()
            try:
                self._outer = self.env.begin(write=True)
            except lmdb.Error as exc:
                raise storage_error(f"writing {self.path}", exc, path=self.path) from None
            self._outer_ops = []
            self._outer_thread = threading.get_ident()
            self._group_error = None
            self._budget_group()
        except BaseException:
            self._outer, self._outer_thread = None, None
            self._commit_lock.release()
            raise

    def in_group(self) -> bool:
        """Whether this thread has a group open (its writes are children of the group's transaction)."""
        return self._outer_thread == threading.get_ident()

    def end_group(self) -> None:
        """Commit the group's writes: one commit (and one log record) for all of them.

        Raises StorageError if they could not all be committed (then none of the writes
        answered so far in the group is known to be there: the caller fails them all).
        The commit lock is released whatever happens.
        """
        outer, self._outer, self._outer_thread = self._outer, None, None
        ops, self._outer_ops = self._outer_ops, []
        error, self._group_error = self._group_error, None
        try:
            if error is not None:
                if outer is not None:
                    outer.abort()
                raise error
            if outer is not None:
                try:
                    self._commit(outer, ops, True)
                except DiskFullError:
                    self._make_room()  # so that the next group may reuse the pages freed so far
                    raise
                except lmdb.MapFullError as exc:  # the next group grows the map before it begins
                    raise StorageError(f"writing {self.path} failed: its map filled up ({exc}); none of the "
                                       "writes of the group was kept; retry them") from None
        finally:
            self._commit_lock.release()

    def _budget_group(self) -> None:
        """How much of the map the group may take before it is committed and the map grown:
        half of what is free, so that its commit always finds room for its own pages."""
        self._group_room = (self._map_size - self._used()) // 2
        self._group_spent = 0

    def _write_in_group(self, fn):
        if self._group_error is not None:
            raise self._group_error
        if self._group_spent > self._group_room:
            self._regroup()
        while True:
            child = self.env.begin(write=True, parent=self._outer)
            recording = Recording(child)
            try:
                result = fn(recording)
                child.commit()
                ops = recording.ops
                self._outer_ops += ops
                # What the write may have taken of the map, generously: the pages a tree
                # copies on its way to a key (a few), and its bytes twice over.
                spent = GROUP_WRITE_PAGES * self._psize
                for op in ops:
                    spent += 2 * (len(op[1]) + len(op[2])) if op[0] == PUT else 0
                self._group_spent += spent
                return result
            except lmdb.MapFullError:
                child.abort()
                self._regroup()
            except BaseException:
                child.abort()
                raise

    def _regroup(self) -> None:
        """A write of a group found the map full: commit what the group wrote so far, grow
        the map, and go on in a new outer transaction (the commit lock is held throughout).

        Growing needs no transaction open, hence the commit. If that commit fails, the
        group's earlier writes are gone: the group is failed (end_group raises), and so is
        every later write of it.
        """
        outer, self._outer = self._outer, None
        ops, self._outer_ops = self._outer_ops, []
        try:
            self._commit(outer, ops, True)
            self._grow()
            self._outer = self.env.begin(write=True)
            self._budget_group()
        except (lmdb.Error, StorageError) as exc:
            if isinstance(exc, StorageError):
                self._group_error = StorageError(f"{exc.message} (the writes of its group were not kept)")
            else:
                self._group_error = storage_error(f"writing {self.path}", exc,
                                                  "the writes of its group were not kept", self.path)
            try:
                self._grow()  # no transaction is open now: the next group finds room
            except (lmdb.Error, StorageError) as grow_error:  # the group's own error is what it hears
                log.warning("%s: could not grow the map after a failed group: %s", self.path, grow_error)
            raise self._group_error from None
