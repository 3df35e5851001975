"""The planner: which index serves a search, why the others lost, and the refusal of a not-ready index.

An index serves a search when its first fields are fixed by equality in the filter (a
prefix, in declaration order). Among those, the one covering more fields wins, then a
unique one, then the one declared first — so the choice is the same every time. Nothing
fits: a full scan. Either way every predicate is checked on every document fetched, so
``search`` returns what ``find`` returns.
"""

from __future__ import annotations

import re

from dataclasses import dataclass, field
from typing import Any

from bson.regex import Regex

from ..errors import IndexNotReadyError
from ..values.filter import equality_fields
from ..values.keys import encode_key
from ..values.literal import literal
from .maintenance import Index

FULL_SCAN = "none — full scan"


@dataclass
class Plan:
    """Plan is the chosen index (or None for a full scan), the prefix to read, and the explanation."""

    index: Index | None
    prefix: bytes = b""
    covered: int = 0
    considered: list = field(default_factory=list)

    @property
    def index_used(self) -> str:
        return self.index.name if self.index else FULL_SCAN


def plan(filter: dict, indexes: list[Index]) -> Plan:
    """The plan for ``search(filter)`` (a filter compile_filter accepted); raises
    IndexNotReadyError if the winner cannot serve."""
    if not indexes:
        return Plan(None)
    pinned = {k: v for k, v in equality_fields(filter, check=False).items() if not _is_pattern(v)}
    candidates = []
    considered = []
    for position, ix in enumerate(indexes):
        covered = 0
        while covered < len(ix.fields) and ix.fields[covered] in pinned:
            covered += 1
        if covered == 0:
            considered.append({"index": ix.name, "covered": 0,
                               "reason": f"its first field {ix.fields[0]!r} is not fixed by equality in the filter"})
            continue
        candidates.append((covered, ix.unique, -position, ix))
    if not candidates:
        return Plan(None, considered=considered)
    candidates.sort(key=lambda c: c[:3], reverse=True)
    covered, _, _, best = candidates[0]
    for c_covered, c_unique, _, ix in candidates[1:]:
        if c_covered < covered:
            why = f"covers {c_covered} field(s) of the filter; {best.name!r} covers {covered}"
        elif best.unique and not c_unique:
            why = f"covers as many fields as {best.name!r}, which is unique and this one is not"
        else:
            why = f"ties with {best.name!r}, which was declared first"
        considered.append({"index": ix.name, "covered": c_covered, "reason": why})
    considered.insert(0, {"index": best.name, "covered": covered, "reason": "chosen"})
    if best.state != "ready":
        raise not_ready(best)
    prefix = best.prefix + b"".join(encode_key(pinned[f]) for f in best.fields[:covered])
    return Plan(best, prefix=prefix, covered=covered, considered=considered)


def not_ready(ix: Index) -> IndexNotReadyError:
    """The refusal of a search on an index that is not ready, with its reason and what to do."""
    if ix.state == "building":
        why = ("it is being rebuilt from the documents after an upgrade (once, while the database opens); "
               "retry, or use find")
    elif ix.state == "conflicted":
        conflict = ix.decl.get("conflict") or {}
        docs = " and ".join(literal(d) for d in conflict.get("documents", []))
        values = ", ".join(f"{k} = {literal(v)}" for k, v in (conflict.get("values") or {}).items())
        why = (f"it is conflicted: documents {docs} both hold {values}. Nothing was deleted or chosen for you: "
               "change or delete one of them, then reopen the database; the index is rebuilt and becomes ready")
    else:
        why = ("it was declared by a newer version of hoardDB, and this version cannot keep its rules; "
               "it is kept unchanged. Use find, or run the newer version")
    return IndexNotReadyError(f"index {ix.name!r} cannot serve this search: {why}", index=ix.name, state=ix.state)


def _is_pattern(value: Any) -> bool:
    return isinstance(value, (Regex, re.Pattern))
