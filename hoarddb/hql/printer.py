"""Answers as text: values in HQL's literal syntax, answers as readable lines or one JSON line.

Readable output is for people: a document prints as ``{Author: "Bob", Text: "Nice photo!"}``,
the way it is typed, so it can be pasted back into the shell (:func:`format_value`, the
one renderer of values in hoarddb/values/literal.py, and ``parser.parse_value``
round-trip every BSON value, except bytes longer than ``BYTES_SHOWN`` in an answer,
which print as a summary). ``describe bucket`` and ``stats`` print as
labelled lines. The ``--json`` output is for programs: :func:`json_line` writes one line
of MongoDB relaxed Extended JSON per statement, whose shape docs/user/shell.md promises.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Iterator, Mapping
from typing import Any

from bson import json_util
from bson.binary import UuidRepresentation
from bson.json_util import JSONMode, JSONOptions

from ..errors import HoardError
from ..operations import DESCRIBE_BUCKET, LIST_BUCKETS, LIST_DATABASES, STATS
from ..values.literal import format_date, format_float, format_key, quote, render

__all__ = ["format_value", "format_date", "format_float", "format_key", "quote", "format_answer", "format_bucket",
           "format_explain", "format_error", "error_answer", "json_line", "settle", "consume_stream"]

#: Bytes up to this many print in full as BinData(0, "..."); longer ones as a summary.
BYTES_SHOWN = 1024

#: Readable output breaks a document over lines when it is wider than this.
WIDTH = 100

#: How --json writes values: relaxed Extended JSON, UUIDs as standard binary, dates in UTC.
JSON_OPTIONS = JSONOptions(json_mode=JSONMode.RELAXED, uuid_representation=UuidRepresentation.STANDARD,
                           tz_aware=True, tzinfo=datetime.timezone.utc)


# ---- values ----------------------------------------------------------------------------

def format_value(value: Any, *, width: int | None = WIDTH, indent: int = 0, bytes_shown: int | None = None) -> str:
    """``value`` in HQL literal syntax, such as ``{Author: "Bob", At: ISODate("...")}``.

    The one renderer of values, :func:`hoarddb.values.literal.render`, with the shell's
    width: a document or list wider than ``width`` is broken over lines, two spaces per
    level (``width=None`` keeps everything on one line). Bytes longer than ``bytes_shown``
    print as a summary, which does not read back; ``None`` prints all bytes.
    """
    return render(value, width=width, indent=indent, bytes_shown=bytes_shown)


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
    if ix.get("timeRange") is not None and isinstance(ix.get("summary"), str):
        return ix["summary"]  # its grid and ttl, as the index's own module words them
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
        inner = f.get("store_fields")
        nested = f" {{ {', '.join(_field(g, store=True) for g in inner)} }}" if inner else ""
        return f"{f.get('name')} {f.get('type')}Store{nested}"
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
    if any(isinstance(s, Mapping) and s.get("level", 2) > 2 for s in info.get("stores") or []):
        # a tree: each store by its dotted address and level
        rows.append(("Levels", ", ".join(f"{s['address']} (L{s['level']} {s['type']})" for s in info["stores"])))
    if "indexes" in info:
        rows.append(("Indexes", ", ".join(_index(ix) for ix in info["indexes"]) or "none"))
    known = {"name", "type", "entries", "bytes", "data_bytes", "placement", "options", "fields", "store_fields", "stores",
             "indexes", "db", "verbs"}
    for key, value in info.items():
        if key not in known:
            rows.append((str(key).replace("_", " ").capitalize(), value))
    return "\n".join(f"{label + ':':<10}{v if isinstance(v, str) else format_value(v, width=None)}"
                     for label, v in rows)


#: Operations whose answer describes one bucket (shown as labelled lines), and those that answer a list of names.
_ABOUT_A_BUCKET = (DESCRIBE_BUCKET.name, STATS.name)
_NAME_LISTS = (LIST_DATABASES.name, LIST_BUCKETS.name)


def format_answer(op: str, answer: Mapping) -> str:
    """The readable text of an answer to operation ``op``."""
    result = answer.get("result")
    if answer.get("streamed") and isinstance(result, Mapping):
        return f"{result['size']} bytes, sha256 {result['sha256']}"
    if op in _ABOUT_A_BUCKET and isinstance(result, Mapping):
        return format_bucket(result)
    if op in _NAME_LISTS and isinstance(result, list):
        if not result:
            return "(none)"
        return "\n".join(r if isinstance(r, str) else format_value(r) for r in result)
    if result is None and _answers_nothing(op):
        return "ok"
    text = format_value(result, bytes_shown=BYTES_SHOWN)
    if answer.get("store_fields") and result is not None:  # a document that owns stores: name them
        text += "\n-- stores: " + ", ".join(
            f"{f['name']} {f['type']}Store ({f['length']})" for f in answer["store_fields"])
    if isinstance(answer.get("explain"), Mapping):  # search(..., {explain: true}): the plan after the documents
        text += "\n" + format_explain(answer["explain"])
    return text


def format_explain(plan: Mapping) -> str:
    """A search's plan as labelled lines: the index used, what was examined, and each index considered."""
    rows = [("index used", plan.get("index_used"))]
    for key in ("keys_examined", "docs_examined", "returned"):
        if key in plan:
            rows.append((key.replace("_", " "), plan[key]))
    for key, value in plan.items():
        if key not in ("index_used", "keys_examined", "docs_examined", "returned", "considered"):
            rows.append((str(key).replace("_", " "), value))
    lines = ["-- plan:"] + [f"--   {label + ':':<15}{v if isinstance(v, str) else format_value(v, width=None)}"
                            for label, v in rows]
    considered = plan.get("considered") or []
    if considered:
        lines.append("--   considered:")
    for c in considered:
        if isinstance(c, Mapping) and "index" in c:
            covered = c.get("covered")
            cover = f" (covers {covered} field{'' if covered == 1 else 's'})" if isinstance(covered, int) else ""
            lines.append(f"--     {c['index']}{cover}: {c.get('reason', '')}".rstrip(": "))
        else:
            lines.append(f"--     {format_value(c, width=None)}")
    return "\n".join(lines)


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
