"""The ``hoarddb ingest``, ``dump``, ``restore``, ``ping`` and ``status`` commands: thin wrappers of hoarddb.tools.

    hoarddb ingest PATH --into-db DB | --into DB.BUCKET [--type T] [--allow-dots]
                   [--on-error stop|skip] [--yes] [--batch-size N] [--json]
        load a mongodump folder or file (.bson, .bson.gz) or JSON Lines (.jsonl, .json)
    hoarddb dump --out DIR [--db DB [--bucket B ...]] [--json]
        write DIR/DB/<bucket>.bson, <bucket>.metadata.json (and <bucket>.blobs/), for
        every database, or the one --db names
    hoarddb restore DIR | DIR/DB [--db DB2] [--bucket B ...] [--drop] [--json]
        declare each bucket of a dump and load it: every database of a dump's top
        folder DIR, or the one database of DIR/DB
    hoarddb ping [server options] [--json]
        whether a server answers, and how fast (exit 0: it does, 1: it does not)
    hoarddb status [server options] [--json]
        a running server's address, version, user, databases and buckets, indexes
    hoarddb backup --out DIR [server options | --data DIR] [--json]
        copy the server's data directory into DIR on its machine while it serves

ingest, dump and restore take ``--data DIR`` (an embedded data directory) or a server;
ping and status a server only: ``--host/--port`` (default 127.0.0.1:7070, or ``--url``),
with ``--insecure`` or ``--tls-ca``/``--tls-fingerprint``, ``--user``, ``--password`` —
built with :func:`hoarddb.connect`. ``--json`` prints the report as one
line of JSON (:meth:`~hoarddb.tools.report.Report.to_dict`) instead of the summary. Exit status: 0 when
everything was moved, 1 when something was not (the summary says what) or the
database could not be opened, 2 for a usage error or a refusal before anything was
written.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict

import click

from ..errors import HoardError
from .report import BucketReport

NO_CONNECT = "this hoardDB has no server client (hoarddb.connect); use --data DIR for an embedded database"


def _json_option(f):
    return click.option("--json", "json_mode", is_flag=True,
                         help="Print the report as one line of JSON instead of the summary.")(f)


def _print_report(report, json_mode: bool) -> None:
    click.echo(report.to_json() if json_mode else report.summary())


def _client_options(f):
    """--data for an embedded database, or the server options every client command shares."""
    f = server_options(f)
    return click.option("--data", metavar="DIR", type=click.Path(file_okay=False),
                        help="The data directory of an embedded database (created if missing).")(f)


def server_options(f):
    """The options that name a server and how to reach it (127.0.0.1:7070 when none is given)."""
    f = click.option("--timeout", type=float, default=None, help="Seconds to wait for an answer.")(f)
    f = click.option("--tls-fingerprint", "tls_fingerprint", metavar="SHA256",
                     help="Trust the server whose certificate has this SHA-256 fingerprint.")(f)
    f = click.option("--tls-ca", "tls_ca", metavar="FILE", type=click.Path(dir_okay=False),
                     help="Verify the server against this CA certificate.")(f)
    f = click.option("--password", default=None, help="The user's password (better: HOARDDB_PASSWORD).")(f)
    f = click.option("--user", "-u", "user", default=None, help="Log in as this user.")(f)
    f = click.option("--insecure", "-insecure", "insecure", is_flag=True, default=None,
                     help="No TLS, no login: a local server started with --insecure.")(f)
    f = click.option("--port", type=int, default=None, help="The server's port.")(f)
    f = click.option("--host", default=None, help="The server's address.")(f)
    f = click.option("--url", default=None, metavar="URL", help="A server: hoarddb://user:password@host:port/")(f)
    return f


def open_client(data=None, url=None, **server):
    """The client the options name: ``hoarddb.open(data)``, or ``hoarddb.connect(url, **server)`` for a server."""
    import hoarddb

    server = {k: v for k, v in server.items() if v is not None}
    remote = url is not None or bool(server)
    if remote == (data is not None):
        raise click.UsageError("give --data DIR (an embedded database) or a server (--host/--port, --url, "
                               "--insecure), one of the two")
    if data is not None:
        return hoarddb.open(data)
    connect = getattr(hoarddb, "connect", None)
    if connect is None:
        raise click.UsageError(NO_CONNECT)
    return connect(url, **server)


class _Progress:
    """A rich progress bar on standard error when it is a terminal: documents, documents/s, ETA by bytes."""

    def __init__(self, unit: str = "bytes"):
        self.enabled = sys.stderr.isatty()
        self.unit = unit
        self._progress = None
        self._tasks: dict[int, int] = {}

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            columns = [TextColumn("{task.description}"), BarColumn(),
                       TextColumn("{task.fields[docs]:>12,} docs  {task.fields[rate]:>9,.0f} docs/s")]
            if self.unit == "bytes":
                columns.append(DownloadColumn())
            columns += [TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]
            self._progress = Progress(*columns, console=Console(stderr=True), transient=False)
            self._progress.__enter__()
        return self

    def __call__(self, rep: BucketReport) -> None:
        if self._progress is None:
            return
        task = self._tasks.get(id(rep))
        if task is None:
            task = self._progress.add_task(f"{rep.db}.{rep.bucket}", total=rep.total_bytes or None, docs=0, rate=0.0)
            self._tasks[id(rep)] = task
        completed = rep.bytes if self.unit == "bytes" else rep.documents
        self._progress.update(task, completed=completed, docs=rep.documents, rate=rep.rate)

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.__exit__(*exc)


class _OpenFailed(Exception):
    pass


def _open(conn: dict):
    try:
        return open_client(**conn)
    except HoardError as exc:
        raise _OpenFailed(f"{exc.codeName}: {exc.message}") from exc


def _run(fn) -> int:
    """Run a tool: exit 1 when the database cannot be opened, 2 for a refusal before anything was written."""
    try:
        return fn()
    except _OpenFailed as exc:
        click.echo(str(exc), err=True)
        return 1
    except HoardError as exc:
        click.echo(f"{exc.codeName}: {exc.message}", err=True)
        return 2


@click.command()
@click.argument("path", type=click.Path(exists=True))
@click.option("--into-db", metavar="DB", help="Load a folder (or a file): one bucket per file, named after it.")
@click.option("--into", metavar="DB.BUCKET", help="Load one file into this bucket.")
@click.option("--type", "type_", type=click.Choice(["hash", "btree", "heap", "fifo", "lifo"]),
              help="The store type of the buckets ingest creates (default hash); a bucket that exists keeps its own.")
@click.option("--allow-dots", is_flag=True, help="Load files with a dot in their base name (events.2024.bson).")
@click.option("--on-error", type=click.Choice(["stop", "skip"]), default="stop", show_default=True,
              help="At a bad document: stop there, or skip it and load the rest.")
@click.option("--yes", "-y", is_flag=True, help="Append to fifo/lifo buckets without asking.")
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=1000, show_default=True,
              help="Documents per write.")
@_json_option
@_client_options
def ingest(path, into_db, into, type_, allow_dots, on_error, yes, batch_size, json_mode, **conn):
    """Load mongodump .bson (.bson.gz) files or JSON Lines (.jsonl, .json) into buckets."""
    from .ingest import ingest as run_ingest

    def confirm(message: str) -> bool:
        if not sys.stdin.isatty():
            raise click.UsageError(message.replace(" Go on?", "") + " Standard input is not a terminal: "
                                   "pass --yes to go on")
        return click.confirm(message, default=False, err=True)

    def go() -> int:
        with _open(conn) as client, _Progress() as progress:
            report = run_ingest(client, path, into_db=into_db, into=into, type=type_, allow_dots=allow_dots,
                                on_error=on_error, yes=yes, confirm=confirm, batch_size=batch_size,
                                progress=progress)
        _print_report(report, json_mode)
        return 0 if report.ok else 1

    sys.exit(_run(go))


@click.command()
@click.option("--db", default=None, help="Only this database (default: every database, each in its folder).")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="The folder to write OUT/DB/ into.")
@click.option("--bucket", "buckets", multiple=True, help="Only this bucket of --db (repeat for more).")
@_json_option
@_client_options
def dump(db, out, buckets, json_mode, **conn):
    """Write every bucket of every database, or of --db (documents, declaration, blob files), under OUT/DB/."""
    from .dump import dump as run_dump

    def go() -> int:
        if buckets and db is None:
            raise click.UsageError("--bucket names buckets of one database: give it with --db")
        with _open(conn) as client, _Progress(unit="docs") as progress:
            report = run_dump(client, db, out, buckets=list(buckets) or None, progress=progress)
        _print_report(report, json_mode)
        return 0 if report.ok else 1

    sys.exit(_run(go))


@click.command()
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@click.option("--db", help="The database to restore one database's folder into (default: the folder's name).")
@click.option("--bucket", "buckets", multiple=True, help="Only this bucket of one database's folder (repeat for more).")
@click.option("--drop", is_flag=True, help="Drop a bucket of the same name first (else one that exists refuses).")
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=1000, show_default=True,
              help="Entries per write.")
@click.option("--max-nesting-depth", type=click.IntRange(1, 64), default=3, show_default=True,
              help="The deepest store fields the dump may nest: the target's max_nesting_depth, when raised.")
@_json_option
@_client_options
def restore(path, db, buckets, drop, batch_size, max_nesting_depth, json_mode, **conn):
    """Declare each bucket of a dump and load it: PATH is a dump's top folder OUT (every database in it) or OUT/DB."""
    from .restore import restore as run_restore

    def go() -> int:
        started = time.perf_counter()
        with _open(conn) as client, _Progress() as progress:
            report = run_restore(client, path, db=db, buckets=list(buckets) or None, drop=drop,
                                 batch_size=batch_size, progress=progress, max_nesting_depth=max_nesting_depth)
        _print_report(report, json_mode)
        if not json_mode:
            click.echo(f"({time.perf_counter() - started:.1f} s)")
        return 0 if report.ok else 1

    sys.exit(_run(go))


def server_address(conn: dict) -> tuple[str | None, dict]:
    """``(url, options)`` for hoarddb.connect from the server options given (none: 127.0.0.1:7070)."""
    conn = {k: v for k, v in conn.items() if v is not None}
    url = conn.pop("url", None)
    if conn.get("user") and "password" not in conn and not os.environ.get("HOARDDB_PASSWORD") \
            and sys.stdin is not None and sys.stdin.isatty():
        conn["password"] = click.prompt(f"password for {conn['user']}", hide_input=True, err=True)
    return url, conn


@click.command()
@_json_option
@server_options
def ping(json_mode, **conn):
    """Say whether a server answers, and how fast; exit 0 when it does, 1 when not.

    No login is needed: a server that answers and asks for one is up. With --user, the
    login must succeed, and one request is timed too.
    """
    from .status import ping as run_ping

    url, options = server_address(conn)
    result = run_ping(url, **options)
    click.echo(json.dumps(asdict(result)) if json_mode else result.text())
    sys.exit(0 if result.answered else 1)


@click.command()
@_json_option
@server_options
def status(json_mode, **conn):
    """What a running server is: address, version, user, databases and buckets, indexes, TTL backlog."""
    from .status import status as run_status

    def go() -> int:
        import hoarddb

        url, options = server_address(conn)
        try:
            client = hoarddb.connect(url, **options)
        except HoardError as exc:
            raise _OpenFailed(f"{exc.codeName}: {exc.message}") from exc
        with client:
            report = run_status(client)
        click.echo(report.to_json() if json_mode else report.text())
        return 0

    sys.exit(_run(go))


@click.command()
@click.option("--out", required=True, metavar="DIR",
              help="A new folder on the server's machine (an absolute path) to copy the data directory into.")
@_json_option
@_client_options
def backup(out, json_mode, **conn):
    """Copy a running server's data directory (or an open embedded one) into a new folder, while it serves.

    Each bucket is copied as one moment of it (consistent per bucket, not across buckets);
    the folder opens as a data directory. Needs the admin role. docs/user/dump-restore.md.
    """
    from .online import backup as run_backup

    def go() -> int:
        # embedded, the folder is on this machine: a relative path is taken from here
        target = os.path.abspath(out) if conn.get("data") is not None else out
        with _open(conn) as client:
            result = run_backup(client, target)
        if json_mode:
            click.echo(json.dumps(result))
        else:
            click.echo(f"backed up {len(result.get('buckets', []))} bucket(s) into {result.get('path')} in "
                       f"{result.get('seconds', 0):.1f} s (each bucket as one moment of it)")
        return 0

    sys.exit(_run(go))


COMMANDS = (ingest, dump, restore, ping, status, backup)
