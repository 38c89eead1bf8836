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


class StorageFullError(MemmyError):
    """The disk holding the store is full: the write was not saved."""

    code = "storage_full"


class EmbeddingError(MemmyError):
    """An embedding backend failed (model missing, endpoint down, bad answer)."""

    code = "embedding_failed"


HTTP_STATUS_BY_CODE: dict[str, int] = {
    "invalid_argument": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "payload_too_large": 413,
    "rate_limited": 429,
}


def http_status_for(code: str) -> int:
    """Return the HTTP status for an error code (500 for anything unknown)."""
    return HTTP_STATUS_BY_CODE.get(code, 500)
