"""The hoardDB shell: HQL statements in, answers out, on a terminal or from a script.

    >>> import hoarddb, io, tempfile
    >>> from hoarddb.shell import Shell
    >>> out = io.StringIO()
    >>> with hoarddb.open(tempfile.mkdtemp()) as client:
    ...     shell = Shell(client, out=out, json_mode=True)
    ...     shell.run_text('use app; create bucket Comments { type: fifo }; db.Comments.push({Text: "hi"}); db.Comments.pop()')
    True
    >>> out.getvalue().splitlines()[-1]
    '{"ok": 1, "result": {"Text": "hi"}}'

A :class:`Shell` holds what a session remembers (the current database) and runs
statements on an executor: anything with ``execute(request) -> answer``, the embedded
engine today, a server connection later. :func:`run_script` is a whole non-interactive
run, in process (the tests use it); :func:`interactive` is the prompt_toolkit loop.
Verbs, their help and their completion all come from :mod:`hoarddb.operations`.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from pathlib import Path
from typing import IO, Any

from . import operations
from .operations import CLOSE_CURSOR, CREATE_BUCKET, CREATE_DATABASE, DESCRIBE_BUCKET, LIST_BUCKETS, LIST_DATABASES, MORE
from .errors import BadValueError, BucketNotFoundError, HoardError, InternalError, UnknownVerbError
from .hql import literals, printer
from .hql.parser import Statement, is_complete, next_keywords, statements, unknown_verb

#: The statements of HQL, as `help` lists them (verbs come from the operations table).
STATEMENTS = [
    ("create database NAME", "create a database"),
    ("drop database NAME", "drop a database and every bucket in it"),
    ("use NAME", "make NAME the current database (the prompt shows it)"),
    ("show databases", "list the databases"),
    ("show buckets", "list the buckets of the current database"),
    ("create bucket NAME { type: fifo, ... }", "create a bucket: option lines, field lines, store-field lines"),
    ("describe bucket NAME", "a bucket's type, size, fields, stores and indexes"),
    ("alter bucket NAME { option: value, ... }", "change a bucket's options"),
    ("drop bucket NAME", "drop a bucket and its data"),
    ("db.Bucket.verb(args)", "run a verb on a bucket (db[\"Bucket\"].verb() too)"),
    ("db.Bucket[\"key\"].Field.verb(args)", "run a verb on a store field of one document"),
    ("db.Bucket[\"key\"].Field[\"k\"].Sub.verb(args)", "a store of an element of a store field, a level deeper"),
    ("db[\"Bucket.key.Field\"].verb(args)", "read a document's store by its dotted address"),
    ("db.Bucket.stats()", "same as describe bucket"),
    ("help [VERB]", "this list, or one verb's arguments and an example"),
    ("exit", "leave the shell (Ctrl-D too)"),
]

#: Where the interactive shell keeps its history, unless $HOARDDB_HISTORY says otherwise.
DEFAULT_HISTORY = "~/.hoarddb_history"


def history_path() -> Path:
    return Path(os.environ.get("HOARDDB_HISTORY") or DEFAULT_HISTORY).expanduser()


def private_file(path: Path) -> Path:
    """``path`` made ready to hold what one user typed: created 0600 (its folder 0700), never readable by others.

    An existing file keeps its content; only the group's and others' permissions are taken away.
    Raises OSError when the file cannot be made.
    """
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        os.chmod(path, mode & 0o700)
    return path


#: Operations whose names the engine's messages use ("create it with create_bucket"), as HQL writes them.
HQL_STATEMENT_OF = {name: op.hql for name, op in operations.ADMIN.items() if op.hql}
_OPERATION_NAME = re.compile(r"\b(" + "|".join(HQL_STATEMENT_OF) + r")\b")


def in_hql(err: HoardError, request: dict | None = None) -> HoardError:
    """``err`` with the operation names of its message written as the HQL statements a shell user types.

    ``create_bucket`` becomes `create bucket Name { type: ... }` when the request names the
    bucket, `create database app` when it names the database; the code stays the same.
    """
    request = request or {}

    def statement(m: re.Match) -> str:
        words = HQL_STATEMENT_OF[m.group(1)]
        if m.group(1) == CREATE_DATABASE.name and request.get("db"):
            words += f" {request['db']}"
        elif m.group(1) == CREATE_BUCKET.name and request.get("bucket") and request.get("op") != CREATE_BUCKET.name:
            words += f" {request['bucket']} {{ type: ... }}"
        return f"`{words}`"

    message = _OPERATION_NAME.sub(statement, err.message)
    if message == err.message:
        return err
    try:
        translated = type(err)(message, **err.details)
    except Exception:  # an error class with its own signature: keep it as it came
        return err
    for name in ("line", "column", "at_end"):
        if hasattr(err, name):
            setattr(translated, name, getattr(err, name))
    return translated


# ---- help -----------------------------------------------------------------------------------

def usage(op: operations.Operation) -> str:
    """``peek(limit?)``, ``list({after, limit})``, ``put(doc, {name, type})``."""
    parts = [p.name if p.required else p.name + "?" for p in op.params]
    if op.options:
        parts.append("{" + ", ".join(p.name for p in op.options) + "}")
    return f"{op.name}({', '.join(parts)})"


def help_text(topic: str | None = None) -> str:
    """The text of ``help`` (every statement and verb) or ``help TOPIC`` (a verb, statement or constructor)."""
    if not topic:
        lines = ["Statements (';' or a line's end ends one; '--' starts a comment):"]
        width = max(len(s) for s, _ in STATEMENTS)
        lines += [f"  {s:<{width}}  {d}" for s, d in STATEMENTS]
        lines += ["", "Verbs (help VERB for its arguments and an example):"]
        ops = sorted({op.name: op for op in operations.VERBS.values()}.values(), key=lambda o: o.name)
        width = max(len(usage(op)) for op in ops)
        for op in ops:
            types = ", ".join(t for t in operations.STORE_TYPES if t in op.types)
            lines.append(f"  {usage(op):<{width}}  {types}")
        lines += ["", "Values: {key: value}, [a, b], \"text\" or 'text', 12, -1.5, true, false, null, "
                      + ", ".join(c.example for c in literals.CONSTRUCTORS.values() if c.name in _SHOWN_CONSTRUCTORS)]
        return "\n".join(lines)
    if topic in operations.VERBS:
        op = operations.VERBS[topic]
        lines = [f"{usage(op)}  —  {', '.join(t for t in operations.STORE_TYPES if t in op.types)}"
                 + ("  (writes)" if op.write else ""),
                 f"  {op.summary}"]
        for p in op.params + op.options:
            lines.append(f"  {p.name}: {operations.KINDS.get(p.kind, p.kind)}"
                         + ("" if p.required else ", optional") + (f" — {p.help}" if p.help else ""))
        if op.answer:
            lines.append(f"  answer:  {op.answer}")
        if op.aliases:
            lines.append(f"  also:    {', '.join(op.aliases)}")
        if op.example:
            lines.append(f"  example: {op.example}")
        return "\n".join(lines)
    if topic.lower() in literals.CONSTRUCTORS:
        c = literals.CONSTRUCTORS[topic.lower()]
        return f"{c.example}  —  {c.summary}"
    matches = [f"  {s}  —  {d}" for s, d in STATEMENTS if topic.lower() in s.lower().split()]
    if matches:
        return "\n".join(matches)
    known = sorted({op.name for op in operations.VERBS.values()})
    topics = {t.lower(): t for t in [*operations.VERBS, *(c.name for c in literals.CONSTRUCTORS.values()),
                                     *(s.split()[0] for s, _ in STATEMENTS if s[0].isalpha())]}
    close = difflib.get_close_matches(topic.lower(), list(topics), n=1, cutoff=0.6)
    guess = f"did you mean help {topics[close[0]]}? " if close else ""
    raise UnknownVerbError(f"no help on {topic!r}: not a verb, statement or value constructor; {guess}"
                           f"verbs: {', '.join(known)}")


_SHOWN_CONSTRUCTORS = {"ISODate", "now", "int32", "int64", "double", "ObjectId", "Decimal128", "UUID", "BinData"}


# ---- the shell ------------------------------------------------------------------------------

class Shell:
    """Shell is one session: its executor, its current database, and where it prints.

    Readable mode prints answers to ``out`` and errors and warnings to ``err``;
    ``json_mode`` prints exactly one JSON line per statement to ``out``, errors included.
    """

    def __init__(self, client, *, json_mode: bool = False, out: IO[str] | None = None,
                 err: IO[str] | None = None, db: str | None = None):
        self.client = client
        self.json_mode = json_mode
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        self.db = db
        self.exited = False
        self._notes: list[str] = []
        self._buckets: list[str] | None = None
        self._types: dict[str, dict] = {}
        self._cursor: dict | None = None  # the last read's cursor while it has more to show (`it`)

    def prompt(self) -> str:
        return f"{self.db or 'hoarddb'}> "

    # -- running

    def answer(self, stmt: Statement) -> tuple[str, dict]:
        """The operation name and answer of one statement; raises its HoardError."""
        if stmt.kind == "use":
            return "use", self._use(stmt.name)
        if stmt.kind == "help":
            return "help", {"ok": 1, "result": help_text(stmt.name)}
        if stmt.kind == "exit":
            self.exited = True
            return "exit", {"ok": 1, "result": None}
        request = stmt.to_request(self.db)
        self.close_cursor()  # a new statement: the read before it is not continued (as mongosh)
        paged = self._paged(request)
        try:
            answer = self.client.execute(request)
            if paged and self.json_mode:  # one JSON line holds the whole result: read every batch
                answer = self._drained(answer)
        except BucketNotFoundError as e:
            raise self._bucket_meant(in_hql(e, request), request) from None
        except HoardError as e:
            raise in_hql(e, request) from None
        if answer.get("cursor"):  # more to show: `it` shows the next page
            shown = len(answer.get("result") or [])
            self._cursor = {"id": answer["cursor"], "shown": shown, "page": request["args"]["batch_size"] or PAGE}
            self._notes.append(f'-- {shown} shown; type "it" for more')
        if request["op"] in operations.names(catalog=True):
            self.forget_buckets()
        if request["op"] == CREATE_DATABASE.name and self.db is None:
            # Nothing was selected: the database just made is the one meant (`create database
            # PhotoJournal;` then its buckets, as store-types.md writes it).
            self.db = request["db"]
            self._notes.append(f"switched to database {self.db}")
        return request["op"], printer.settle(answer)

    # -- paging (a read's cursor, as mongosh pages one)

    def _paged(self, request: dict) -> bool:
        """Whether ``request`` is a read answered through a cursor; if so it asks for a page
        (PAGE documents) unless it names its own batch_size."""
        op = operations.VERBS.get(request.get("op"))
        if op is None or not op.cursor or "field" in request or "key" in request:
            return False
        args = request.setdefault("args", {})
        if args.get("batch_size") is None:
            args["batch_size"] = PAGE
        return True

    def _drained(self, answer: dict) -> dict:
        """``answer`` with every batch of its cursor in its result."""
        docs = list(answer.get("result") or [])
        cursor_id = answer.get("cursor")
        while cursor_id:
            more = self.client.execute({"op": MORE.name, "cursor": cursor_id})
            docs.extend(more.get("result") or [])
            cursor_id = more.get("cursor")
        return {k: v for k, v in answer.items() if k != "cursor"} | {"result": docs}

    def more(self) -> bool:
        """``it``: show the next page of the last read that had more; True when it could."""
        if self._cursor is None:
            self.report(BadValueError('no cursor: nothing more to show ("it" goes on with the last find, search, '
                                      "range, list or aggregate that had more)"))
            return False
        cursor = self._cursor
        try:
            answer = self.client.execute({"op": MORE.name, "cursor": cursor["id"], "batch_size": cursor["page"]})
        except HoardError as e:
            self._cursor = None
            self.report(e)
            return False
        docs = answer.get("result") or []
        first = cursor["shown"] + 1
        cursor["shown"] += len(docs)
        if answer.get("cursor"):
            cursor["id"] = answer["cursor"]
            self._notes.append(f'-- {cursor["shown"]} shown ({first} to {cursor["shown"]} now); type "it" for more')
        else:
            self._cursor = None
            self._notes.append(f"-- {cursor['shown']} shown in all ({first} to {cursor['shown']} now); no more")
        self.show("it", {"ok": 1, "result": docs})
        return True

    def close_cursor(self) -> None:
        """Close the cursor of the last read, if it had more (the server frees it now, not at its timeout)."""
        cursor, self._cursor = self._cursor, None
        if cursor is not None:
            try:
                self.client.execute({"op": CLOSE_CURSOR.name, "cursor": cursor["id"]})
            except HoardError:
                pass  # closed already (timed out): nothing held

    def _use(self, name: str) -> dict:
        self.db = name
        self.forget_buckets()
        answer: dict[str, Any] = {"ok": 1, "result": {"db": name}}
        try:
            known = self.client.execute({"op": LIST_DATABASES.name}).get("result") or []
        except HoardError:
            known = [name]
        if name not in known:
            meant = _meant(name, known)
            if meant is not None and meant.lower() == name.lower():
                warning = f"database {name!r} does not exist; did you mean `use {meant}`? Names are case-sensitive"
            else:
                warning = (f"database {name!r} does not exist yet; "
                           + (f"did you mean `use {meant}`? " if meant else "")
                           + f"`create database {name}` or `create bucket` makes it")
            answer["warnings"] = [warning]
        return answer

    def _bucket_meant(self, err: HoardError, request: dict) -> HoardError:
        """BUCKET_NOT_FOUND with the bucket the user likely meant: ``db.users`` for ``Users``, ``db.Usres`` too."""
        name = request.get("bucket")
        if not isinstance(name, str) or request.get("op") == CREATE_BUCKET.name:
            return err
        self.forget_buckets()
        meant = _meant(name, self.bucket_names())
        if meant is None:
            return err
        if meant.lower() == name.lower():
            message = (f"bucket {name!r} does not exist in database {request.get('db')!r}; did you mean {meant!r}? "
                       "Bucket names are case-sensitive.")
        else:
            head, sep, rest = err.message.partition("; ")
            message = f"{head}; did you mean {meant!r}?" + (f" {rest}" if sep else "")
        return type(err)(message, **err.details)

    def _verbs_meant(self, err: UnknownVerbError) -> HoardError:
        """UNKNOWN_VERB listing the verbs of the bucket (or store field) it was called on, by its type."""
        bucket, field, name = err.called_on
        if not self.db or bucket not in self.bucket_names():
            return err
        info = self.bucket_info(bucket)
        store_type = info.get("type")
        owner = f"{store_type} bucket {bucket!r}"
        if field is not None:
            store_type = _field_type(info, field)
            owner = f"{store_type} store field {bucket}.{field}"
        if store_type not in operations.STORE_TYPES:
            return err
        message = unknown_verb(name, self.verbs(bucket, field), owner).message
        if "did you mean" not in message:  # a verb of another store type: say whose it is
            table = operations.VERBS if field is None else operations.FIELD_VERBS
            close = difflib.get_close_matches(name, list(table), n=1, cutoff=0.6)
            if close:
                op = table[close[0]]
                types = [t for t in operations.STORE_TYPES if t in op.types]
                whose = ", ".join(types[:-1]) + " and " + types[-1] if len(types) > 1 else types[0]
                message = message.replace("; verbs of ", f"; {close[0]} is a verb of {whose} "
                                          f"{'store fields' if field else 'buckets'}, not this one; verbs of ", 1)
        if getattr(err, "line", None):
            message = f"line {err.line}, column {err.column}: {message}"
        meant = type(err)(message)
        for attr in ("line", "column", "at_end", "called_on"):
            if hasattr(err, attr):
                setattr(meant, attr, getattr(err, attr))
        return meant

    def run_statement(self, stmt: Statement | HoardError, *, source: str | None = None) -> bool:
        """Run one parsed statement (or report its parse error) and print the answer; True when it succeeded."""
        if isinstance(stmt, HoardError):
            if isinstance(stmt, UnknownVerbError) and hasattr(stmt, "called_on"):
                try:
                    stmt = self._verbs_meant(stmt)
                except HoardError:  # the bucket could not be described: the error as the parser said it
                    pass
            self.report(stmt, source=source)
            return False
        try:
            op, answer = self.answer(stmt)
        except HoardError as e:
            self.report(e)
            return False
        except Exception as e:  # a bug: say so in the same shape, never a traceback in --json
            self.report(InternalError(f"{type(e).__name__}: {e} (please report this)"))
            return False
        self.show(op, answer)
        return True

    def run_text(self, text: str, *, continue_on_error: bool = False, show_source: bool = False) -> bool:
        """Run every statement of ``text`` in order, each parsed just before it runs.

        Stops at the first failing statement unless ``continue_on_error``, and at
        ``exit``. True when every statement that ran succeeded.
        """
        ok = True
        for part in _pages_apart(text):
            if part is None:  # `it` on a line of its own
                if not self.more():
                    ok = False
                    if not continue_on_error:
                        break
                continue
            for stmt in statements(part):
                if not self.run_statement(stmt, source=part if show_source else None):
                    ok = False
                    if not continue_on_error:
                        return ok
                if self.exited:
                    return ok
        return ok

    # -- printing

    def show(self, op: str, answer: dict) -> None:
        notes, self._notes = self._notes, []  # what the statement changed in the session besides its answer
        if self.json_mode:
            print(printer.json_line(answer), file=self.out, flush=True)
            return
        if op == "use":
            print(f"switched to database {self.db}", file=self.out)
        elif op == "help":
            print(answer["result"], file=self.out)
        elif op != "exit":
            print(printer.format_answer(op, answer), file=self.out)
        for note in notes:
            print(note, file=self.out)
        self.out.flush()  # before the warnings: on one pipe (2>&1) they follow the answer they are about
        for warning in answer.get("warnings") or []:
            print(f"warning: {warning}", file=self.err)
        self.err.flush()

    def report(self, e: HoardError, *, source: str | None = None) -> None:
        if self.json_mode:
            print(printer.json_line(printer.error_answer(e)), file=self.out, flush=True)
            return
        self.out.flush()
        print(printer.format_error(e), file=self.err)
        line, column = getattr(e, "line", None), getattr(e, "column", None)
        if source is not None and line and column:  # any error with a position: the line, a caret under it
            lines = source.split("\n")
            if line <= len(lines):
                text = lines[line - 1].rstrip("\r")
                # Tabs stay tabs under the caret, so it lines up however wide the terminal draws them.
                pad = "".join(c if c == "\t" else " " for c in text[:column - 1])
                print("  " + text, file=self.err)
                print("  " + pad + "^", file=self.err)
        self.err.flush()

    # -- what completion needs

    def forget_buckets(self) -> None:
        self._buckets, self._types = None, {}

    def bucket_names(self) -> list[str]:
        if self._buckets is None:
            try:
                self._buckets = list(self.client.execute({"op": LIST_BUCKETS.name, "db": self.db}).get("result") or []) \
                    if self.db else []
            except HoardError:
                self._buckets = []
        return [b if isinstance(b, str) else str(b.get("name")) for b in self._buckets]

    def database_names(self) -> list[str]:
        try:
            return list(self.client.execute({"op": LIST_DATABASES.name}).get("result") or [])
        except HoardError:
            return []

    def bucket_info(self, bucket: str) -> dict:
        if bucket not in self._types:
            try:
                self._types[bucket] = self.client.execute(
                    {"op": DESCRIBE_BUCKET.name, "db": self.db, "bucket": bucket}).get("result") or {}
            except HoardError:
                self._types[bucket] = {}
        return self._types[bucket]

    def verbs(self, bucket: str | None = None, field: str | None = None) -> list[str]:
        """The verbs (and their aliases) of a bucket or of one of its store fields, by its type; all when unknown."""
        store_type = None
        if bucket and self.db:
            info = self.bucket_info(bucket)
            store_type = info.get("type")
            if field is not None:
                store_type = _field_type(info, field)
        table = operations.VERBS if field is None else operations.FIELD_VERBS
        of_type = operations.verbs_for if field is None else operations.field_verbs_for
        names = set(of_type(store_type)) if store_type else set()
        if not names:
            names = {op.name for op in table.values()}
        with_aliases = set(names)
        for name in names:
            with_aliases.update(table[name].aliases)
        if bucket and field is None:
            with_aliases.update(operations.names(scope=operations.BUCKET, role="look", hql=""))  # stats
        return sorted(with_aliases)


def _field_type(info: dict, field: str) -> str | None:
    """The type of a bucket's store field, by its declared address: ``Friends``, a level deeper
    ``Friends.Messages``; None when the bucket declares no such store."""
    store_type, declared = None, info.get("store_fields") or []
    for name in field.split("."):
        found = next((f for f in declared if f.get("name") == name), None)
        if found is None:
            return None
        store_type, declared = found.get("type"), found.get("store_fields") or []
    return store_type


# ---- completion -----------------------------------------------------------------------------

_WORD = r"[\w$]*"
_REF = r"(?:\.([\w$]+)|\[[\"']([^\"']+)[\"']\])"


def completions(shell: Shell, before: str) -> tuple[str, list[str]]:
    """What to complete at the end of ``before``: the partial word, and the candidates."""
    m = re.search(rf"\bdb{_REF}\[[^\]]*\]{_REF}((?:\[[^\]]*\]\.[\w$]+)+)\.({_WORD})$", before)
    if m:  # db.User["jane"].Friends["bob"].Messages.pu: the verbs of a store a level (or more) deeper
        deeper = re.findall(r"\]\.([\w$]+)", m.group(5))
        return m.group(6), shell.verbs(m.group(1) or m.group(2), ".".join([m.group(3) or m.group(4), *deeper]))
    m = re.search(rf"\bdb{_REF}\[[^\]]*\]{_REF}\.({_WORD})$", before)
    if m:
        return m.group(5), shell.verbs(m.group(1) or m.group(2), m.group(3) or m.group(4))
    m = re.search(rf"\bdb{_REF}\.({_WORD})$", before)
    if m:
        return m.group(3), shell.verbs(m.group(1) or m.group(2))
    m = re.search(rf"\bdb\.({_WORD})$", before)
    if m:
        return m.group(1), shell.bucket_names()
    m = re.search(r"\bdb\[[\"']([^\"']*)$", before)
    if m:
        return m.group(1), shell.bucket_names()
    m = re.search(rf"\b(?:describe|drop|alter)\s+bucket\s+({_WORD})$", before, re.I)
    if m:
        return m.group(1), shell.bucket_names()
    m = re.search(rf"\buse\s+({_WORD})$", before, re.I)
    if m:
        return m.group(1), shell.database_names()
    m = re.search(rf"\bhelp\s+({_WORD})$", before, re.I)
    if m:
        return m.group(1), sorted(set(operations.VERBS) | {s.split()[0] for s, _ in STATEMENTS if s[0].isalpha()})
    m = re.search(rf"(?<![.\w$])({_WORD})$", before)
    word = m.group(1) if m else ""
    depth = sum(before.count(c) for c in "([{") - sum(before.count(c) for c in ")]}")
    if depth > 0:
        return word, sorted(["true", "false", "null"] + [c.name for c in literals.CONSTRUCTORS.values()])
    # The keywords the grammar takes here: `bucket` after describe, a statement's first word at the start.
    return word, next_keywords(before[:len(before) - len(word)])


def _meant(name: str, known) -> str | None:
    """The name of ``known`` that ``name`` likely meant: the same but for case, else a close spelling."""
    known = [k for k in known if isinstance(k, str)]
    same = [k for k in known if k.lower() == name.lower()]
    if same:
        return same[0]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return close[0] if close else None


def _completer(shell: Shell):
    from prompt_toolkit.completion import Completer, Completion

    class HQLCompleter(Completer):
        """Completes keywords, database and bucket names, and the verbs a bucket's type serves."""

        def get_completions(self, document, complete_event):
            try:
                word, candidates = completions(shell, document.text_before_cursor)
            except Exception:  # completion must never break the prompt
                return
            for c in candidates:
                if c.lower().startswith(word.lower()) and c != word:
                    yield Completion(c, start_position=-len(word))

    return HQLCompleter()


# ---- the interactive loop -------------------------------------------------------------------

def interactive(shell: Shell, *, history: Path | None = None, input=None, output=None,
                where: str | None = None) -> None:
    """Read statements at a prompt until exit or Ctrl-D; errors are shown and the session goes on.

    The prompt is drawn on standard output, or on standard error when only that is a
    terminal (``hoardDB --data d > out.txt`` keeps out.txt free of prompts and escape codes).
    ``input`` and ``output`` are prompt_toolkit's, for tests. Ctrl-C clears the input; during a
    statement it stops the shell's wait for the answer, and the session goes on. ``where`` is a
    line for the banner saying where the shell is (the server, its version, the user).
    """
    from prompt_toolkit import PromptSession, search
    from prompt_toolkit.filters import is_searching
    from prompt_toolkit.history import FileHistory, InMemoryHistory
    from prompt_toolkit.key_binding import KeyBindings
    from prompt_toolkit.output.defaults import create_output

    keys = KeyBindings()

    def enter(buffer):
        if buffer.complete_state and buffer.complete_state.current_completion:
            buffer.apply_completion(buffer.complete_state.current_completion)
            return
        if is_complete(buffer.text) or _IT.fullmatch(buffer.text.strip()):
            buffer.validate_and_handle()
        else:
            buffer.insert_text("\n")

    @keys.add("enter", filter=~is_searching)
    def _enter(event):
        enter(event.current_buffer)

    @keys.add("enter", filter=is_searching)
    def _enter_after_search(event):
        # Ctrl-R found a statement: Enter keeps it and runs it, as readline does (Esc only keeps it).
        search.accept_search()
        enter(event.app.current_buffer)

    try:  # what was typed can be private: the history file is the user's alone (0600)
        store = FileHistory(str(private_file(history or history_path())))
    except OSError:
        store = InMemoryHistory()
    if output is None:
        output = create_output(always_prefer_tty=True)
    session = PromptSession(history=store, completer=_completer(shell), multiline=True, key_bindings=keys,
                            complete_while_typing=False, input=input, output=output,
                            prompt_continuation=lambda width, line, soft: "." * (width - 1) + " ")
    banner = shell.out if _isatty(shell.out) or not _isatty(shell.err) else shell.err
    print("hoardDB shell — `help` lists statements and verbs; Ctrl-D leaves.", file=banner, flush=True)
    if where:  # where the shell is: the server's address and version, the user, the database
        print(where, file=banner, flush=True)
    # prompt_toolkit answers an exception in a background task of the prompt (loading the
    # history, say) by printing it and waiting for Enter: right at a terminal, a hang for
    # ever on input that is not one (a pipe that has ended). There, the exception is only logged.
    at_terminal = _isatty(sys.stdin) if input is None else False
    while not shell.exited:
        try:
            text = session.prompt(shell.prompt(), set_exception_handler=at_terminal)
        except KeyboardInterrupt:
            continue
        except EOFError:
            break
        try:
            shell.run_text(text, continue_on_error=True, show_source=True)
        except KeyboardInterrupt:
            print("interrupted: the shell stopped waiting; the statement may or may not have run", file=shell.err,
                  flush=True)


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def is_terminal_session(stdin=None, stdout=None, stderr=None) -> bool:
    """Whether the shell should prompt: standard input is a terminal, and so is stdout or stderr to draw on."""
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    return stdin is not None and _isatty(stdin) and (_isatty(stdout) or _isatty(stderr))


#: Documents the shell shows of a read at a time; ``it`` shows the next ones (mongosh's 20).
PAGE = 20
_IT = re.compile(r"^[ \t]*it[ \t]*;?[ \t]*$", re.MULTILINE)


def _pages_apart(text: str):
    """The HQL of ``text`` between its lines that are ``it`` alone (None for each of those)."""
    at = 0
    for m in _IT.finditer(text):
        if text[at:m.start()].strip():
            yield text[at:m.start()]
        yield None
        at = m.end()
    if text[at:].strip() or at == 0:
        yield text[at:]


# ---- a whole run ----------------------------------------------------------------------------

def run_script(client, text: str, *, json_mode: bool = False, continue_on_error: bool = False,
               out: IO[str] | None = None, err: IO[str] | None = None, db: str | None = None) -> int:
    """Run a script on ``client`` as ``hoarddb shell`` does; its exit status (0 when every statement succeeded)."""
    shell = Shell(client, json_mode=json_mode, out=out, err=err, db=db)
    return 0 if shell.run_text(text, continue_on_error=continue_on_error) else 1
