"""The BSON codec every layer uses: one set of codec options, so a value reads back as it was written."""

from __future__ import annotations

import datetime

import bson
from bson.codec_options import CodecOptions, UuidRepresentation

#: Dates come back timezone-aware in UTC; ``uuid.UUID`` is stored as binary subtype 4.
CODEC_OPTIONS = CodecOptions(
    document_class=dict,
    tz_aware=True,
    tzinfo=datetime.timezone.utc,
    uuid_representation=UuidRepresentation.STANDARD,
)

#: The largest document hoardDB stores, as MongoDB: 16 MiB of BSON.
MAX_DOCUMENT_SIZE = 16 * 1024 * 1024


def encode(doc) -> bytes:
    """BSON bytes of a mapping (raises ``bson.errors.InvalidDocument`` on values BSON cannot hold)."""
    return _dict_to_bson(doc, False, CODEC_OPTIONS)


def decode(data) -> dict:
    """The document a BSON byte string holds."""
    return _bson_to_dict(data, CODEC_OPTIONS)


# bson.encode/decode check their arguments in Python before calling these C functions;
# ours are always a mapping and bytes with fixed options, so the hot paths call them
# directly (a third of a document read's cost). Fall back where a bson lacks them.
try:
    from bson import _bson_to_dict, _dict_to_bson
except ImportError:  # pragma: no cover - other bson builds
    def _bson_to_dict(data, options):
        return bson.decode(data, codec_options=options)

    def _dict_to_bson(doc, check_keys, options):
        return bson.encode(doc, check_keys, codec_options=options)


def decode_all(data) -> list[dict]:
    """Every document of concatenated BSON."""
    return bson.decode_all(data, codec_options=CODEC_OPTIONS)
