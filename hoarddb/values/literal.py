"""One value written as a user would type it in HQL, for messages: "u1", 30, null, ISODate("...")."""

from __future__ import annotations

import datetime
import uuid

from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.objectid import ObjectId


def literal(value) -> str:
    """The HQL literal text of a value (short, for error messages)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, Int64):
        return f"int64({int(value)})"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        text = value.astimezone(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return f'ISODate("{text}")'
    if isinstance(value, ObjectId):
        return f'ObjectId("{value}")'
    if isinstance(value, Decimal128):
        return f'Decimal128("{value}")'
    if isinstance(value, uuid.UUID):
        return f'UUID("{value}")'
    if isinstance(value, list):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {literal(v)}" for k, v in value.items()) + "}"
    return repr(value)
