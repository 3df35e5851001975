"""Every knob of an embedded database, with its default and what it risks, in one place.

Add an option here with a sentence on its trade-off; ``hoarddb.open(path, **options)``
accepts exactly these names and refuses any other, listing these.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields

from .errors import BadValueError, UnknownOptionError

MiB = 1024 * 1024
#: The smallest segment file a fifo or lifo accepts (a page): the database option and a bucket's alike.
MIN_SEGMENT_SIZE = 4096


@dataclass(frozen=True)
class Options:
    #: fsync every acknowledged write before returning (the LMDB bucket's log record, the
    #: segment and blob files). False is faster and can lose the last writes in a power
    #: cut or kernel crash, never corrupting anything (LMDB buckets write their log
    #: records unflushed and come back as of some earlier write; queues and blobs skip
    #: their fsyncs); a killed process still loses nothing the kernel was handed.
    #: Engine.sync() makes it all durable.
    sync: bool = True
    #: Size of one fifo/lifo segment file; a bucket may override it with ``segment_size``.
    segment_size: int = 64 * MiB
    #: Initial LMDB map size per bucket; it grows by doubling when full, so this is only
    #: the address space reserved up front, not disk used.
    map_size: int = 256 * MiB
    #: The most elements one peek or list returns.
    max_peek: int = 1000
    #: The most elements one pop({limit}) removes in one write.
    max_pop: int = 100
    #: Store fields (L2 sub-buckets): past this many elements in one document's store a
    #: warning is logged, once per store.
    l2_soft_limit: int = 10_000
    #: A write that would take one document's store past this many elements is refused.
    l2_hard_limit: int = 100_000
    #: The most store-field elements one document delete (or TTL expiry) removes with the
    #: document; a document whose stores hold more is refused (the TTL sweeper skips it).
    max_cascade_delete: int = 10_000
    #: The deepest store a bucket may declare: 1 the bucket, 2 its documents' store fields, 3
    #: the store fields of their elements (``Friends hashStore { Messages fifoStore }``).
    #: Deeper trees are slower to delete and harder to reason about; past it a declaration
    #: is refused with the advice to make the store an L1 bucket.
    max_nesting_depth: int = 3
    #: Seconds between two TTL sweeps (0 turns the sweeper off). Default: the environment's
    #: HOARDDB_TTL_SWEEP_SECONDS, else 60. An expired document stays readable until a sweep.
    ttl_sweep_seconds: float = field(default_factory=lambda: _env_seconds("HOARDDB_TTL_SWEEP_SECONDS", 60))
    #: The most seconds one sweep may spend; what is left waits for the next sweep.
    #: Default: HOARDDB_TTL_SWEEP_BUDGET_SECONDS, else 5.
    ttl_sweep_budget_seconds: float = field(
        default_factory=lambda: _env_seconds("HOARDDB_TTL_SWEEP_BUDGET_SECONDS", 5))
    #: The most bytes of stored documents one find, search or range gathers before it is
    #: refused with DOCUMENT_TOO_LARGE (None: no limit). A server sets its message limit
    #: (16 MiB): a read whose answer could never be sent stops as soon as it knows,
    #: instead of decoding every match into memory first.
    max_answer_bytes: int | None = None
    #: The most bytes one ``$group`` or ``$sort`` (an aggregate's stage, or find's sort) may
    #: hold in memory: past it the read is refused with LIMIT_EXCEEDED naming the stage and
    #: the limit (it never spills to disk). A ``$sort`` followed by a ``$limit`` (a find with
    #: sort and limit) holds only that many documents.
    stage_memory_bytes: int = 100 * MiB
    #: The most groups one ``$group``, or documents one ``$sort``, may hold (None: no count).
    stage_max_documents: int | None = None
    #: Seconds a cursor (the rest of a find, search, range, list or aggregate answer, read
    #: with ``more``) may sit unread before it is closed and what it holds freed (0: never).
    #: Longer keeps a slow reader's place; shorter frees abandoned cursors sooner.
    cursor_timeout: float = 600.0
    #: The most cursors open at once; one more is refused with LIMIT_EXCEEDED. Each holds
    #: at most a chunk of read documents (256 KiB) and, when it sorts, its sorted result.
    max_cursors: int = 1000

    @classmethod
    def from_kwargs(cls, **kwargs) -> "Options":
        """Options from keyword arguments, a ``bucket_limits`` mapping, and a YAML ``config`` file.

        ``config="hoarddb.yaml"`` reads the same names from a YAML mapping (and its
        ``bucket_limits:`` section, as the spec writes it); keyword arguments win over
        the file.
        """
        config = kwargs.pop("config", None)
        if config is not None:
            kwargs = {**_read_config(config), **kwargs}
        limits = kwargs.pop("bucket_limits", None)
        if limits is not None:
            if not isinstance(limits, dict):
                raise BadValueError("bucket_limits is a mapping such as {l2_soft_limit: 10000, l2_hard_limit: 100000}")
            for key, value in limits.items():
                if key not in ("l2_soft_limit", "l2_hard_limit"):
                    raise UnknownOptionError(f"unknown bucket_limits key {key!r}; accepted: l2_soft_limit, l2_hard_limit")
                kwargs.setdefault(key, value)
        known = {f.name: f for f in fields(cls)}
        for name, value in kwargs.items():
            if name not in known:
                raise UnknownOptionError(
                    f"unknown database option {name!r}; accepted: {', '.join(sorted(known))}, bucket_limits, config"
                )
            want = {"bool": bool, "float": float}.get(known[name].type, int)
            if want is int and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise BadValueError(f"option {name!r} must be a positive integer, got {value!r}")
            if want is float and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not 0 <= value < math.inf):  # NaN fails this too
                raise BadValueError(f"option {name!r} must be a finite number of seconds ≥ 0, got {value!r}")
            if name == "segment_size" and value < MIN_SEGMENT_SIZE:
                raise BadValueError(f"option 'segment_size' is the bytes of one fifo/lifo segment file, at least "
                                    f"{MIN_SEGMENT_SIZE}; got {value!r}")
            if want is bool and not isinstance(value, bool):
                raise BadValueError(f"option {name!r} must be true or false, got {value!r}")
        return cls(**kwargs)


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise BadValueError(f"environment variable {name} must be a number of seconds, got {raw!r}") from None
    if not 0 <= value < math.inf:  # NaN fails this too
        raise BadValueError(f"environment variable {name} must be a finite number ≥ 0, got {raw!r}")
    return value


def _read_config(path) -> dict:
    import yaml

    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except OSError as exc:
        raise BadValueError(f"cannot read the configuration file {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise BadValueError(f"configuration file {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise BadValueError(f"configuration file {path} must hold a mapping of option names to values")
    return data
