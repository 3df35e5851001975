"""The users of a server: SCRAM credentials and roles, kept in one BSON file in the data directory.

    DATA/_users/users.bson     {format: 1, secret: <16 bytes>, users: [
                                   {name, roles: [{role, db?}], credentials: {mechanism,
                                    salt, iterations, stored_key, server_key}, created}, ...]}
    DATA/_users/LOCK           flock held while the file is rewritten

No password and no plain hash of one is stored: only the salted, iterated SCRAM keys
(:func:`hoarddb.wire.scram.make_credentials`). The file is rewritten whole through a
temporary file, fsynced and renamed, so a crash leaves the old or the new file, never a
mix. ``hoarddb user add`` may run while the server runs: the server rereads the file
when it changes. (``_users`` cannot clash with a database: those begin with a letter.)
"""

from __future__ import annotations

import collections
import datetime
import fcntl
import hmac
import hashlib
import os
import re
import threading
from contextlib import contextmanager
from pathlib import Path

from ..errors import BadValueError, InvalidNameError, NotFoundError, UnknownOptionError
from ..storage.oserrors import fsync_directory
from ..values.codec import decode, encode
from ..wire import scram

USERS_DIR = "_users"
USERS_FILE = "users.bson"
FORMAT = 1

#: Roles per database, and the one cluster-wide role.
DB_ROLES = ("read", "readWrite", "dbAdmin")
CLUSTER_ROLES = ("admin",)
USER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


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
        self._mutex = threading.Lock()

    # -- reading

    def _load(self) -> dict:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return {"format": FORMAT, "secret": b"", "users": []}
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        with self._mutex:
            if self._cache is None or stamp != self._stamp:
                self._cache = decode(self.path.read_bytes())
                self._stamp = stamp
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
                raise BadValueError(f"user {name!r} exists already; change it with `hoarddb user passwd`, "
                                    "or remove it first")
            record = {"name": name, "roles": roles, "credentials": credentials,
                      "created": datetime.datetime.now(datetime.timezone.utc)}
            doc["users"].append(record)
        return _public(record)

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

    def remove(self, name: str) -> dict:
        with self._locked() as doc:
            record = _find(doc, name)
            doc["users"].remove(record)
        return {"removed": name}

    @contextmanager
    def _locked(self):
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / "LOCK", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            doc = decode(self.path.read_bytes()) if self.path.exists() else {"format": FORMAT, "users": []}
            if not doc.get("secret"):
                doc["secret"] = os.urandom(16)
            yield doc
            _write_atomically(self.path, encode(doc))
            with self._mutex:
                self._cache = None
        finally:
            os.close(fd)


_PROCESS_SECRET = os.urandom(16)


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


def _write_atomically(path: Path, data: bytes) -> None:
    temp = path.with_name(path.name + ".tmp")
    with open(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.rename(temp, path)
    fsync_directory(path.parent)
