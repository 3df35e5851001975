"""The users of a server: SCRAM credentials and roles, kept in one BSON file in the data directory.

    DATA/_users/users.bson     {format: 1, secret: <16 bytes>, users: [
                                   {name, roles: [{role, db?}], credentials: {mechanism,
                                    salt, iterations, stored_key, server_key}, created}, ...]}
    DATA/_users/LOCK           flock held while the file is rewritten

No password and no plain hash of one is stored: only the salted, iterated SCRAM keys
(:func:`hoarddb.wire.scram.make_credentials`). The file is rewritten whole through a
temporary file, fsynced and renamed, so a crash leaves the old or the new file, never a
mix. The ``hoarddb user`` commands may run while the server runs: the server looks at
the file every quarter of a second and applies a change to the connections already
open too (``Server.users_changed``). (``_users`` cannot clash with a database: those begin with a letter.)

The file has no checksum. What reads it checks its shape instead: a file that is not
BSON, or a record with a field missing or of the wrong type, is CorruptDataError naming
the file, when it is read (so a server refuses to start on it), never a failure at login.
A changed byte inside a salt, a key or a name still reads as a valid record.
"""

from __future__ import annotations

import base64
import collections
import datetime
import fcntl
import hmac
import hashlib
import logging
import os
import re
import threading
from contextlib import contextmanager
from pathlib import Path

from ..errors import BadValueError, CorruptDataError, HoardError, InvalidNameError, NotFoundError, UnknownOptionError
from ..storage.oserrors import fsync_directory, storage_error
from ..values.codec import DECODE_ERRORS, decode, encode
from ..wire import scram

USERS_DIR = "_users"
USERS_FILE = "users.bson"
FORMAT = 1

#: Roles per database, and the one cluster-wide role.
DB_ROLES = ("read", "readWrite", "dbAdmin")
CLUSTER_ROLES = ("admin",)
USER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")

log = logging.getLogger("hoarddb.server")


def parse_role(text) -> dict:
    """``"admin"`` or ``"readWrite:app"`` (or the document ``{role, db}``) as ``{role, db?}``."""
    if isinstance(text, dict):
        role, db = text.get("role"), text.get("db")
    else:
        role, _, db = str(text).partition(":")
        db = db or None
    if role in CLUSTER_ROLES:
        if db:
            raise BadValueError(f"role {role!r} is cluster-wide; give it without a database")
        return {"role": role}
    if role in DB_ROLES:
        if not db:
            raise BadValueError(f"role {role!r} belongs to one database: write it {role}:DB, such as {role}:app")
        return {"role": role, "db": db}
    raise UnknownOptionError(
        f"unknown role {role!r}; roles: admin, and per database read:DB, readWrite:DB, dbAdmin:DB")


def format_role(role: dict) -> str:
    return role["role"] + (f":{role['db']}" if role.get("db") else "")


#: Characters a new password has at least, unless told otherwise (``min_password_length``).
MIN_PASSWORD_LENGTH = 8


def min_password_length(environ=os.environ) -> int:
    """The minimum length of a new password: HOARDDB_MIN_PASSWORD_LENGTH, else MIN_PASSWORD_LENGTH."""
    raw = environ.get("HOARDDB_MIN_PASSWORD_LENGTH", "").strip()
    if not raw:
        return MIN_PASSWORD_LENGTH
    if not raw.isdigit():
        raise BadValueError(f"HOARDDB_MIN_PASSWORD_LENGTH must be a whole number of characters ≥ 0, got {raw!r}")
    return int(raw)


def check_password(password: str, minimum: int = MIN_PASSWORD_LENGTH) -> str:
    """The password, if it has at least ``minimum`` characters; BadValueError saying why otherwise."""
    if len(password) < minimum:
        raise BadValueError(
            f"the password has {len(password)} characters, fewer than the {minimum} required: a short password "
            "is guessed quickly by anyone who can try logins. Choose a longer one (a few words make a good one); "
            "HOARDDB_MIN_PASSWORD_LENGTH (min_password_length) sets the minimum")
    return password


def check_user_name(name) -> str:
    if not isinstance(name, str) or not USER_RE.match(name):
        raise InvalidNameError(
            f"invalid user name {name!r}: 1 to 64 characters, a letter or digit first, then letters, digits, _ . @ -")
    return name


class UserStore:
    """UserStore is ``DATA/_users/users.bson``: read on demand, cached until the file changes."""

    def __init__(self, data_dir):
        self.directory = Path(data_dir) / USERS_DIR
        self.path = self.directory / USERS_FILE
        self._cache: dict | None = None
        self._stamp = None
        self._damage: tuple | None = None  # (stamp, message) of a file found damaged
        self._mutex = threading.Lock()

    # -- reading

    def _load(self) -> dict:
        """The file's document, checked (CorruptDataError when it is damaged)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return {"format": FORMAT, "secret": b"", "users": []}
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        with self._mutex:
            if self._damage is not None and self._damage[0] == stamp:
                raise CorruptDataError(self._damage[1])  # a new one: raising the same would grow its traceback
            if self._cache is None or stamp != self._stamp:
                try:
                    doc = read_users_file(self.path)
                except CorruptDataError as exc:
                    if self._cache is not None:  # it read before: damaged under a running server
                        log.error("every login is refused until the users file is repaired: %s", exc.message)
                    self._cache, self._stamp, self._damage = None, None, (stamp, exc.message)
                    raise
                self._cache, self._stamp, self._damage = doc, stamp, None
            return self._cache

    def users(self) -> list[dict]:
        """Every user record, sorted by name."""
        return sorted(self._load().get("users", []), key=lambda u: u["name"])

    def get(self, name: str) -> dict | None:
        for user in self._load().get("users", []):
            if user["name"] == name:
                return user
        return None

    def decoy(self, name: str) -> dict:
        """Credentials for an unknown user that look like a real user's and never match."""
        doc = self._load()
        secret = bytes(doc.get("secret") or b"") or _PROCESS_SECRET
        salt = hmac.new(secret, b"salt:" + name.encode("utf-8", "replace"), hashlib.sha256).digest()[:scram.SALT_BYTES]
        # the iteration count the real users have (the commonest), so that it does not tell an
        # unknown name from a known one
        counts = collections.Counter(u["credentials"]["iterations"] for u in doc.get("users", []))
        iterations = counts.most_common(1)[0][0] if counts else scram.DEFAULT_ITERATIONS
        return {"mechanism": scram.MECHANISM, "salt": salt, "iterations": iterations,
                "stored_key": os.urandom(32), "server_key": os.urandom(32)}

    # -- writing (each change is a read-modify-write under the file lock)

    def add(self, name: str, password: str, roles: list, *, iterations: int = scram.DEFAULT_ITERATIONS) -> dict:
        """Add a user; BadValueError when the name is taken."""
        return self.add_credentials(name, scram.make_credentials(password, iterations), roles)

    def add_credentials(self, name: str, credentials: dict, roles: list) -> dict:
        check_user_name(name)
        roles = [parse_role(r) for r in roles]
        credentials = _check_credentials(credentials)
        with self._locked() as doc:
            if any(u["name"] == name for u in doc["users"]):
                raise _exists(name)
            record = {"name": name, "roles": roles, "credentials": credentials,
                      "created": datetime.datetime.now(datetime.timezone.utc)}
            doc["users"].append(record)
        return _public(record)

    def require_absent(self, name: str) -> None:
        """BadValueError, saying how to change it, if a user of that name exists (reads the file:
        CorruptDataError if it is damaged)."""
        if self.get(name) is not None:
            raise _exists(name)

    def update(self, name: str, *, credentials: dict | None = None, roles: list | None = None) -> dict:
        """Change a user's credentials and/or roles; NotFoundError for an unknown user."""
        if credentials is not None:
            credentials = _check_credentials(credentials)
        if roles is not None:
            roles = [parse_role(r) for r in roles]
        with self._locked() as doc:
            record = _find(doc, name)
            if credentials is not None:
                record["credentials"] = credentials
            if roles is not None:
                record["roles"] = roles
        return _public(record)

    def set_password(self, name: str, password: str, *, iterations: int = scram.DEFAULT_ITERATIONS) -> dict:
        return self.update(name, credentials=scram.make_credentials(password, iterations))

    def set_roles(self, name: str, roles: list) -> dict:
        """Replace a user's roles (an empty list leaves it none); NotFoundError for an unknown user."""
        return self.update(check_user_name(name), roles=list(roles))

    def remove(self, name: str) -> dict:
        with self._locked() as doc:
            record = _find(doc, name)
            doc["users"].remove(record)
        return {"removed": name}

    # -- a cluster's users (hoarddb/cluster/users.py): etcd holds them, this file mirrors them

    @staticmethod
    def to_portable(record: dict) -> dict:
        """A record as JSON holds it (:func:`to_portable`; the cluster, below the server, reaches it here)."""
        return to_portable(record)

    @staticmethod
    def from_portable(data: dict) -> dict:
        """The record :func:`to_portable` made, checked (:func:`from_portable`)."""
        return from_portable(data)

    def mirror(self, changes: dict) -> bool:
        """Set each user of ``changes`` (``{name: record}``, a record None to remove it) as given,
        without the checks a new user gets (the records come from the cluster, checked where they
        were made). Whether the file changed."""
        changed = False
        with self._locked() as doc:
            by_name = {u["name"]: u for u in doc["users"]}
            for name, record in changes.items():
                if record is None:
                    changed |= by_name.pop(name, None) is not None
                elif by_name.get(name) != record:
                    by_name[name] = record
                    changed = True
            doc["users"] = sorted(by_name.values(), key=lambda u: u["name"])
            if not changed:
                raise _Unchanged
        return changed

    @contextmanager
    def _locked(self):
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / "LOCK", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            doc = read_users_file(self.path) if self.path.exists() else {"format": FORMAT, "users": []}
            if not doc.get("secret"):
                doc["secret"] = os.urandom(16)
            try:
                yield doc
            except _Unchanged:
                return
            _write_atomically(self.path, encode(doc))
            with self._mutex:
                self._cache = None
        finally:
            os.close(fd)


_PROCESS_SECRET = os.urandom(16)


class _Unchanged(Exception):
    """Raised inside ``_locked`` to leave the file as it is."""


_PORTABLE_BYTES = ("salt", "stored_key", "server_key")


def to_portable(record: dict) -> dict:
    """A user record as JSON can hold it (a cluster keeps it in etcd): its keys in base64, its date in ISO 8601."""
    c = record["credentials"]
    return {"name": record["name"], "roles": [dict(r) for r in record["roles"]],
            "credentials": {**c, **{k: base64.b64encode(bytes(c[k])).decode() for k in _PORTABLE_BYTES}},
            "created": record["created"].astimezone(datetime.timezone.utc).isoformat()}


def from_portable(data: dict) -> dict:
    """The record :func:`to_portable` made, checked as a users file's record (CorruptDataError if it is not one)."""
    try:
        c = data["credentials"]
        record = {"name": data["name"], "roles": list(data["roles"]),
                  "credentials": {**c, **{k: base64.b64decode(c[k]) for k in _PORTABLE_BYTES}},
                  "created": datetime.datetime.fromisoformat(data["created"])}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CorruptDataError(f"a user record of the cluster is damaged ({type(exc).__name__}: {exc})") from None
    problem = _shape_problem({"format": FORMAT, "secret": b"x", "users": [record]})
    if problem:
        raise CorruptDataError(f"a user record of the cluster is damaged: {problem}")
    return record


def _exists(name: str) -> BadValueError:
    return BadValueError(f"user {name!r} exists already; set its password with `hoarddb user passwd {name}`, "
                         f"its roles with `hoarddb user role {name} ROLE...`")


def _find(doc: dict, name: str) -> dict:
    for user in doc["users"]:
        if user["name"] == name:
            return user
    raise NotFoundError(f"no user {name!r}; `hoarddb user list` shows the users")


def _public(record: dict) -> dict:
    return {"name": record["name"], "roles": [format_role(r) for r in record["roles"]]}


def _check_credentials(c) -> dict:
    if not isinstance(c, dict) or c.get("mechanism") != scram.MECHANISM:
        raise BadValueError(f"credentials must be {scram.MECHANISM} keys: {{mechanism, salt, iterations, "
                            "stored_key, server_key}} (hoarddb.wire.scram.make_credentials makes them)")
    salt, stored, server, iterations = c.get("salt"), c.get("stored_key"), c.get("server_key"), c.get("iterations")
    if not (isinstance(salt, bytes) and len(salt) >= 8 and isinstance(stored, bytes) and len(stored) == 32
            and isinstance(server, bytes) and len(server) == 32 and isinstance(iterations, int)
            and iterations >= scram.MIN_ITERATIONS):
        raise BadValueError("credentials: salt ≥ 8 bytes, stored_key and server_key 32 bytes, "
                            f"iterations ≥ {scram.MIN_ITERATIONS}")
    return {"mechanism": scram.MECHANISM, "salt": salt, "iterations": iterations,
            "stored_key": stored, "server_key": server}


def read_users_file(path: Path) -> dict:
    """The document of a users file, its shape checked: CorruptDataError naming the file and
    what is wrong when it is not BSON or a record lacks a field (or has one of the wrong type)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise storage_error(f"reading {path}", exc, "nothing was changed") from None
    try:
        doc = decode(data)
    except DECODE_ERRORS as exc:
        raise _damaged(path, f"it does not read as BSON ({len(data)} bytes; {type(exc).__name__}: {exc})") from None
    problem = _shape_problem(doc)
    if problem:
        raise _damaged(path, problem)
    return doc


def _damaged(path: Path, what: str) -> CorruptDataError:
    return CorruptDataError(
        f"the users file {path} is damaged: {what}. Nothing was changed. Restore it from a backup, or move "
        f"it aside and add the users again with `hoarddb user add NAME --role ROLE --data {path.parent.parent}`")


def _shape_problem(doc: dict) -> str | None:
    """What is wrong with the shape of a users file's document; None when nothing is."""
    if doc.get("format") != FORMAT:
        return f"its format is {doc.get('format')!r:.40}, not {FORMAT}"
    if not isinstance(doc.get("secret"), bytes) or not doc["secret"]:
        return "its 'secret' is missing or not bytes"
    users = doc.get("users")
    if not isinstance(users, list):
        return "its 'users' is missing or not a list"
    names = set()
    for i, record in enumerate(users):
        where = f"user {i + 1} of {len(users)}"
        if not isinstance(record, dict):
            return f"{where} is not a document"
        name = record.get("name")
        if not isinstance(name, str) or not USER_RE.match(name):
            return f"{where} has no valid 'name' (it has {name!r:.40})"
        where += f" ({name})"
        if name in names:
            return f"{where}: two users have this name"
        names.add(name)
        roles = record.get("roles")
        if not isinstance(roles, list):
            return f"{where}: 'roles' is missing or not a list"
        for role in roles:
            if not _is_role(role):
                return f"{where}: {role!r:.60} is not a role"
        if not _are_credentials(record.get("credentials")):
            return (f"{where}: its 'credentials' are not {scram.MECHANISM} keys (mechanism, a salt of 8 bytes or "
                    f"more, iterations ≥ {scram.MIN_ITERATIONS}, stored_key and server_key of 32 bytes)")
        if not isinstance(record.get("created"), datetime.datetime):
            return f"{where}: 'created' is missing or not a date"
    return None


def _is_role(role) -> bool:
    """Whether a stored role is one :func:`parse_role` made."""
    if not isinstance(role, dict) or not isinstance(role.get("db", ""), str):
        return False
    try:
        return parse_role(role) == role
    except HoardError:
        return False


def _are_credentials(c) -> bool:
    """Whether stored credentials are the keys :func:`_check_credentials` lets in."""
    try:
        return _check_credentials(c) == c
    except HoardError:
        return False


def _write_atomically(path: Path, data: bytes) -> None:
    temp = path.with_name(path.name + ".tmp")
    with open(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.rename(temp, path)
    fsync_directory(path.parent)
