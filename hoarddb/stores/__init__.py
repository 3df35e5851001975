"""The store types, one module each, and the registry that maps a type name to its class."""

from __future__ import annotations

import importlib

from ..errors import UnknownStoreTypeError
from ..operations import STORE_TYPES

_CLASSES = {
    "fifo": ("fifo", "FifoStore"),
    "lifo": ("lifo", "LifoStore"),
    "hash": ("hash", "HashStore"),
    "btree": ("btree", "BTreeStore"),
    "heap": ("heap", "HeapStore"),
    "blob": ("blob", "BlobStore"),
}
assert tuple(_CLASSES) == STORE_TYPES


def store_class(type_name):
    """The Store subclass for a type name; UnknownStoreTypeError lists the six types."""
    try:
        module, cls = _CLASSES[type_name]
    except (KeyError, TypeError):
        raise UnknownStoreTypeError(
            f"unknown store type {type_name!r}; a bucket's type is one of: {', '.join(STORE_TYPES)}"
        ) from None
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)
