"""Certificate fingerprints: the SHA-256 of a certificate's DER bytes, as servers print them and clients pin them."""

from __future__ import annotations

import hashlib
import re

_HEX = re.compile(r"^[0-9a-f]{64}$")


def fingerprint(der: bytes) -> str:
    """``AB:CD:...`` (32 pairs): the SHA-256 of a DER certificate, as the server prints it."""
    digest = hashlib.sha256(der).hexdigest().upper()
    return ":".join(digest[i:i + 2] for i in range(0, 64, 2))


def normalize(text: str) -> str:
    """A pinned fingerprint in any usual spelling (colons or not, any case, ``sha256:`` or
    ``SHA256 `` before it) as 64 lowercase hex digits; ValueError if it is not one."""
    t = text.strip().lower()
    for prefix in ("sha256:", "sha256 ", "sha-256:", "sha256="):
        if t.startswith(prefix):
            t = t[len(prefix):].strip()
    t = t.replace(":", "").replace(" ", "")
    if not _HEX.match(t):
        raise ValueError(f"{text!r} is not a SHA-256 fingerprint (64 hex digits, colons allowed)")
    return t
