"""Answers as text: values in HQL's literal syntax, answers as readable lines or one JSON line.

Readable output is for people: a document prints as ``{Author: "Bob", Text: "Nice photo!"}``,
the way it is typed, so it can be pasted back into the shell (:func:`format_value` and
``parser.parse_value`` round-trip every BSON value, except bytes longer than
``BYTES_SHOWN``, which print as a summary). ``describe bucket`` and ``stats`` print as
labelled lines. The ``--json`` output is for programs: :func:`json_line` writes one line
of MongoDB relaxed Extended JSON per statement, whose shape docs/user/shell.md promises.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import math
import re
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from bson import json_util
from bson.binary import Binary, UuidRepresentation
from bson.code import Code
from bson.dbref import DBRef
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.json_util import JSONMode, JSONOptions
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp

from ..errors import HoardError
from ..values.literal import format_key, quote
from .literals import INT64_MAX, INT64_MIN

#: Bytes up to this many print in full as BinData(0, "..."); longer ones as a summary.
BYTES_SHOWN = 1024

#: Readable output breaks a document over lines when it is wider than this.
WIDTH = 100

#: How --json writes values: relaxed Extended JSON, UUIDs as standard binary, dates in UTC.
JSON_OPTIONS = JSONOptions(json_mode=JSONMode.RELAXED, uuid_representation=UuidRepresentation.STANDARD,
                           tz_aware=True, tzinfo=datetime.timezone.utc)


# ---- values ----------------------------------------------------------------------------

def format_date(value: datetime.datetime) -> str:
    """``ISODate("2026-09-29T10:00:00Z")``, with milliseconds (or microseconds) only when present."""
    if value.tzinfo is not None:
        value = value.astimezone(datetime.timezone.utc)
    text = value.strftime("%Y-%m-%dT%H:%M:%S")
    if value.microsecond % 1000:
        text += f".{value.microsecond:06d}"
    elif value.microsecond:
        text += f".{value.microsecond // 1000:03d}"
    if value.year < 1000:
        text = f"{value.year:04d}" + text[text.index("-"):]
    return f'ISODate("{text}Z")'


def format_float(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)  # always has a '.' or an exponent, so it reads back as a float


def _bytes(data: bytes, subtype: int, bytes_shown: int | None) -> str:
    if bytes_shown is not None and len(data) > bytes_shown:
        return f"BinData({subtype}, <{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}>)"
    return f'BinData({subtype}, "{base64.b64encode(data).decode()}")'


def _scalar(value: Any, bytes_shown: int | None) -> str | None:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, Int64):
        return f"int64({int(value)})"
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            return f'Decimal128("{value}")'
        return str(value)
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, Code):  # a str subclass: before str, or it prints as a plain string
        if value.scope is None:
            return f"Code({quote(str(value))})"
        return f"Code({quote(str(value))}, {format_value(value.scope, width=None, bytes_shown=bytes_shown)})"
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, datetime.datetime):
        return format_date(value)
    if isinstance(value, Binary):
        return _bytes(bytes(value), value.subtype, bytes_shown)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _bytes(bytes(value), 0, bytes_shown)
    if isinstance(value, uuid.UUID):
        return f'UUID("{value}")'
    if isinstance(value, ObjectId):
        return f'ObjectId("{value}")'
    if isinstance(value, Decimal128):
        return f'Decimal128("{value}")'
    if isinstance(value, Timestamp):
        return f"Timestamp({value.time}, {value.inc})"
    if isinstance(value, re.Pattern):
        value = Regex.from_native(value)
    if isinstance(value, Regex):
        return f"Regex({quote(value.pattern)}, {quote(_regex_flags(value.flags))})"
    if isinstance(value, MinKey):
        return "MinKey()"
    if isinstance(value, MaxKey):
        return "MaxKey()"
    if isinstance(value, datetime.date):
        return format_date(datetime.datetime(value.year, value.month, value.day, tzinfo=datetime.timezone.utc))
    return None


def _regex_flags(flags: Any) -> str:
    if isinstance(flags, str):
        return flags
    letters = {re.I: "i", re.L: "l", re.M: "m", re.S: "s", re.U: "u", re.X: "x"}
    return "".join(ch for bit, ch in letters.items() if flags & bit)


def format_value(value: Any, *, width: int | None = WIDTH, indent: int = 0, bytes_shown: int | None = None) -> str:
    """``value`` in HQL literal syntax, such as ``{Author: "Bob", At: ISODate("...")}``.

    A document or list wider than ``width`` is broken over lines, two spaces per level
    (``width=None`` keeps everything on one line). Bytes longer than ``bytes_shown``
    print as a summary, which does not read back; ``None`` prints all bytes.
    """
    text = _scalar(value, bytes_shown)
    if text is not None:
        return text
    if isinstance(value, DBRef):  # BSON reads {$ref, $id} back as a DBRef: print the document it is
        value = value.as_doc()
    if isinstance(value, Mapping):
        items = [(format_key(k), v) for k, v in value.items()]
        open_, close = "{", "}"
    elif isinstance(value, (list, tuple)):
        items = [(None, v) for v in value]
        open_, close = "[", "]"
    else:
        return f"<{type(value).__name__} {value!r}>"
    if not items:
        return open_ + close

    def one(key, v, **kw):
        shown = format_value(v, bytes_shown=bytes_shown, **kw)
        return shown if key is None else f"{key}: {shown}"

    flat = open_ + ", ".join(one(k, v, width=None) for k, v in items) + close
    if width is None or indent + len(flat) <= width:
        return flat
    pad = "  " * (indent // 2 + 1)
    inner = [pad + one(k, v, width=width, indent=len(pad)) for k, v in items]
    return open_ + "\n" + ",\n".join(inner) + "\n" + "  " * (indent // 2) + close


# ---- answers ---------------------------------------------------------------------------

def consume_stream(chunks) -> dict:
    """A stream answer (an iterator of bytes chunks) read to its end: ``{size, sha256}``."""
    digest, size = hashlib.sha256(), 0
    for chunk in chunks:
        digest.update(chunk)
        size += len(chunk)
    return {"size": size, "sha256": digest.hexdigest()}


def settle(answer: dict) -> dict:
    """The answer with any stream read to its end, so that it can be printed."""
    result = answer.get("result")
    if isinstance(result, Iterator) or (hasattr(result, "__next__") and hasattr(result, "__iter__")):
        answer = {**answer, "result": consume_stream(result), "streamed": True}
    return answer


def _index(ix: Any) -> str:
    if not isinstance(ix, Mapping):
        return str(ix)
    name = ix.get("name") or "_".join(f"{f}_1" for f in ix.get("fields") or [])
    notes = []
    if ix.get("unique"):
        notes.append("unique")
    if ix.get("expire_after_seconds") is not None:
        notes.append(f"ttl {ix['expire_after_seconds']}s")
    if ix.get("state") not in (None, "ready"):
        notes.append(str(ix["state"]))
    return name + (f" ({', '.join(notes)})" if notes else "")


def _field(f: Any, store: bool = False) -> str:
    if not isinstance(f, Mapping):
        return str(f)
    if store:
        return f"{f.get('name')} {f.get('type')}Store"
    return " ".join([str(f.get("name")), str(f.get("type", ""))] + [str(k) for k in f.get("keywords") or []]).strip()


def format_bucket(info: Mapping) -> str:
    """describe/stats as labelled lines: Bucket, Type, Entries, Bytes, Options, Fields, Stores, Indexes."""
    rows = [("Bucket", info.get("name")), ("Type", info.get("type"))]
    for key, label in (("entries", "Entries"), ("bytes", "Bytes")):
        if key in info:
            rows.append((label, info[key]))
    if "bytes" in info and "data_bytes" in info:  # on one line: what the files take, and what the data fills
        rows[-1] = ("Bytes", f"{info['bytes']} on disk, {info['data_bytes']} of data")
    if info.get("placement") is not None:
        rows.append(("Placement", info["placement"]))
    if info.get("options"):
        rows.append(("Options", ", ".join(f"{format_key(k)}: {format_value(v, width=None)}"
                                          for k, v in info["options"].items())))
    if info.get("fields"):
        rows.append(("Fields", ", ".join(_field(f) for f in info["fields"])))
    if info.get("store_fields"):
        rows.append(("Stores", ", ".join(_field(f, store=True) for f in info["store_fields"])))
    if "indexes" in info:
        rows.append(("Indexes", ", ".join(_index(ix) for ix in info["indexes"]) or "none"))
    known = {"name", "type", "entries", "bytes", "data_bytes", "placement", "options", "fields", "store_fields",
             "indexes", "db", "verbs"}
    for key, value in info.items():
        if key not in known:
            rows.append((str(key).replace("_", " ").capitalize(), value))
    return "\n".join(f"{label + ':':<10}{v if isinstance(v, str) else format_value(v, width=None)}"
                     for label, v in rows)


def format_answer(op: str, answer: Mapping) -> str:
    """The readable text of an answer to operation ``op``."""
    result = answer.get("result")
    if answer.get("streamed") and isinstance(result, Mapping):
        return f"{result['size']} bytes, sha256 {result['sha256']}"
    if op in ("describe_bucket", "stats") and isinstance(result, Mapping):
        return format_bucket(result)
    if op in ("list_databases", "list_buckets") and isinstance(result, list):
        if not result:
            return "(none)"
        return "\n".join(r if isinstance(r, str) else format_value(r) for r in result)
    if result is None and _answers_nothing(op):
        return "ok"
    text = format_value(result, bytes_shown=BYTES_SHOWN)
    if answer.get("store_fields") and result is not None:  # a document that owns stores: name them
        text += "\n-- stores: " + ", ".join(
            f"{f['name']} {f['type']}Store ({f['length']})" for f in answer["store_fields"])
    return text


def _answers_nothing(op: str) -> bool:
    """Whether null is all ``op`` ever answers (push, create database): then the shell says ok."""
    from .. import operations

    verb = operations.VERBS.get(op)
    return verb is None or verb.answer == "null"


def format_error(err: HoardError) -> str:
    """``error DUPLICATE_KEY (15): <message>``."""
    return f"error {err.codeName} ({err.code}): {err.message}"


def error_answer(err: HoardError) -> dict:
    """The four fields of an error answer, in the order --json prints them."""
    return {"ok": 0, "code": err.code, "codeName": err.codeName, "message": err.message}


def json_line(answer: Mapping) -> str:
    """One line of relaxed Extended JSON: ``{"ok": 1, "result": ...}`` first, other fields after."""
    ordered = {"ok": answer.get("ok", 1)}
    if ordered["ok"]:
        ordered["result"] = answer.get("result")
    for key, value in answer.items():
        if key not in ordered and key != "streamed":
            ordered[key] = value
    return json_util.dumps(ordered, json_options=JSON_OPTIONS, ensure_ascii=False)
