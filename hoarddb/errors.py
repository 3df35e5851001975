"""The one catalog of hoardDB errors: every refusal has a stable code, a name and a hint.

Every layer may raise these (this module imports nothing of ours). A client over the
wire receives ``{ok: 0, code, codeName, message}`` and turns it back into the same class
with :func:`error_from_answer`. Add a new error here, and a row to docs/user/errors.md.
"""

from __future__ import annotations


class HoardError(Exception):
    """HoardError is the base of every error hoardDB raises on purpose.

    ``code`` and ``codeName`` are stable across versions; ``message`` says what was
    wrong and what to do next.
    """

    code = 1
    codeName = "INTERNAL_ERROR"

    # Details some errors carry (set from ``details``, so only where they apply: ``hasattr``
    # tells whether an error has one). A client's error of a lost connection says whether
    # the call may have been applied (True only for a write sent whose answer never came):
    outcome_unknown: bool
    #: the server closed the connection, saying why (its goodbye, or a refused login)
    server_closed: bool
    #: a pipeline's answers that came before the connection was lost
    answers: list

    def __init__(self, message: str, **details):
        super().__init__(message)
        self.message = message
        self.details = details
        for name, value in details.items():
            setattr(self, name, value)

    def to_answer(self) -> dict:
        """The error as the answer document the wire and ``--json`` send."""
        answer = {"ok": 0, "code": self.code, "codeName": self.codeName, "message": self.message}
        if self.details:
            answer["details"] = self.details
        return answer


class InternalError(HoardError):
    """InternalError is a bug in hoardDB: please report it with the message."""

    code, codeName = 1, "INTERNAL_ERROR"


class BadValueError(HoardError):
    """BadValueError is an argument of the right kind whose value is not accepted."""

    code, codeName = 2, "BAD_VALUE"


class UnknownOptionError(HoardError):
    """UnknownOptionError is an option or key hoardDB does not know; the message lists the known ones."""

    code, codeName = 3, "UNKNOWN_OPTION"


class InvalidNameError(HoardError):
    """InvalidNameError is a database, bucket or field name outside the allowed characters."""

    code, codeName = 4, "INVALID_NAME"


class UnknownStoreTypeError(HoardError):
    """UnknownStoreTypeError is a bucket type that is not one of the six store types."""

    code, codeName = 5, "UNKNOWN_STORE_TYPE"


class DatabaseNotFoundError(HoardError):
    """DatabaseNotFoundError names a database that does not exist."""

    code, codeName = 6, "DATABASE_NOT_FOUND"


class BucketNotFoundError(HoardError):
    """BucketNotFoundError names a bucket that does not exist in its database."""

    code, codeName = 7, "BUCKET_NOT_FOUND"


class BucketExistsError(HoardError):
    """BucketExistsError is a create of a bucket whose name is taken."""

    code, codeName = 8, "BUCKET_EXISTS"


class DatabaseExistsError(HoardError):
    """DatabaseExistsError is a create of a database whose name is taken."""

    code, codeName = 9, "DATABASE_EXISTS"


class VerbNotSupportedError(HoardError):
    """VerbNotSupportedError is a verb the bucket's store type does not have (pop on a hash)."""

    code, codeName = 10, "VERB_NOT_SUPPORTED"


class UnknownVerbError(HoardError):
    """UnknownVerbError is a verb no store type has."""

    code, codeName = 11, "UNKNOWN_VERB"


class LimitExceededError(HoardError):
    """LimitExceededError is a count over its limit, such as peek over 1000 or pop over 100."""

    code, codeName = 12, "LIMIT_EXCEEDED"


class NotADocumentError(HoardError):
    """NotADocumentError is a value given where a document (a mapping) is expected."""

    code, codeName = 13, "NOT_A_DOCUMENT"


class DocumentTooLargeError(HoardError):
    """DocumentTooLargeError is a document whose BSON is over the 16 MiB limit."""

    code, codeName = 14, "DOCUMENT_TOO_LARGE"


class DuplicateKeyError(HoardError):
    """DuplicateKeyError is an insert of a key or unique value that is already used."""

    code, codeName = 0x0F, "DUPLICATE_KEY"


class NotFoundError(HoardError):
    """NotFoundError names a key, blob or claim that does not exist."""

    code, codeName = 16, "NOT_FOUND"


class DataDirLockedError(HoardError):
    """DataDirLockedError is a data directory already opened by another process."""

    code, codeName = 17, "DATA_DIR_LOCKED"


class CorruptDataError(HoardError):
    """CorruptDataError is data on disk that fails its checksum; it is never returned silently."""

    code, codeName = 18, "CORRUPT_DATA"


class ClosedError(HoardError):
    """ClosedError is a call on a database that was closed."""

    code, codeName = 19, "CLOSED"


class SyntaxError_(HoardError):
    """SyntaxError_ is HQL text that does not parse; the message names line and column."""

    code, codeName = 20, "SYNTAX_ERROR"


class MissingKeyError(HoardError):
    """MissingKeyError is a btree document without the field its bucket is keyed by."""

    code, codeName = 21, "MISSING_KEY"


class InvalidArgumentError(HoardError):
    """InvalidArgumentError is an argument of the wrong kind, or a missing or extra one."""

    code, codeName = 22, "INVALID_ARGUMENT"


class StorageError(HoardError):
    """StorageError is the operating system refusing a read or write (disk full, permissions)."""

    code, codeName = 23, "STORAGE_ERROR"


class IndexNotReadyError(HoardError):
    """IndexNotReadyError is a search (or write) an index cannot serve: building, conflicted or unreadable."""

    code, codeName = 24, "INDEX_NOT_READY"


class L2LimitError(HoardError):
    """L2LimitError is a write to a store field (an L2 sub-bucket) past its hard limit of entries."""

    code, codeName = 25, "L2_HARD_LIMIT"


class TooManyElementsError(HoardError):
    """TooManyElementsError is a delete of a document whose store fields hold more than one delete removes."""

    code, codeName = 26, "TOO_MANY_ELEMENTS"


class AuthFailedError(HoardError):
    """AuthFailedError is a refused login: unknown user or wrong password (which one is never said)."""

    code, codeName = 27, "AUTH_FAILED"


class UnauthorizedError(HoardError):
    """UnauthorizedError is an operation the connection's user has no role for, or one sent before authenticating."""

    code, codeName = 28, "UNAUTHORIZED"


class HoardConnectionError(HoardError):
    """HoardConnectionError is a server that cannot be reached, or a connection lost or refused (TLS, limits, restart)."""

    code, codeName = 29, "CONNECTION_ERROR"


#: The name HoardConnectionError had first; kept so that code which catches it goes on working.
ConnectionError_ = HoardConnectionError


class HoardTimeoutError(HoardError):
    """HoardTimeoutError is a server that did not answer in time; the connection is closed, the operation's outcome unknown."""

    code, codeName = 30, "TIMEOUT"


#: The name HoardTimeoutError had first (as HoardConnectionError, named so as not to read as a builtin); kept so that code which catches it goes on working.
TimeoutError_ = HoardTimeoutError


class ProtocolError(HoardError):
    """ProtocolError is bytes on the wire that are not a hoardDB message, or a message out of turn."""

    code, codeName = 31, "PROTOCOL_ERROR"


class ClaimExpiredError(HoardError):
    """ClaimExpiredError is an ack, release or extend of a claim whose lease ran out and whose element was claimed again."""

    code, codeName = 32, "CLAIM_EXPIRED"


class RegexTimeoutError(HoardError):
    """RegexTimeoutError is a regular expression of a filter that matched one value for longer than its limit (regex_timeout)."""

    code, codeName = 33, "REGEX_TIMEOUT"


class PartitionUnavailableError(HoardError):
    """PartitionUnavailableError is a request for a partition of a cluster whose owner node cannot serve it now (down, or not reachable); the message names the node."""

    code, codeName = 34, "PARTITION_UNAVAILABLE"


class ClusterUnavailableError(HoardError):
    """ClusterUnavailableError is a request a cluster node cannot run because etcd, which holds the cluster's map and catalog, does not answer."""

    code, codeName = 35, "CLUSTER_UNAVAILABLE"


class CursorNotFoundError(HoardError):
    """CursorNotFoundError is a ``more`` (or ``close_cursor``) of a cursor that is not open: read to its end, closed, timed out when idle, opened on another connection, or freed with its connection or database."""

    code, codeName = 36, "CURSOR_NOT_FOUND"


class WriteConflictError(HoardError):
    """WriteConflictError is a write that picks one document by a filter over a spread bucket (find_and_modify, update with multi: false) whose chosen document kept changing before it could be written; nothing was written, and it may be sent again."""

    code, codeName = 37, "WRITE_CONFLICT"


#: Every error class by its code: the wire and the shell map answers back through it.
ERRORS: dict[int, type[HoardError]] = {}
for _cls in list(globals().values()):
    if isinstance(_cls, type) and issubclass(_cls, HoardError) and _cls is not HoardError:
        assert ERRORS.setdefault(_cls.code, _cls) is _cls, f"two errors share code {_cls.code}"  # (an alias is one)


def error_from_answer(answer: dict) -> HoardError:
    """The exception an error answer ``{ok: 0, code, codeName, message}`` stands for."""
    code = answer.get("code")
    cls = ERRORS.get(code, HoardError) if isinstance(code, int) else HoardError
    err = cls(answer.get("message", ""), **(answer.get("details") or {}))
    if cls is HoardError:
        err.code, err.codeName = answer.get("code", 1), answer.get("codeName", "INTERNAL_ERROR")
    return err
