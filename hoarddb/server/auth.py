"""Who may do what: roles, the permission each operation needs, and the server's authenticator.

Roles, per database or cluster-wide:

    role            on        allows
    read            one db    verbs that read (Operation.write is False), list_buckets,
                              describe_bucket, stats
    readWrite       one db    read, and verbs that write
    dbAdmin         one db    create/drop/alter bucket, create/drop database, describe,
                              stats, list_buckets (not the documents themselves)
    admin           all       everything, including users, metrics and sweep_ttl

Read or write comes from the operations table (:mod:`hoarddb.operations`), so a new
verb is protected the day it is declared. An operation this module does not know
needs ``admin``: nothing reaches the engine unclassified.
"""

from __future__ import annotations

from typing import Any

from .. import operations
from ..errors import UnauthorizedError
from ..wire.protocol import Principal
from .logins import LoginLimiter
from .users import UserStore, format_role

#: Catalog operations that change a database's buckets: dbAdmin on that database.
DB_ADMIN_OPS = operations.names(role="dbAdmin")
#: Catalog operations that only look: any role on that database.
DB_LOOK_OPS = operations.names(role="look")
#: Operations any authenticated user may run (list_databases shows only their databases).
ANY_USER_OPS = operations.names(role="any")
#: Server operations on users: admin only.
USER_OPS = operations.names(runs=operations.SERVER, role="admin")


def is_admin(principal: Principal) -> bool:
    return principal.admin


def roles_on(principal: Principal, db: Any) -> set[str]:
    """The roles a principal holds on one database ('admin' counts as all of them)."""
    if is_admin(principal):
        return {"read", "readWrite", "dbAdmin"}
    return {r["role"] for r in principal.roles if r.get("db") == db}


def needed(request: dict) -> tuple[str, Any]:
    """What a request needs: ``("read"|"readWrite"|"dbAdmin", db)``, ``("any", None)`` or ``("admin", None)``."""
    op = request.get("op")
    db = request.get("db")
    verb = operations.VERBS.get(op)
    if verb is not None:
        return ("readWrite" if verb.write else "read"), db
    if op in DB_ADMIN_OPS:
        return "dbAdmin", db
    if op in DB_LOOK_OPS:
        return "look", db
    if op in ANY_USER_OPS:
        return "any", None
    return "admin", None


def authorize(principal: Principal, request: dict) -> None:
    """Return if the principal may run the request; else UnauthorizedError saying what is missing."""
    if is_admin(principal):
        return
    need, db = needed(request)
    have = roles_on(principal, db)
    if need == "any":
        return
    if need == "read" and have & {"read", "readWrite"}:
        return
    if need == "readWrite" and "readWrite" in have:
        return
    if need == "dbAdmin" and "dbAdmin" in have:
        return
    if need == "look" and have:
        return
    op = request.get("op")
    wanted = {"read": "read or readWrite", "readWrite": "readWrite", "dbAdmin": "dbAdmin",
              "look": "a role", "admin": "the admin role"}[need]
    where = f" on database {db!r}" if need != "admin" else ""
    held = ", ".join(format_role(r) for r in principal.roles) or "no roles"
    raise UnauthorizedError(
        f"user {principal.user!r} may not run {op!r:.40}{where}: it needs {wanted}{where} and has {held}; "
        f"an admin sets a user's roles with `hoarddb user role {principal.user} ROLE...` (or the set_roles "
        "operation)", user=principal.user, op=str(op)[:40])


def visible_databases(principal: Principal, names: list) -> list:
    """The databases a principal may see in list_databases."""
    if is_admin(principal):
        return names
    mine = {r.get("db") for r in principal.roles}
    return [n for n in names if n in mine]


class Authenticator:
    """Authenticator is what :class:`hoarddb.wire.ServerProtocol` asks about users, and
    whether a login may be tried at all (the ``limiter``'s lockouts)."""

    def __init__(self, users: UserStore, limiter: LoginLimiter | None = None):
        self.users = users
        self.limiter = limiter if limiter is not None else LoginLimiter()

    def refusal(self, name: str, address: str) -> tuple[str, str] | None:
        """``(reason, message)`` when a login to ``name`` from ``address`` is locked out now."""
        return self.limiter.refusal(name, address)

    def lookup(self, name: str) -> dict | None:
        record = self.users.get(name)
        return record["credentials"] if record is not None else None

    def decoy(self, name: str) -> dict:
        return self.users.decoy(name)

    def principal(self, name: str) -> Principal:
        """Who ``name`` is now: its roles, and the stored key of its password of now (None
        if it was removed meanwhile)."""
        record = self.users.get(name)
        if record is None:
            return Principal(name, [])
        return Principal(name, list(record["roles"]), bytes(record["credentials"]["stored_key"]))
