"""check: read every file of a data directory and report what is wrong, changing nothing of a sound one.

    >>> from hoarddb.tools.check import check
    >>> report = check("./data")                          # every database and bucket
    >>> report = check("./data", db="app", bucket="Users")
    >>> report.ok
    True
    >>> print("\\n".join(report.lines()))                 # one line per problem

What each store type verifies is its own: ``Store.check`` in its module under
hoarddb/stores/ (documents, counts, index entries, store fields, segment entries,
blob files). This module walks the catalog's databases and buckets, compares them
with the folders, runs each bucket's check and gathers what they say:

1. It looks, reading only, for what a crash left (an LMDB environment, a queue's state
   or a blob index not closed cleanly). If it finds any, it opens the directory as
   any open does, so that the repairs run, and closes it. A data directory that was
   closed cleanly is not opened that way, and no byte of it changes.
2. It takes the directory's lock (``LOCK``, which then names this process), as an
   open does: DataDirLockedError while a server or another process has it open.
3. A child process reads the catalog, then checks the buckets one after the other.
   LMDB keeps no checksums and trusts its pages: damaged ones can stop the process
   that reads them (SIGSEGV, SIGBUS, an assertion). A reader that dies is reported as
   damage of the file it was reading, and a new child goes on with the next bucket.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..catalog import NAME_RE, RESERVED
from ..errors import BucketNotFoundError, DatabaseNotFoundError, DataDirLockedError, HoardError, InvalidArgumentError
from ..values.codec import decode, encode

#: What to do about a damaged bucket (``{db}``, ``{bucket}``, ``{data}`` are filled in).
RESTORE = ("restore the bucket from a dump (hoarddb restore DUMP/{db} --data {data} --drop --bucket {bucket}) or "
           "a backup, or drop it and create it again")
#: ... about the catalog.
RESTORE_CATALOG = ("restore the data directory from a backup, or open a new one and restore your dumps into it "
                   "(hoarddb restore)")
#: How the reader child is started (after ``sys.executable``): it serves tasks until its input ends.
READER = ["-c", "from hoarddb.tools.check import serve; serve()"]
#: The file of each store type that a crashing reader was reading.
LMDB_FILES = {"hash": "kv/data.mdb", "btree": "kv/data.mdb", "heap": "kv/data.mdb", "fifo": "claims/data.mdb"}


@dataclass(frozen=True)
class Finding:
    """Finding is one problem: where (database and bucket, None for the catalog or a
    folder of none), the file (relative to the data directory), what is wrong, what to do."""

    db: str | None
    bucket: str | None
    file: str
    problem: str
    action: str

    def line(self) -> str:
        """``app.Users: app/Users/kv/data.mdb: <problem>; <what to do>``."""
        where = "catalog" if self.db is None else self.db if self.bucket is None else f"{self.db}.{self.bucket}"
        return f"{where}: {self.file}: {self.problem}; {self.action}"


@dataclass
class CheckReport:
    """CheckReport is what :func:`check` found: ``problems`` (empty when sound), the buckets
    ``checked``, the folders whose crash repairs ran first (``repaired``), and the time taken."""

    path: str
    checked: list[dict] = field(default_factory=list)
    problems: list[Finding] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        """One line per problem."""
        return [p.line() for p in self.problems]

    def summary(self) -> str:
        dbs = len({c["db"] for c in self.checked})
        found = "no problems" if self.ok else f"{len(self.problems)} problem(s)"
        return (f"checked {len(self.checked)} bucket(s) of {dbs} database(s) and the catalog of {self.path} in "
                f"{self.seconds:.1f} s: {found}")

    def to_dict(self) -> dict:
        """The report as plain JSON-able values (``hoarddb check --json``)."""
        return {"path": self.path, "ok": self.ok, "checked": self.checked,
                "problems": [{"db": p.db, "bucket": p.bucket, "file": p.file, "problem": p.problem,
                              "action": p.action} for p in self.problems],
                "repaired": self.repaired, "seconds": round(self.seconds, 3)}


def check(path, db: str | None = None, bucket: str | None = None) -> CheckReport:
    """Check the data directory ``path`` (every bucket, or those of ``db``, or ``db.bucket``).

    :raises InvalidArgumentError: ``path`` is not a data directory, or ``bucket`` is given without ``db``.
    :raises DataDirLockedError: a server or another process has the directory open.
    :raises DatabaseNotFoundError, BucketNotFoundError: ``db`` or ``bucket`` is not declared.
    :return: a :class:`CheckReport`; problems found are in it, never raised.
    """
    from ..storage.lock import DirectoryLock

    started = time.monotonic()
    root = data_directory(path, db, bucket)
    report = CheckReport(str(root))
    repair_first(root, db, bucket, report)
    lock = DirectoryLock(root)
    lock.acquire()
    try:
        with _Reader() as reader:
            found = _check_catalog(root, reader, report)
            if found is not None:
                dbs, decls = found
                chosen = chosen_buckets(decls, dbs, db, bucket)
                _check_folders(root, dbs, decls, db, bucket, report)
                for decl in chosen:
                    if _has_folder(root, decl):
                        _check_bucket(root, decl, reader, report)
                    report.checked.append({"db": decl["db"], "bucket": decl["name"], "type": decl["type"]})
    finally:
        lock.release()
    report.seconds = time.monotonic() - started
    return report


# -- 1. what a crash left ------------------------------------------------------------------------


def _unclean(root: Path, db: str | None, bucket: str | None) -> list[Path]:
    """The folders (the catalog's, buckets') a crash left without a clean close; reads only."""
    from ..storage import blobfiles, segment
    from ..storage.wal import newest_header

    def lmdb_unclean(folder: Path) -> bool:
        header = newest_header(folder)
        return header is not None and not header[1]

    out = [root / "catalog"] if lmdb_unclean(root / "catalog") else []
    for d in _folders(root, top=True):
        if db is not None and d.name != db:
            continue
        for b in _folders(d):
            if bucket is not None and b.name != bucket:
                continue
            if (lmdb_unclean(b / "kv") or lmdb_unclean(b / "claims")
                    or ((b / segment.STATE_FILE).exists() and not segment.closed_cleanly(b))
                    or ((b / blobfiles.INDEX_NAME).exists() and blobfiles.read_closed_mark(b) is None)):
                out.append(b)
    return out


def data_directory(path, db: str | None, bucket: str | None) -> Path:
    """``path`` as a Path, once it is a data directory and the scope (``db``, ``bucket``) makes
    sense; InvalidArgumentError otherwise (for check and compact alike)."""
    root = Path(path)
    if bucket is not None and db is None:
        raise InvalidArgumentError("--bucket names a bucket of the database --db names; give --db too")
    if not root.is_dir() or not (root / "catalog").is_dir():
        raise InvalidArgumentError(f"{root} is not a hoardDB data directory (a directory holding catalog/); give the "
                                   "directory a server's --data or hoarddb.open() uses")
    return root


def repair_first(root: Path, db: str | None, bucket: str | None, report: CheckReport) -> None:
    """Open the directory as any open does when a crash left something to repair: the
    opener of each such bucket (and of the catalog) runs, then everything is closed."""
    from ..engine import Engine
    from ..options import Options

    unclean = _unclean(root, db, bucket)
    if not unclean:
        return
    try:
        engine = Engine(root, Options(ttl_sweep_seconds=0))
    except DataDirLockedError:  # in use: refused, as the lock below would be
        raise
    except HoardError as exc:  # a catalog the open refuses: reported with what the check finds in it
        report.problems.append(Finding(None, None, "catalog", f"opening the data directory to repair what a crash "
                                       f"left is refused: {exc.message}", RESTORE_CATALOG))
        return
    try:
        for folder in unclean:
            report.repaired.append(str(folder.relative_to(root)))
            if folder.name == "catalog" and folder.parent == root:
                continue  # the engine opened it
            request = {"op": "length", "db": folder.parent.name, "bucket": folder.name}
            try:
                engine.execute(request)
            except HoardError:  # damage: the bucket's check reports it
                pass
    finally:
        engine.close()


# -- 3. the child that reads -------------------------------------------------------------------


class _Reader:
    """_Reader is the child process that runs checks (:func:`serve`), started again when one crashes it."""

    def __init__(self):
        self._proc: subprocess.Popen | None = None
        self._stderr = None

    def __enter__(self) -> "_Reader":
        return self

    def __exit__(self, *exc) -> None:
        self._stop()

    def _start(self) -> None:
        self._stderr = tempfile.TemporaryFile()
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=package_root + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self._proc = subprocess.Popen([sys.executable, *READER],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env)

    def _stop(self) -> None:
        if self._proc is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
            self._proc.wait()
            self._proc.stdout.close()
            self._proc = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def run(self, task: dict) -> dict:
        """The child's answer to ``task``, or ``{"died": "<why>"}`` when it ended without one."""
        if self._proc is None:
            self._start()
        try:
            self._proc.stdin.write(encode(task))
            self._proc.stdin.flush()
            answer = _read_document(self._proc.stdout)
        except (BrokenPipeError, EOFError):
            answer = None
        if answer is not None:
            return answer
        code = self._proc.wait()
        self._stderr.seek(0)
        said = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
        self._proc.stdout.close()
        self._proc = None
        self._stderr.close()
        self._stderr = None
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            why = f"reading it crashed the reader ({name}{': ' + said[-1] if said else ''})"
        else:
            why = f"the reader stopped (exit status {code}{': ' + said[-1] if said else ''})"
        return {"died": why, "signal": code < 0}


def _read_document(stream) -> dict | None:
    """One BSON document from a pipe, or None at its end."""
    head = stream.read(4)
    if len(head) < 4:
        return None
    size = struct.unpack("<i", head)[0]
    rest = stream.read(size - 4)
    if len(rest) < size - 4:
        return None
    return decode(head + rest)


def serve() -> None:
    """The child's loop: read a task (BSON) from standard input, write the answer (BSON) to
    standard output, until standard input ends. A task is ``{task: "catalog", path}`` or
    ``{task: "bucket", type, directory, declaration}``; the answer ``{problems: [[file, what,
    todo], ...], more}`` (and the catalog's ``databases`` and ``declarations``)."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write to the answers' pipe
    while True:
        task = _read_document(stdin)
        if task is None:
            return
        stdout.write(encode(_run(task)))
        stdout.flush()


def _run(task: dict) -> dict:
    from ..stores import store_class
    from ..stores.base import Problems

    if task["task"] == "catalog":
        return _read_catalog(Path(task["path"]))
    try:
        problems = store_class(task["type"]).check(Path(task["directory"]), task["declaration"])
    except Exception as exc:  # a bug of a check, not damage: said as such, and the other buckets go on
        import traceback

        traceback.print_exc()
        problems = Problems()
        problems.append(("", f"the check itself failed ({type(exc).__name__}: {exc}), so the bucket was not "
                             "checked whole", "report this as a bug of hoardDB"))
    return {"problems": [list(p) for p in problems], "more": getattr(problems, "more", 0)}


def _read_catalog(path: Path) -> dict:
    from ..catalog import check_entries
    from ..errors import CorruptDataError, StorageError
    from ..storage.kv import DAMAGE_ERRORS, read_only

    try:
        with read_only(path) as txn:
            problems, dbs, decls = check_entries(txn)
    except (CorruptDataError, StorageError) as exc:
        return {"problems": [exc.message], "failed": True}
    except DAMAGE_ERRORS as exc:
        return {"problems": [f"LMDB found its pages are not what it wrote ({exc})"], "failed": True}
    return {"problems": problems, "databases": dbs, "declarations": decls}


# -- 4. what the catalog declares, against the folders ---------------------------------------------


def _check_catalog(root: Path, reader: _Reader, report: CheckReport) -> tuple[list[str], list[dict]] | None:
    """``(databases, bucket declarations)`` the catalog holds (its problems into ``report``), or None
    when it cannot be read."""
    answer = reader.run({"task": "catalog", "path": str(root / "catalog")})
    file = "catalog/data.mdb"
    if "died" in answer:
        report.problems.append(Finding(None, None, file, f"{file} is damaged ({answer['died']})", RESTORE_CATALOG))
        return None
    for what in answer["problems"]:
        report.problems.append(Finding(None, None, file, what, RESTORE_CATALOG))
    if answer.get("failed"):
        return None
    return answer["databases"], answer["declarations"]


def chosen_buckets(decls: list[dict], dbs: list[str], db: str | None, bucket: str | None) -> list[dict]:
    """The declarations to check, in order; a ``db`` or ``bucket`` not declared is refused, naming those that are."""
    if db is not None and db not in dbs:
        raise DatabaseNotFoundError(f"database {db!r} does not exist in this data directory; its databases: "
                                    f"{', '.join(dbs) or 'none'}")
    chosen = sorted((d for d in decls if db is None or d["db"] == db), key=lambda d: (d["db"], d["name"]))
    if bucket is not None:
        names = [d["name"] for d in chosen]
        chosen = [d for d in chosen if d["name"] == bucket]
        if not chosen:
            raise BucketNotFoundError(f"bucket {bucket!r} does not exist in database {db!r}; its buckets: "
                                      f"{', '.join(names) or 'none'}")
    return chosen


def _folders(directory: Path, top: bool = False) -> list[Path]:
    """The sub-folders of ``directory`` named as a database (``top``) or a bucket may be: not
    hoardDB's own (catalog/, tls/, _users/, a bucket's kv/ is below them)."""
    try:
        entries = sorted(directory.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [p for p in entries if p.is_dir() and NAME_RE.fullmatch(p.name) and not (top and p.name in RESERVED)]


def _has_folder(root: Path, decl: dict) -> bool:
    folder = root / decl["db"] / decl["name"]
    return folder.is_dir() and any(folder.iterdir())


def _check_folders(root: Path, dbs: list[str], decls: list[dict], db: str | None, bucket: str | None,
                   report: CheckReport) -> None:
    """Every declared bucket has its folder, and every folder is a declared database's or bucket's."""
    declared = {(d["db"], d["name"]) for d in decls}
    for d in sorted(declared):
        if (db is None or d[0] == db) and (bucket is None or d[1] == bucket) and not _has_folder(root, {
                "db": d[0], "name": d[1]}):
            report.problems.append(Finding(d[0], d[1], f"{d[0]}/{d[1]}", "the bucket's folder is missing or empty, "
                                           "though the catalog declares the bucket", _restore(root, d[0], d[1])))
    if bucket is not None:
        return
    leftover = ("nothing of a declared bucket is in it (a drop that did not finish, or a folder copied in): move it "
                "out of the data directory, or delete it")
    for d in _folders(root, top=True):
        if db is not None and d.name != db:
            continue
        if d.name not in dbs:
            report.problems.append(Finding(d.name, None, f"{d.name}/", "no database of the catalog has this folder",
                                           leftover))
            continue
        for b in _folders(d):
            if (d.name, b.name) not in declared:
                report.problems.append(Finding(d.name, None, f"{d.name}/{b.name}/", "no bucket of the catalog has "
                                               "this folder", leftover))


def _check_bucket(root: Path, decl: dict, reader: _Reader, report: CheckReport) -> None:
    db, name = decl["db"], decl["name"]
    folder = root / db / name
    answer = reader.run({"task": "bucket", "type": decl["type"], "directory": str(folder), "declaration": decl})
    todo = _restore(root, db, name)
    if "died" in answer:
        file = LMDB_FILES.get(decl["type"], "")
        report.problems.append(Finding(db, name, f"{db}/{name}/{file}".rstrip("/"),
                                       f"{Path(file).name or 'a file of the bucket'} is damaged ({answer['died']})",
                                       todo))
        return
    for file, what, action in answer["problems"]:
        report.problems.append(Finding(db, name, f"{db}/{name}/{file}".rstrip("/"), what, action or todo))
    if answer.get("more"):
        report.problems.append(Finding(db, name, f"{db}/{name}", f"and {answer['more']} more problems like those "
                                       "above (not listed)", todo))


def _restore(root: Path, db: str, bucket: str) -> str:
    return RESTORE.format(db=db, bucket=bucket, data=root)


def format_json(report: CheckReport) -> str:
    """The report as one line of JSON."""
    import json

    return json.dumps(report.to_dict(), default=str)


__all__ = ["check", "CheckReport", "Finding", "format_json", "serve"]
