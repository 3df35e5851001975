"""How ingest keys a document for a hash bucket: by its ``_id_``, else by a copy of its ``_id``, and the key's bytes.

A hash bucket stores each document under its ``_id_``. A document from a mongodump or
a mongoexport has an ``_id`` instead; ingest copies it into ``_id_`` and keeps ``_id``.
Wherever the document came from (``.bson`` or JSON Lines, embedded or over the wire),
the two land in one place: ``_id`` first, ``_id_`` right after it, then the document's
other fields in their order. (BSON encoders put ``_id`` first in any document they
write; laying out every document so keeps ``.bson`` and JSON input alike.)

A document that has its own ``_id_`` keeps it (and an ``_id`` it has too stays as it
is); the two are laid out the same way: ``_id``, then ``_id_``, then the rest.

:func:`key_document` also gives the key as the bucket encodes it (30 and 30.0 are one
key, as they are one ``_id_`` to the bucket), so ingest can tell when a later document
of a file has the key of an earlier one and therefore replaced it.
"""

from __future__ import annotations

from hashlib import blake2b
from typing import Any

from bson.raw_bson import RawBSONDocument

from ..errors import HoardError
from ..values.codec import RAW_CODEC_OPTIONS, raw_alias, raw_get, raw_to_front
from ..values.keys import encode_key

#: Where a document's key came from: its own ``_id_``, a copy of its ``_id``, or neither ("").
FROM_ID_ = "_id_"
FROM_ID = "_id"
NO_KEY = ""

#: Encoded keys longer than this are remembered by a 16-byte digest (a collision is about as likely as 2**-64
#: over 2**32 keys): a file's keys are held in memory while it loads.
_KEEP_WHOLE = 16
_ABSENT = object()


def key_bytes(value: Any) -> bytes | None:
    """``value`` as a hash bucket's key, encoded (or its digest when long); None for a value that
    cannot be a key (the bucket refuses that document and says why)."""
    try:
        key = encode_key(value)
    except (HoardError, TypeError, ValueError, OverflowError):  # not a key: the write is refused, with its reason
        return None
    return key if len(key) <= _KEEP_WHOLE else blake2b(key, digest_size=16).digest()


def key_document(doc: Any) -> tuple[Any, str, bytes | None]:
    """``(document keyed, where its key came from, its key's bytes)`` for a hash bucket.

    ``doc`` is a decoded ``dict``, a :class:`RawBSONDocument`, or raw BSON ``bytes``;
    the keyed document is of the same kind. The key comes from ``_id_`` when the
    document has one (a null one too: the bucket then refuses it), else from ``_id``,
    copied into ``_id_`` right after it; with neither, the document is returned as it
    is, with :data:`NO_KEY`.
    """
    if type(doc) is dict:
        if "_id_" in doc:
            return doc, FROM_ID_, key_bytes(doc["_id_"])
        if "_id" not in doc:
            return doc, NO_KEY, None
        value = doc["_id"]
        keyed = {"_id": value, "_id_": value}
        keyed.update((k, v) for k, v in doc.items() if k != "_id")
        return keyed, FROM_ID, key_bytes(value)
    raw = doc.raw if type(doc) is RawBSONDocument else doc
    value = raw_get(raw, "_id_", _ABSENT)
    if value is not _ABSENT:
        how = FROM_ID_
    else:
        raw = raw_alias(raw, "_id", "_id_")
        if raw is None:
            return doc, NO_KEY, None
        value, how = raw_get(raw, "_id_"), FROM_ID  # the first field now: read without decoding the rest
    raw = raw_to_front(raw, "_id", "_id_")
    keyed = raw if type(doc) is bytes else RawBSONDocument(raw, RAW_CODEC_OPTIONS)
    return keyed, how, key_bytes(value)
