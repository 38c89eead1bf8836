"""Idempotency keys of write requests: a request carrying ``adapterId`` + ``requestId`` is answered once; a retry
gets the stored answer (``duplicate: true``), a reused key with another body is a conflict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memmy.domain import stable_hash

#: The body keys of an idempotency key (any write route with an ``idempotency`` operation takes them).
IDEMPOTENCY_KEYS = ("adapterId", "requestId")


@dataclass(frozen=True)
class IdempotencyKey:
    """The stored key of one request and the hash of what it asked."""

    key: str
    request_hash: str


def idempotency_key(op: str, body: Any) -> IdempotencyKey | None:
    """The request's key for operation ``op`` (None when the body carries no ``adapterId``/``requestId``)."""
    if not isinstance(body, dict) or not body.get("adapterId") or not body.get("requestId"):
        return None
    fingerprint = {k: v for k, v in body.items() if k not in ("adapterId", "requestId")}
    return IdempotencyKey(
        f"{op}:{body['adapterId']}:{body['requestId']}", stable_hash({"operation": op, "fingerprint": fingerprint})
    )
