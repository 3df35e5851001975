"""SCRAM-SHA-256 (RFC 5802 with RFC 7677's hash), both sides, without I/O.

The server never sees or stores a password: a user's record holds a random salt, an
iteration count and two keys derived from the password (:func:`make_credentials`).
The exchange, as strings inside ``auth_start`` / ``auth_continue``:

    client-first   n,,n=<user>,r=<client nonce>
    server-first   r=<client nonce><server nonce>,s=<salt base64>,i=<iterations>
    client-final   c=biws,r=<nonce>,p=<proof base64>
    server-final   v=<server signature base64>

The proof shows the client knows the password; the signature shows the server knew
the stored keys, so a client also authenticates the server. Names are NFKC-normalised
(a simplification of SASLprep) and escaped (``=`` as ``=3D``, ``,`` as ``=2C``).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import os
import unicodedata

from ..errors import AuthFailedError, ProtocolError

MECHANISM = "SCRAM-SHA-256"
#: PBKDF2 iterations for new credentials; RFC 7677 asks for at least 4096.
DEFAULT_ITERATIONS = 100_000
MIN_ITERATIONS = 4096
SALT_BYTES = 16


def _h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _hmac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise ProtocolError("SCRAM: a base64 field is not base64") from None


def normalize(text: str) -> str:
    """A user name or password as SCRAM hashes it (NFKC)."""
    return unicodedata.normalize("NFKC", text)


@functools.lru_cache(maxsize=64)
def salted_password(password: str, salt: bytes, iterations: int) -> bytes:
    """PBKDF2-HMAC-SHA-256 of the password: the slow step, cached per (password, salt, iterations)."""
    return hashlib.pbkdf2_hmac("sha256", normalize(password).encode("utf-8"), salt, iterations)


def make_credentials(password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None) -> dict:
    """What a server stores for a password: ``{mechanism, salt, iterations, stored_key, server_key}``."""
    if not isinstance(password, str) or not password:
        raise ValueError("a password is a non-empty string")
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"SCRAM needs at least {MIN_ITERATIONS} iterations")
    salt = salt if salt is not None else os.urandom(SALT_BYTES)
    salted = salted_password(password, salt, iterations)
    return {
        "mechanism": MECHANISM, "salt": salt, "iterations": iterations,
        "stored_key": _h(_hmac(salted, b"Client Key")), "server_key": _hmac(salted, b"Server Key"),
    }


def _escape(name: str) -> str:
    return normalize(name).replace("=", "=3D").replace(",", "=2C")


def _unescape(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


def _fields(message: str) -> dict[str, str]:
    out = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ProtocolError(f"SCRAM: malformed attribute {part[:20]!r}")
        out.setdefault(part[0], part[2:])
    return out


class ScramClient:
    """ScramClient is the client's side of one exchange: first(), final(server_first), verify(server_final)."""

    def __init__(self, user: str, password: str, nonce: str | None = None):
        self.user = user
        self.password = password
        self.nonce = nonce or _b64(os.urandom(18))
        self._bare = f"n={_escape(user)},r={self.nonce}"
        self._server_signature = b""

    def first(self) -> str:
        return "n,," + self._bare

    def final(self, server_first: str) -> str:
        f = _fields(server_first)
        nonce, salt, iterations = f.get("r", ""), _unb64(f.get("s", "")), f.get("i", "")
        if not nonce.startswith(self.nonce) or len(nonce) == len(self.nonce):
            raise AuthFailedError("the server's SCRAM nonce does not extend ours; is this a hoardDB server?")
        if not iterations.isdigit() or int(iterations) < MIN_ITERATIONS:
            raise AuthFailedError(f"the server asked for {iterations!r} SCRAM iterations, fewer than {MIN_ITERATIONS}")
        salted = salted_password(self.password, salt, int(iterations))
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._bare},{server_first},{without_proof}".encode("utf-8")
        client_key = _hmac(salted, b"Client Key")
        proof = _xor(client_key, _hmac(_h(client_key), auth_message))
        self._server_signature = _hmac(_hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={_b64(proof)}"

    def verify(self, server_final: str) -> None:
        """Raise AuthFailedError unless the server proved it holds this user's keys."""
        f = _fields(server_final)
        if not hmac.compare_digest(_unb64(f.get("v", "")), self._server_signature):
            raise AuthFailedError("the server's SCRAM signature is wrong: it does not hold this user's keys")


class ScramServer:
    """ScramServer is the server's side of one exchange.

    ``lookup(user)`` returns the user's credentials or None; an unknown user goes
    through the same steps with ``decoy`` credentials, so the answer never tells
    whether the name or the password was wrong.
    """

    def __init__(self, lookup, decoy, nonce: str | None = None):
        self._lookup = lookup
        self._decoy = decoy
        self._nonce = nonce or _b64(os.urandom(18))
        self.user: str | None = None
        self._known = False
        self._credentials: dict | None = None
        self._auth_prefix = ""
        self._combined = ""

    @property
    def known(self) -> bool:
        """Whether the user named in client-first exists (False before it, and for a decoy)."""
        return self._known

    @property
    def stored_key(self) -> bytes | None:
        """The stored key of the credentials this exchange checks (None before client-first)."""
        return bytes(self._credentials["stored_key"]) if self._credentials is not None else None

    def first(self, client_first: str) -> str:
        if not client_first.startswith("n,,"):
            raise ProtocolError("SCRAM: channel binding is not supported; client-first must start with 'n,,'")
        bare = client_first[3:]
        f = _fields(bare)
        if "n" not in f or "r" not in f or not f["r"]:
            raise ProtocolError("SCRAM: client-first needs n=<user> and r=<nonce>")
        self.user = _unescape(f["n"])
        credentials = self._lookup(self.user)
        self._known = credentials is not None
        self._credentials = credentials if credentials is not None else self._decoy(self.user)
        self._combined = f["r"] + self._nonce
        server_first = (f"r={self._combined},s={_b64(self._credentials['salt'])},"
                        f"i={self._credentials['iterations']}")
        self._auth_prefix = f"{bare},{server_first}"
        return server_first

    def final(self, client_final: str) -> str:
        """The server-final message; AuthFailedError when the proof is wrong or the user unknown."""
        if self._credentials is None:
            raise ProtocolError("SCRAM: auth_continue before auth_start")
        without_proof, sep, proof_text = client_final.rpartition(",p=")
        if not sep:
            raise ProtocolError("SCRAM: client-final needs p=<proof>")
        f = _fields(without_proof)
        if f.get("r") != self._combined:
            raise AuthFailedError("authentication failed")
        proof = _unb64(proof_text)
        auth_message = f"{self._auth_prefix},{without_proof}".encode("utf-8")
        stored_key = bytes(self._credentials["stored_key"])
        client_key = _xor(proof, _hmac(stored_key, auth_message))
        if len(proof) != len(stored_key) or not hmac.compare_digest(_h(client_key), stored_key) or not self._known:
            raise AuthFailedError("authentication failed")
        return "v=" + _b64(_hmac(bytes(self._credentials["server_key"]), auth_message))
