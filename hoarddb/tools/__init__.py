"""Moving data in and out of hoardDB: ingest (mongodump and JSON Lines), dump and restore.

Each tool is a function taking an open client, so it works the same on an embedded
data directory and on a server; the ``hoarddb ingest|dump|restore`` commands only
wrap them (:mod:`hoarddb.tools.commands`).

    >>> import hoarddb
    >>> from hoarddb.tools import dump, ingest, restore
    >>> with hoarddb.open("./data") as client:
    ...     print(ingest(client, "./mongodump/app", into_db="app").summary())
    ...     dump(client, "app", "./backup")             # ./backup/app/<bucket>.bson + .metadata.json
    ...     restore(client, "./backup/app", db="app2")   # declared from the dump, then loaded

Modules: :mod:`~hoarddb.tools.readers` (BSON and JSON Lines with positions),
:mod:`~hoarddb.tools.batches` (one write per batch, finding a refused batch's bad
documents), :mod:`~hoarddb.tools.ingest`, :mod:`~hoarddb.tools.dump`,
:mod:`~hoarddb.tools.restore`, :mod:`~hoarddb.tools.report` (what each hands back), and
:mod:`~hoarddb.tools.check` (``hoarddb check``: reads a closed data directory's files whole,
not through a client, and reports what is wrong).
"""

from __future__ import annotations

from .dump import dump
from .ingest import ingest
from .report import BucketReport, Refusal, Report
from .restore import restore

__all__ = ["ingest", "dump", "restore", "Report", "BucketReport", "Refusal"]
