"""The exceptions of embtier.

Every exception derives from :class:`Error` and from the built-in a Python
user would reach for: an id out of range is an :class:`IndexError`, an
unknown table a :class:`KeyError`, a bad length, shape, offset or a NaN a
:class:`ValueError`, a corrupt or unreadable file an :class:`OSError`.
Each carries the facts the Rust error carries as attributes (``table``,
``id``, ``rows``, ``path``, ``offset``, ...); an attribute the error has no
value for is ``None``.
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = [
    "Error",
    "IdOutOfRangeError",
    "UnknownTableError",
    "InvalidArgumentError",
    "ArgumentTypeError",
    "ConfigError",
    "ClosedError",
    "CorruptError",
    "StorageError",
    "DiskFullError",
    "PoisonedError",
    "LockedError",
    "ForkedError",
    "AlreadyExistsError",
    "NotAStoreError",
]


class Error(Exception):
    """Base of every embtier exception."""

    #: The table the error is about.
    table: Optional[str] = None
    #: The row id the error is about.
    id: Optional[int] = None
    #: The file the error is about.
    path: Optional[str] = None
    #: The byte offset in ``path`` the error names.
    offset: Optional[int] = None

    def __init__(self, message: str, **facts: Any) -> None:
        super().__init__(message)
        self.message = message
        for k, v in facts.items():
            setattr(self, k, v)

    def __str__(self) -> str:
        return self.message


class IdOutOfRangeError(Error, IndexError):
    """A row id at or past the table's row count (``id``, ``rows``)."""

    #: The table's row count: valid ids are ``0 .. rows``.
    rows: Optional[int] = None


class UnknownTableError(Error, KeyError):
    """No table of that name (``table``)."""


class InvalidArgumentError(Error, ValueError):
    """A wrong length, shape, dtype-compatible value, offset, NaN or mode.

    ``argument`` names the argument; ``expected`` and ``got`` the sizes
    when a length is wrong; ``at`` the offending entry of ``offsets``.
    """

    argument: Optional[str] = None
    expected: Optional[int] = None
    got: Optional[int] = None
    at: Optional[int] = None


class ArgumentTypeError(Error, TypeError):
    """An argument of the wrong type: not a numpy array (or tensor), the
    wrong dtype, or an array that cannot be read in place (``argument``)."""

    argument: Optional[str] = None


class ConfigError(Error, ValueError):
    """A configuration the store cannot take (``reason``; ``key``, where
    a config dict's value is what is wrong, names it, as
    ``config["tables"][0]["rows"]``; ``table``, where the setting is one
    table's, names the table)."""

    reason: Optional[str] = None
    key: Optional[str] = None
    table: Optional[str] = None


class ClosedError(Error, ValueError):
    """The store was closed; open it again."""


class StorageError(Error, OSError):
    """An I/O failure on a store file (``path``, ``offset``, ``errno``)."""


class CorruptError(StorageError):
    """Damaged bytes in a store file (``path``, ``offset``, and for a row,
    ``table`` and ``id``): never served as values."""


class DiskFullError(StorageError):
    """The file system is full (``path``, ``offset``; ``errno`` 28,
    ENOSPC)."""


class PoisonedError(StorageError):
    """The store refuses writes after a failed sync; reopen it."""


class LockedError(StorageError):
    """Another process holds the store open (``path``, ``pid``)."""

    pid: Optional[int] = None


class ForkedError(Error, RuntimeError):
    """The store was opened by another process, which this one was forked
    from (a DataLoader worker with the fork start method, ``os.fork``):
    the fork's copy of a store takes no calls (``pid``, the opener). Make
    the store's calls in the process that opened it; a ``close()`` or the
    copy's collection in the child does nothing."""

    pid: Optional[int] = None


class AlreadyExistsError(Error, FileExistsError):
    """``create`` found a store or other files at ``path``."""


class NotAStoreError(Error, FileNotFoundError):
    """``path`` holds no embtier store."""
