"""Readers of the files ingest and restore load: concatenated BSON, JSON Lines and JSON arrays, plain or gzip, with positions.

Each yields :class:`Record` objects, one per document, in file order. A record carries
where it came from — its document number (from 1), its byte offset in the
uncompressed stream (from 0) and, for JSON, its line number — so that every
refusal can say exactly which document it was. A document that cannot be read is a
record with ``error`` set instead of ``doc``; the reader then goes on with the next
one when the file's framing allows it, or stops (``fatal``) when it does not.

A ``.bson`` file, as mongodump writes it, is BSON documents back to back with nothing
between them; each one carries its own length:

    offset 0                                offset L1
    +-------------+--- ... ---+------+------+-------------+--- ...
    | int32 LE L1 | elements  | 0x00 |      | int32 LE L2 | ...
    +-------------+--- ... ---+------+------+-------------+--- ...
    |<------------- L1 bytes ------------->|

So a document whose contents are damaged (bad UTF-8, an unknown element type) can be
skipped — the next one starts L1 bytes further — while a length that cannot be right
(under 5, or the file ends before it) loses the thread: nothing after it can be found.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

import bson
from bson.raw_bson import RawBSONDocument
from bson import json_util
from bson.codec_options import UuidRepresentation
from bson.errors import InvalidBSON
from bson.json_util import JSONOptions

from ..values.codec import CODEC_OPTIONS, MAX_DOCUMENT_SIZE

#: A .bson document read from a file stays its raw bytes (decoded only where a field is read).
RAW_OPTIONS = CODEC_OPTIONS.with_options(document_class=RawBSONDocument)

#: How Extended JSON is read: dates timezone-aware in UTC, binary subtype 4 as uuid.UUID —
#: the same values the engine's BSON codec gives back, so a value reads back as it was.
JSON_OPTIONS = JSONOptions(
    document_class=dict,
    tz_aware=True,
    tzinfo=CODEC_OPTIONS.tzinfo,
    uuid_representation=UuidRepresentation.STANDARD,
)

#: Bytes read from the file at a time.
CHUNK = 4 * 1024 * 1024
_GZIP_MAGIC = b"\x1f\x8b"
_INT32 = struct.Struct("<i")

#: File names a reader understands, longest first: (suffix, format).
SUFFIXES = (
    (".bson.gz", "bson"),
    (".jsonl.gz", "jsonl"),
    (".json.gz", "jsonl"),
    (".bson", "bson"),
    (".jsonl", "jsonl"),
    (".json", "jsonl"),
)


@dataclass(slots=True)
class Record:
    """Record is one document of an input file, or the reason it could not be read.

    ``number`` counts documents from 1 (a JSON Lines file's blank lines are not
    documents); ``offset`` is the byte where it starts in the uncompressed stream;
    ``line`` is its line in a JSON Lines file (None in BSON); ``size`` its bytes.
    ``error`` is set (and ``doc`` None) when it could not be read, with ``fatal`` when
    nothing after it in the file can be read either.
    """

    number: int
    offset: int
    size: int
    doc: dict | None = None
    line: int | None = None
    error: str | None = None
    code: str = ""
    fatal: bool = False
    #: Set when the document is keyed for a hash bucket (:func:`hoarddb.tools.keys.key_document`):
    #: "_id_", "_id" (copied into _id_ beside it) or "" (neither). ParallelBSON keys in its reader process.
    key_from: str | None = None
    #: The key's bytes as the bucket encodes it (with ``key_from``), to tell a later document with the same key.
    key: bytes | None = None


def split_name(path: Path) -> tuple[str, str] | None:
    """``(base name, format)`` of a data file (``events.bson.gz`` -> ``("events", "bson")``), or None."""
    name = path.name
    if name.endswith((".metadata.json", ".metadata.json.gz")):
        return None
    for suffix, fmt in SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], fmt
    return None


class _Counting(io.RawIOBase):
    """A raw file that counts the bytes read from it (so a gzip stream can report progress)."""

    def __init__(self, f: BinaryIO):
        self._f = f
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self._f.readinto(b)
        self.count += n or 0
        return n

    def close(self) -> None:
        self._f.close()
        super().close()


class InputFile:
    """InputFile is one input file opened for reading, gzip or not (told by its first two bytes).

    ``total`` is the file's size on disk and ``done`` how many of those bytes have been
    read, so progress and ETA are right for a compressed file too.
    """

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.total = self.path.stat().st_size
        raw = open(self.path, "rb")
        self.gzip = raw.read(2) == _GZIP_MAGIC
        raw.seek(0)
        self._raw = _Counting(raw)
        self.stream: BinaryIO = gzip.GzipFile(fileobj=self._raw, mode="rb") if self.gzip else self._raw

    @property
    def done(self) -> int:
        return self._raw.count

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes (fewer only at the end); raises ValueError/OSError on a damaged gzip stream."""
        parts, want = [], n
        # read1 on gzip: a stream cut short raises only once the bytes before the cut are handed out
        read = self.stream.read1 if self.gzip else self.stream.read
        while want > 0:
            try:
                chunk = read(want)
            except (OSError, EOFError, zlib.error):
                if parts:  # hand out what was read; the next call raises again
                    break
                raise
            if not chunk:
                break
            parts.append(chunk)
            want -= len(chunk)
        return b"".join(parts)

    def close(self) -> None:
        if self.gzip:
            self.stream.close()
        self._raw.close()

    def __enter__(self) -> "InputFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_bson(f: InputFile, decode: bool = True, keep_raw: bool | str = False) -> Iterator[Record]:
    """Every document of a concatenated-BSON stream, as :class:`Record` objects.

    With ``decode`` False the documents are only framed (lengths checked), not decoded:
    ``doc`` is then the raw bytes. With ``keep_raw`` they are checked by decoding, then
    given as a ``RawBSONDocument`` (``keep_raw="bytes"``: as bytes). A document over 16 MiB is refused and skipped; a
    damaged document (its length right, its contents not) is refused and skipped; a
    length that cannot be right, or a file that ends inside a document, is ``fatal``.
    """
    buf = b""
    pos = 0  # where buf[0] is in the uncompressed stream
    i = 0  # where the next document starts in buf
    number = 0
    eof = False

    def fill(need: int) -> None:
        """Make buf[i:] at least ``need`` bytes long, unless the stream ends first."""
        nonlocal buf, pos, i, eof
        if i:
            buf, pos, i = buf[i:], pos + i, 0
        while len(buf) < need and not eof:
            chunk = f.read(max(CHUNK, need - len(buf)))
            if not chunk:
                eof = True
            else:
                buf = buf + chunk if buf else chunk

    while True:
        first = number + 1  # the document this pass reads
        try:
            if len(buf) - i < 4:
                fill(4)
                if len(buf) == 0:
                    return
                if len(buf) < 4:
                    yield Record(number + 1, pos, len(buf), error=(
                        f"truncated: the file ends {len(buf)} byte(s) into a document's length prefix"),
                        code="TRUNCATED", fatal=True)
                    return
            (length,) = _INT32.unpack_from(buf, i)
            lead = buf[i:i + 1]
            number += 1
            offset = pos + i
            if length < 5:
                yield Record(number, offset, 0, error=(
                    f"corrupt: a document's length prefix says {length} bytes (at least 5 is possible); "
                    "the file is damaged here and nothing after this point can be read"),
                    code="CORRUPT", fatal=True)
                return
            if length > MAX_DOCUMENT_SIZE:
                # Too large to keep, but the framing is intact: step over it without holding it.
                have = min(length, len(buf) - i)
                i += have
                left = length - have
                while left > 0:
                    chunk = f.read(min(left, CHUNK))
                    if not chunk:
                        break
                    left -= len(chunk)
                    pos += len(chunk)
                if left > 0:
                    yield Record(number, offset, length, error=(
                        f"corrupt: a document's length prefix says {length} bytes, over the 16 MiB limit and "
                        f"past the end of the file: the file is damaged here, or is not BSON"
                        + _not_bson_hint(number, lead)
                        + "; nothing after this point can be read"), code="CORRUPT", fatal=True)
                    return
                yield Record(number, offset, length, error=(
                    f"document is {length} bytes of BSON; the limit is {MAX_DOCUMENT_SIZE} (16 MiB). "
                    "Keep large bytes in a blob bucket and store the blob's id"), code="DOCUMENT_TOO_LARGE")
                continue
            if len(buf) - i < length:
                fill(length)
                if len(buf) < length:
                    yield Record(number, offset, length, error=(
                        f"truncated: a document of {length} bytes starts here, and the file ends "
                        f"after {len(buf)} of them"), code="TRUNCATED", fatal=True)
                    return
            raw = buf[i:i + length]
            i += length
        except EOFError as exc:  # a gzip stream cut short
            yield Record(first, pos + i, 0, error=(
                f"truncated: the compressed file ends before its end ({exc}), inside this document; nothing "
                "after it exists. Copy the whole file again (gzip -t FILE tells whether a .gz file is whole)"),
                code="TRUNCATED", fatal=True)
            return
        except (OSError, ValueError, zlib.error) as exc:
            yield Record(first, pos + i, 0, error=(
                f"unreadable: {exc}; the file is damaged here and nothing after this point can be read"
                + (" (gzip -t FILE checks a .gz file)" if f.gzip else "")), code="CORRUPT", fatal=True)
            return
        if raw[-1] != 0:
            yield Record(number, offset, length, error=(
                "corrupt: the document does not end with the 0 byte its length prefix promises"),
                code="CORRUPT")
            continue
        if not decode:
            yield Record(number, offset, length, doc=raw)
            continue
        try:
            doc = bson.decode(raw, codec_options=CODEC_OPTIONS)  # validates every value, nested ones too
        except (InvalidBSON, ValueError, OverflowError, TypeError) as exc:
            yield Record(number, offset, length, error=f"corrupt: the document cannot be decoded: {exc}",
                         code="CORRUPT")
            continue
        if keep_raw:  # checked, so it can be stored as the bytes it is: no second encoding on the way in
            doc = bytes(raw) if keep_raw == "bytes" else RawBSONDocument(bytes(raw), RAW_OPTIONS)
        yield Record(number, offset, length, doc=doc)


def _not_bson_hint(number: int, first: bytes) -> str:
    """A hint when a .bson file's first bytes look like something else."""
    if number == 1 and first in (b"{", b"["):
        return " (it starts like JSON: name it .json or .jsonl)"
    return ""


def read_jsonl(f: InputFile) -> Iterator[Record]:
    """Every document of a JSON Lines stream in MongoDB Extended JSON, canonical or relaxed.

    Each line is read on its own, so canonical and relaxed lines may be mixed
    (``{"$numberLong": "5"}`` and ``5`` both read; only canonical keeps int64 for a
    small number). Blank lines are skipped; a line that is not a JSON object is refused
    with its line number, and the next line is read.
    """
    stream = f.stream if f.gzip else io.BufferedReader(f.stream, CHUNK)
    offset = 0
    number = 0
    line_no = 0
    while True:
        try:
            line = stream.readline()
        except (OSError, EOFError, ValueError, zlib.error) as exc:
            yield Record(number + 1, offset, 0, line=line_no + 1, error=f"unreadable: {exc}", code="CORRUPT",
                         fatal=True)
            return
        if not line:
            return
        line_no += 1
        start = offset
        offset += len(line)
        text = line.strip()
        if not text:
            continue
        number += 1
        if number == 1 and text.startswith(b"["):  # mongoexport --jsonArray: one array of documents
            yield from read_json_array(f.read if f.gzip else stream.read, line, start, line_no)
            return
        try:
            doc = json_util.loads(text, json_options=JSON_OPTIONS)
        except (ValueError, TypeError, KeyError, OverflowError, bson.errors.BSONError) as exc:
            spread = text.startswith(b"{") and not text.endswith(b"}")
            yield Record(number, start, len(line), line=line_no, error=f"not JSON: {exc}" + (
                "; a document spread over several lines (pretty-printed JSON)? JSON Lines holds one whole "
                "document per line, as mongoexport writes it (jq -c . FILE rewrites a file so)" if spread else ""),
                code="NOT_JSON")
            continue
        if not isinstance(doc, dict):
            yield Record(number, start, len(line), line=line_no, error=(
                f"a line must hold one JSON object ({{...}}), this one holds {type(doc).__name__}"), code="NOT_JSON")
            continue
        yield Record(number, start, len(line), doc=doc, line=line_no)


#: Where a JSON array's structure is: brackets, braces and the quotes that start strings.
_STRUCTURE = re.compile(rb'["{}\[\]]')
#: The rest of a JSON string, through its closing quote (escapes skipped).
_STRING_REST = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_SPACE = re.compile(rb"[ \t\r\n]*")
_SCALAR_END = re.compile(rb"[,\]\s]")
#: A JSON array element longer than this is not read (a document is at most 16 MiB of BSON;
#: Extended JSON spells some values longer).
MAX_ELEMENT = 4 * MAX_DOCUMENT_SIZE


def read_json_array(read: Callable[[int], bytes], head: bytes, offset: int, line: int) -> Iterator[Record]:
    """The documents of a JSON array of Extended JSON objects (``mongoexport --jsonArray``),
    read element by element, never the whole file at once.

    ``head`` is what :func:`read_jsonl` read already (the line holding ``[``), from byte
    ``offset`` and line ``line`` of the stream, and ``read(n)`` reads on. Each element is cut out of the stream by
    its brackets (strings skipped), then parsed; one that does not parse, or is not an
    object, is refused and the next one read, as a JSON Lines line would be. A stream
    that ends before the array does ends the file (``TRUNCATED``); something that is not
    an element where one should be loses the thread (``CORRUPT``).
    """
    buf, pos, eof = head, 0, False
    number = 0
    counted = 0  # newlines are counted in buf up to here: ``line`` is the line at that point

    def more() -> bool:
        nonlocal buf, pos, offset, eof, counted
        if eof:
            return False
        try:
            chunk = read(CHUNK)
        except (OSError, EOFError, ValueError, zlib.error):
            eof = True
            raise
        if not chunk:
            eof = True
            return False
        if pos > CHUNK:  # drop what was read already, keeping offsets and line numbers right
            at(pos)
            offset += pos
            buf, pos, counted = buf[pos:], 0, 0
        buf += chunk
        return True

    def at(i: int) -> tuple[int, int]:
        """The byte offset and line of ``buf[i]`` (``i`` never before an earlier call's)."""
        nonlocal line, counted
        if i > counted:
            line += buf.count(b"\n", counted, i)
            counted = i
        return offset + i, line

    def skip_space() -> None:
        nonlocal pos
        while True:
            pos = _SPACE.match(buf, pos).end()
            if pos < len(buf) or not more():
                return

    def element_end() -> int | None:
        """Where the element at ``pos`` ends (exclusive), reading more as needed (which may
        move it to the buffer's start); None when the stream ends first."""
        while True:
            depth, i = 0, pos
            if buf[pos:pos + 1] not in (b"{", b"[", b'"'):  # a number, true, false, null: up to , or ]
                m = _SCALAR_END.search(buf, pos)
                if m is not None:
                    return m.start()
                i = len(buf)
            while i < len(buf):
                m = _STRUCTURE.search(buf, i)
                if m is None:
                    break
                ch, i = m.group(), m.end()
                if ch == b'"':
                    s_end = _STRING_REST.match(buf, i)
                    if s_end is None:
                        break
                    i = s_end.end()
                    if depth == 0:
                        return i
                elif ch in (b"{", b"["):
                    depth += 1
                else:
                    depth -= 1
                    if depth == 0:
                        return i
            if len(buf) - pos > MAX_ELEMENT or not more():
                return None

    try:
        skip_space()
        pos += 1  # the [
        first = True
        while True:
            skip_space()
            if buf[pos:pos + 1] == b"]":
                pos += 1
                skip_space()
                if pos < len(buf):
                    where, at_line = at(pos)
                    yield Record(number + 1, where, 0, line=at_line, error=(
                        "something follows the end of the JSON array; a file holds one array (or JSON Lines)"),
                        code="CORRUPT", fatal=True)
                return
            if not first:  # a comma, then the next element (or the ] of a trailing comma)
                if buf[pos:pos + 1] != b",":
                    where, at_line = at(pos)
                    yield Record(number + 1, where, 0, line=at_line, error=(
                        "a JSON array's elements are separated by commas; found "
                        + (repr(bytes(buf[pos:pos + 20])) if pos < len(buf) else "the end of the file")
                        + " where a comma or ] should be"),
                        code="TRUNCATED" if pos >= len(buf) else "CORRUPT", fatal=True)
                    return
                pos += 1
                skip_space()
                if buf[pos:pos + 1] == b"]":
                    continue
            first = False
            end = element_end() if pos < len(buf) else None
            start = pos  # (after element_end: reading more may have moved it)
            number += 1
            where, at_line = at(start)
            if end is None:
                yield Record(number, where, len(buf) - start, line=at_line, error=(
                    "the file ends inside this document, before the array does (a cut file?)"
                    if len(buf) - start <= MAX_ELEMENT else
                    f"an element over {MAX_ELEMENT >> 20} MiB of JSON: not a document hoardDB can store"),
                    code="TRUNCATED", fatal=True)
                return
            text = bytes(buf[start:end])
            pos = end
            try:
                doc = json_util.loads(text, json_options=JSON_OPTIONS)
            except (ValueError, TypeError, KeyError, OverflowError, bson.errors.BSONError) as exc:
                yield Record(number, where, len(text), line=at_line, error=f"not JSON: {exc}", code="NOT_JSON")
                continue
            if not isinstance(doc, dict):
                yield Record(number, where, len(text), line=at_line, error=(
                    f"an element of the array must be one JSON object ({{...}}), this one is {type(doc).__name__}"),
                    code="NOT_JSON")
                continue
            yield Record(number, where, len(text), doc=doc, line=at_line)
    except (OSError, EOFError, ValueError, zlib.error) as exc:
        where, at_line = at(min(pos, len(buf)))
        yield Record(number + 1, where, 0, line=at_line, error=f"unreadable: {exc}", code="CORRUPT", fatal=True)


def read_records(f: InputFile, fmt: str, keep_raw: bool = False) -> Iterator[Record]:
    """The records of ``f`` read as ``fmt`` (``"bson"`` or ``"jsonl"``); ``keep_raw``: BSON documents
    as RawBSONDocument (checked, then stored without being encoded again)."""
    return read_bson(f, keep_raw=keep_raw) if fmt == "bson" else read_jsonl(f)


def file_sha256(path: Path | str) -> tuple[str, int]:
    """``(hex SHA-256, size)`` of a file's bytes as they are on disk."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(CHUNK)
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def describe_position(path: Any, record: Record) -> str:
    """``users.bson: document 3 (byte 1234)`` — or with ``line 7`` for JSON Lines."""
    where = f"document {record.number}"
    if record.line is not None:
        where += f", line {record.line}"
    return f"{os.fspath(path)}: {where} (byte {record.offset})"


# -- reading a large .bson file in a second process --------------------------------------------
#
# Checking a document (decoding it) costs about as much as storing it, and both need the
# GIL, so a thread does not help; a second process does, on a machine with two cores: it
# reads, frames and checks the documents and hands over their raw bytes in chunks, while
# this process keys and writes them.

#: Files at least this large are read in a second process (below, starting one costs more than it saves).
PARALLEL_MIN_BYTES = 32 * 1024 * 1024
_CHUNK = 512  # records per hand-over


def _read_worker(path: str, queue) -> None:  # runs in the reader process
    from .keys import key_document

    try:
        f = InputFile(path)
        chunk: list = []
        with f:
            for r in read_bson(f, keep_raw="bytes"):
                raw, key_from, key = r.doc, None, None
                if raw is not None:  # key it here too: a hash bucket keys by _id_, else _id
                    raw, key_from, key = key_document(raw)
                chunk.append((r.number, r.offset, r.size, raw, r.line, r.error, r.code, r.fatal, key_from, key))
                if len(chunk) >= _CHUNK:
                    queue.put((chunk, f.done))
                    chunk = []
            queue.put((chunk, f.done))
        queue.put(None)
    except BaseException as exc:  # say what went wrong instead of dying silently
        queue.put(("error", f"{type(exc).__name__}: {exc}"))


class ParallelBSON:
    """ParallelBSON reads a .bson file in a second process: the records of :func:`read_bson`
    with ``keep_raw``, each keyed for a hash bucket there already (``Record.key_from``), and
    ``total``/``done`` for progress, as :class:`InputFile` has."""

    def __init__(self, path: Path | str):
        import multiprocessing

        self.path = Path(path)
        self.total = self.path.stat().st_size
        self.done = 0
        ctx = multiprocessing.get_context("spawn")  # no fork: this process has threads
        self._queue = ctx.Queue(maxsize=8)
        self._proc = ctx.Process(target=_read_worker, args=(str(self.path), self._queue), daemon=True)
        self._proc.start()

    def records(self) -> Iterator[Record]:
        import queue as queue_module

        while True:
            try:
                item = self._queue.get(timeout=1.0)
            except queue_module.Empty:
                if not self._proc.is_alive():
                    raise OSError(f"the process reading {self.path} stopped (exit code {self._proc.exitcode})")
                continue
            if item is None:
                return
            if item[0] == "error":
                raise OSError(f"reading {self.path} failed: {item[1]}")
            chunk, self.done = item
            for number, offset, size, raw, line, error, code, fatal, key_from, key in chunk:
                doc = RawBSONDocument(raw, RAW_OPTIONS) if raw is not None else None
                yield Record(number, offset, size, doc=doc, line=line, error=error, code=code, fatal=fatal,
                             key_from=key_from, key=key)

    def close(self) -> None:
        if self._proc.is_alive():
            self._proc.terminate()
        self._proc.join(timeout=5)
        self._queue.close()
