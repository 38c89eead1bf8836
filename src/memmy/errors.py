"""Domain errors shared by every layer.

Each error carries a stable ``code`` that the HTTP layer maps to a status and the
CLI maps to an exit code; messages are written for the person who will read them.
"""

from __future__ import annotations


class MemmyError(Exception):
    """Base class for every error memmy raises on purpose."""

    code = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(MemmyError):
    """The caller sent something malformed or out of range."""

    code = "invalid_argument"


class Unauthorized(MemmyError):
    """A token was required and missing or wrong."""

    code = "unauthorized"


class Forbidden(MemmyError):
    """The operation is disabled by configuration."""

    code = "forbidden"


class NotFound(MemmyError):
    """An id that does not exist (or no longer exists)."""

    code = "not_found"


class Conflict(MemmyError):
    """The request conflicts with current state (closed session, reused key...)."""

    code = "conflict"


class ConfigError(MemmyError):
    """The configuration file or environment is invalid."""

    code = "invalid_config"


class StoreError(MemmyError):
    """The SQLite store cannot be opened, migrated or locked."""

    code = "store_error"


class EmbeddingError(MemmyError):
    """An embedding backend failed (model missing, endpoint down, bad answer)."""

    code = "embedding_failed"


class StorageFullError(MemmyError):
    """The store cannot write: the disk (or its quota) is full, or SQLite reports an I/O error."""

    code = "storage_full"


class StoreDamaged(MemmyError):
    """The store met damage while it runs: the full-text index was rebuilt (retry), or ``doctor`` names the rest."""

    code = "store_damaged"


#: SQLite messages that mean "the store cannot write right now" (disk full, quota, I/O failure, read-only file).
_STORAGE_FAILURES = (
    "database or disk is full",
    "disk i/o error",
    "no space left on device",
    "disk quota exceeded",
    "attempt to write a readonly database",
)


def storage_failure(exc: BaseException) -> StorageFullError | None:
    """A :class:`StorageFullError` naming the cause when ``exc`` is SQLite's disk-full or I/O error, else None."""
    if isinstance(exc, StorageFullError):
        return exc
    text = str(exc).lower()
    if isinstance(exc, OSError) and getattr(exc, "errno", None) in (28, 122):  # ENOSPC, EDQUOT
        text = "no space left on device"
    if not any(marker in text for marker in _STORAGE_FAILURES):
        return None
    return StorageFullError(
        f"the memory store cannot write ({text.strip()}): free disk space where the database lives, "
        "then retry; nothing of this request was saved"
    )


HTTP_STATUS_BY_CODE: dict[str, int] = {
    "invalid_argument": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "misdirected_request": 421,
    "invalid_json": 400,
    "rate_limited": 429,
    "storage_full": 507,
    "store_damaged": 503,
}


def http_status_for(code: str) -> int:
    """Return the HTTP status for an error code (500 for anything unknown)."""
    return HTTP_STATUS_BY_CODE.get(code, 500)
