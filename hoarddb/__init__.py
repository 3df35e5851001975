"""hoardDB: a document database whose documents own queues, stacks, sorted lists, heaps and files.

    >>> import hoarddb, tempfile
    >>> with hoarddb.open(tempfile.mkdtemp()) as client:
    ...     db = client["app"]
    ...     _ = db.create_bucket("Comments", type="fifo")
    ...     db.Comments.push({"Author": "Bob", "Text": "Nice photo!"})
    ...     db.Comments.pop()
    {'Author': 'Bob', 'Text': 'Nice photo!'}
"""

from __future__ import annotations

from . import errors
from .api import Bucket, Client, Database
from .errors import DuplicateKeyError, HoardError

__all__ = ["open", "Client", "Database", "Bucket", "HoardError", "DuplicateKeyError", "errors"]
__version__ = "0.1.0"


def open(path, **options) -> Client:  # noqa: A001 - the name users expect
    """Open (creating if needed) an embedded database in the data directory ``path``.

    ``options`` are the knobs of :class:`hoarddb.options.Options` (``sync``,
    ``segment_size``, ...); an unknown one is refused, listing them.
    """
    from .engine import Engine
    from .options import Options

    return Client(Engine(path, Options.from_kwargs(**options)))
