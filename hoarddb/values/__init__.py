"""BSON value semantics: order, order-preserving keys, filters and updates; pure functions, no I/O.

- :mod:`.order`  — ``compare``, ``values_equal``, ``type_rank``: MongoDB's order of BSON values.
- :mod:`.keys`   — ``encode_key``/``encode_keys``/``decode_key``/``key_end``: byte keys that sort like ``compare``.
- :mod:`.filter` — ``compile_filter``, ``matches``, ``equality_fields``.
- :mod:`.update` — ``apply_update``, ``validate_update``.
- :mod:`.paths`  — dotted paths.
- :mod:`.codec`  — the BSON codec and its options.
"""

from __future__ import annotations

from .filter import compile_filter, equality_fields, matches
from .keys import decode_key, decode_keys, encode_key, encode_keys, key_end
from .order import compare, sort_key, type_rank, values_equal
from .paths import MISSING, get_path, resolve, split_path
from .update import DOC_KEY, apply_update, validate_update

__all__ = [
    "compare", "values_equal", "type_rank", "sort_key",
    "encode_key", "encode_keys", "decode_key", "decode_keys", "key_end",
    "compile_filter", "matches", "equality_fields",
    "apply_update", "validate_update", "DOC_KEY",
    "MISSING", "split_path", "get_path", "resolve",
]
