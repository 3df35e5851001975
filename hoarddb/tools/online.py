"""Maintenance of a running server: ``hoarddb check`` and ``hoarddb backup`` through the server, while it serves.

    >>> from hoarddb.tools.online import check_online
    >>> with hoarddb.connect("hoarddb://admin:pw@db1:7070/?tls_ca=ca.pem") as client:
    ...     report = check_online(client)                 # or db="app", bucket="Users"
    ...     print("\\n".join(report.lines()), report.summary())

The server runs the ``check`` operation (admin only) in its pool of readers, never on its
event loop: each bucket is checked as ``hoarddb check DIR`` checks it, over one moment of
the bucket, while writes go on. A bucket kept in LMDB (hash, btree, heap) is walked in one
read transaction (every document, index entry, count and store-field element). A queue
(fifo, lifo) is checked as its log stood when the check took its state under the log's
lock (segments, head, where each segment's entries end): every entry up to there passes
its crc and decodes, entries pushed later are not read, and a segment popped meanwhile
is not reported (hoarddb/storage/segment_check.py); a fifo's claim table in one read
transaction. A blob bucket's index is read as it was when the check began, and each blob
it named then is hashed against its recorded SHA-256: a blob deleted meanwhile, or one
being put, is not reported (``BlobStore.check_open``). What only the offline check reads:
the catalog's files, folders that no declaration names, and a crash's leftovers (a
running server repaired those at start).

The server runs the ``backup`` operation (admin only) by copying its open data directory
into a new folder on its own machine: the catalog, then each bucket as one moment of that
bucket (an LMDB bucket by LMDB's copy from one read transaction; a queue with its log held
still; a blob bucket's index and its immutable blob files linked), then its users and TLS
files. The folder opens as a data directory (``hoarddb.open``, ``hoarddb server --data``).
Consistent per bucket, not across buckets: a write to two buckets may be in one's copy
and not the other's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..operations import BACKUP, CHECK
from .check import Finding

#: What to do about a problem a bucket's walk found, when its own problem says nothing.
TODO = ("stop the server and run hoarddb check on its data directory for the whole picture; then restore the "
        "bucket from a dump (hoarddb restore DUMP/{db} --drop --bucket {bucket}) or drop and refill it")


@dataclass
class OnlineCheckReport:
    """OnlineCheckReport is what the server's ``check`` found: ``problems`` (empty when sound), the
    buckets ``checked`` and those ``unchecked`` (a server that cannot check a bucket's type
    while it serves says so; every type of this version can be), and the time taken."""

    address: str
    checked: list[dict] = field(default_factory=list)
    unchecked: list[dict] = field(default_factory=list)
    problems: list[Finding] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        """One line per problem, then one per bucket not checked."""
        return [p.line() for p in self.problems] + [
            f"{u['db']}.{u['bucket']}: not checked online (the server cannot check a {u['type']} bucket while it "
            "serves); hoarddb check DIR checks it with the server stopped" for u in self.unchecked]

    def summary(self) -> str:
        found = "no problems" if self.ok else f"{len(self.problems)} problem(s)"
        skipped = f", {len(self.unchecked)} not checked online" if self.unchecked else ""
        return (f"checked {len(self.checked)} bucket(s) of the server at {self.address} while it served, in "
                f"{self.seconds:.1f} s{skipped}: {found}")

    def to_dict(self) -> dict:
        return {"address": self.address, "ok": self.ok, "checked": self.checked, "unchecked": self.unchecked,
                "problems": [{"db": p.db, "bucket": p.bucket, "file": p.file, "problem": p.problem,
                              "action": p.action} for p in self.problems],
                "seconds": round(self.seconds, 3)}


def check_online(client, db: str | None = None, bucket: str | None = None) -> OnlineCheckReport:
    """Check the buckets of the server ``client`` is connected to (every one, ``db``'s, or ``db.bucket``).

    Needs the admin role (UNAUTHORIZED otherwise); raises what the server refuses
    (no such database or bucket). Problems found are in the report, never raised.
    """
    import time

    options = getattr(client._executor, "options", None)
    started = time.monotonic()
    request = {"op": CHECK.name}
    if db is not None:
        request["db"] = db
    if bucket is not None:
        request["bucket"] = bucket
    answer = client.execute(request).get("result") or {}
    report = OnlineCheckReport(options.address if options is not None else "(embedded)")
    for b in answer.get("buckets") or []:
        where = {"db": b["db"], "bucket": b["bucket"], "type": b["type"]}
        if not b.get("checked"):
            report.unchecked.append(where)
            continue
        report.checked.append(where)
        todo = TODO.format(db=b["db"], bucket=b["bucket"])
        for file, what, action in b.get("problems") or []:
            report.problems.append(Finding(b["db"], b["bucket"], f"{b['db']}/{b['bucket']}/{file}".rstrip("/"),
                                           what, action or todo))
        if b.get("more"):
            report.problems.append(Finding(b["db"], b["bucket"], f"{b['db']}/{b['bucket']}",
                                           f"and {b['more']} more problems like those above (not listed)", todo))
    report.seconds = time.monotonic() - started
    return report


def check_command_online(db: str | None, bucket: str | None, json_mode: bool, server: dict) -> int:
    """``hoarddb check`` without DIR: check through the server the options name; the exit status
    (0 sound, 1 problems found, 2 usage or the check refused, as offline)."""
    import click

    import hoarddb

    from ..errors import HoardError
    from .commands import server_address

    if bucket is not None and db is None:
        raise click.UsageError("--bucket names a bucket of --db: give --db too")
    url, options = server_address(server)
    try:
        with hoarddb.connect(url, **options) as client:
            report = check_online(client, db=db, bucket=bucket)
    except HoardError as exc:
        click.echo(f"hoarddb check: {exc.codeName}: {exc.message}", err=True)
        return 2
    if json_mode:
        click.echo(json.dumps(report.to_dict(), default=str))
    else:
        for line in report.lines():
            click.echo(line)
        click.echo(report.summary())
    return 0 if report.ok else 1


def backup(client, path) -> dict:
    """Have the server ``client`` is connected to (or an embedded database) copy itself into
    ``path``, a new folder on the server's machine given as an absolute path; the answer
    ``{path, buckets: [{db, bucket, type}], seconds}``. Needs the admin role."""
    return client.execute({"op": BACKUP.name, "path": str(path)}).get("result") or {}
