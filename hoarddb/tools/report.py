"""What ingest, dump and restore hand back: per bucket, what was moved, what was not, and why.

The reports are plain dataclasses a program can read (``report.ok``,
``report.buckets[0].refused[0].number``); ``summary()`` renders the text the
``hoarddb`` commands print.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Refusal:
    """Refusal is one document that was not loaded (or, in a dump, not dumped): where it is, and why.

    ``number`` counts documents from 1; ``offset`` is its first byte in the
    (uncompressed) file; ``line`` its line in a JSON Lines file. ``code`` is hoardDB's
    codeName when the database refused it (``DUPLICATE_KEY``), else what the reader
    found (``CORRUPT``, ``TRUNCATED``, ``NOT_JSON``, ``DOCUMENT_TOO_LARGE``, ``NO_KEY``).
    """

    file: str
    number: int
    offset: int
    reason: str
    code: str
    line: int | None = None

    def where(self) -> str:
        spot = f"document {self.number}"
        if self.line is not None:
            spot += f", line {self.line}"
        return f"{self.file}: {spot} (byte {self.offset})"

    def __str__(self) -> str:
        return f"{self.where()}: {self.code}: {self.reason}"


@dataclass
class Replacement:
    """Replacement is a document that was loaded under the key an earlier document of the same file
    had, and so replaced it (a hash bucket holds one document per ``_id_``).

    ``number``, ``offset`` and ``line`` place the later document as a :class:`Refusal`
    places one; ``earlier`` (and ``earlier_line``) name the document it replaced.
    """

    file: str
    number: int
    offset: int
    earlier: int
    line: int | None = None
    earlier_line: int | None = None

    def where(self) -> str:
        spot = f"document {self.number}"
        if self.line is not None:
            spot += f", line {self.line}"
        return f"{self.file}: {spot} (byte {self.offset})"

    def __str__(self) -> str:
        earlier = f"document {self.earlier}" + (f" (line {self.earlier_line})" if self.earlier_line is not None
                                                else "")
        return f"{self.where()}: has the key of {earlier}, and replaced it"


@dataclass
class BucketReport:
    """BucketReport is what one file did to one bucket (ingest and restore), or one bucket's dump."""

    db: str
    bucket: str
    type: str
    file: str
    created: bool = False
    documents: int = 0
    bytes: int = 0
    total_bytes: int = 0
    seconds: float = 0.0
    refused: list[Refusal] = field(default_factory=list)
    #: Why loading this file stopped before its end (None: it was read to the end).
    stopped: str | None = None
    #: An error that ended the whole run here (the database refused every write, a disk filled).
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    #: ingest: the ``create bucket`` statement that declares the indexes of a metadata.json.
    statement: str | None = None
    #: restore: unique indexes left ``conflicted`` by the data, with the documents in conflict.
    conflicts: list[dict] = field(default_factory=list)
    #: dump: blob files written; restore: blobs loaded.
    blobs: int = 0
    #: ingest into a hash bucket: loaded documents that replaced an earlier one of the file with the same key.
    replaced: list[Replacement] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every document of the file is in the bucket and no index was left conflicted."""
        return not self.refused and self.stopped is None and self.error is None and not self.conflicts

    @property
    def rate(self) -> float:
        """Documents per second."""
        return self.documents / self.seconds if self.seconds > 0 else 0.0

    @property
    def kept(self) -> int:
        """Documents of the file the bucket holds: those loaded, less those a later one replaced."""
        return self.documents - len(self.replaced)

    def to_dict(self) -> dict:
        """The report as plain values (``ok`` and ``kept`` included), as ``--json`` prints it."""
        out = asdict(self)
        out["ok"] = self.ok
        out["kept"] = self.kept
        return out


@dataclass
class Report:
    """Report is a whole run of ingest, dump or restore: one :class:`BucketReport` per bucket."""

    action: str
    buckets: list[BucketReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: The run was refused or cancelled before anything was written (the reason).
    cancelled: str | None = None

    @property
    def ok(self) -> bool:
        return self.cancelled is None and all(b.ok for b in self.buckets)

    @property
    def documents(self) -> int:
        return sum(b.documents for b in self.buckets)

    @property
    def replaced(self) -> int:
        """Loaded documents that replaced an earlier document of their file with the same key."""
        return sum(len(b.replaced) for b in self.buckets)

    def to_dict(self) -> dict:
        """The whole run as plain values: ``action``, ``ok``, ``documents``, ``replaced``, ``notes``,
        ``cancelled`` and one :meth:`BucketReport.to_dict` per bucket."""
        return {"action": self.action, "ok": self.ok, "documents": self.documents, "replaced": self.replaced,
                "cancelled": self.cancelled, "notes": list(self.notes),
                "buckets": [b.to_dict() for b in self.buckets]}

    def to_json(self) -> str:
        """:meth:`to_dict` as one line of relaxed Extended JSON (what ``--json`` prints)."""
        from bson import json_util

        return json_util.dumps(self.to_dict(), json_options=json_util.RELAXED_JSON_OPTIONS)

    def summary(self) -> str:
        """The report as the commands print it: a table, then every refusal, note and statement."""
        lines: list[str] = []
        missed = "not dumped" if self.action == "dump" else "not loaded"
        if self.cancelled:
            return f"{self.action} cancelled: {self.cancelled}"
        rows = [("bucket", "type", "documents", "bytes", "seconds", "docs/s", "result")]
        for b in self.buckets:
            rows.append((f"{b.db}.{b.bucket}", b.type, f"{b.documents:,}", _size(b.bytes), f"{b.seconds:.2f}",
                         f"{b.rate:,.0f}", _result(b)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for n, r in enumerate(rows):
            cells = (c.rjust(w) if 2 <= i <= 5 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
            lines.append("  ".join(cells).rstrip())
            if n == 0:
                lines.append("  ".join("-" * w for w in widths))
        for b in self.buckets:
            details: list[str] = []
            if b.refused:
                details.append(f"{len(b.refused)} document(s) {missed}:")
                details.extend(f"  {r}" for r in b.refused[:50])
                if len(b.refused) > 50:
                    details.append(f"  ... and {len(b.refused) - 50} more (the report object lists them all)")
            if b.replaced:
                details.append(f"{len(b.replaced):,} document(s) had the key (_id_) of an earlier document of the "
                               f"file and replaced it; the bucket holds the later one, {b.kept:,} document(s) in "
                               "all from this file:")
                details.extend(f"  {r}" for r in b.replaced[:50])
                if len(b.replaced) > 50:
                    details.append(f"  ... and {len(b.replaced) - 50:,} more (the report object lists them all)")
            for c in b.conflicts:
                details.append(
                    f"unique index {c['index']!r} is conflicted: {_values(c.get('values'))} is held by documents "
                    f"{', '.join(_literal(d) for d in c.get('documents', []))}. Nothing was deleted: change or "
                    "delete one of them, then reopen the database (the index is rebuilt and becomes ready); "
                    "search refuses the index until then")
            if b.stopped:
                details.append(f"stopped: {b.stopped}")
            if b.error:
                details.append(f"error: {b.error}")
            details.extend(b.notes)
            if b.statement:
                details.append("the statement that declares the indexes:")
                details.append(f"  {b.statement}")
            if details:
                lines.append("")
                lines.append(f"{b.db}.{b.bucket} ({b.file}):")
                lines.extend(d if d.startswith("  ") else f"- {d}" for d in details)
        for note in self.notes:
            lines.append("")
            lines.append(note)
        total = sum(b.documents for b in self.buckets)
        refused = sum(len(b.refused) for b in self.buckets)
        lines.append("")
        verb = {"ingest": "loaded", "restore": "restored", "dump": "dumped"}.get(self.action, "moved")
        tail = f"; {refused:,} {missed}" if refused else ""
        if self.replaced:
            tail += (f"; {self.replaced:,} of them replaced an earlier one with the same key, so "
                     f"{total - self.replaced:,} are kept")
        lines.append(f"{verb} {total:,} document(s) in {len(self.buckets)} bucket(s){tail}"
                     + ("" if self.ok else " — see above for what was not"))
        return "\n".join(lines)


def _result(b: BucketReport) -> str:
    if b.error:
        return "error"
    if b.stopped:
        return "stopped"
    if b.refused:
        return f"{len(b.refused)} refused"
    if b.conflicts:
        return "index conflicted"
    if b.replaced:
        return f"ok, {len(b.replaced):,} replaced"
    return "ok"


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _literal(value: Any) -> str:
    from ..values.literal import literal

    return literal(value)


def _values(values: Any) -> str:
    if isinstance(values, dict):
        return ", ".join(f"{k} = {_literal(v)}" for k, v in values.items())
    return _literal(values)
