"""The Host/Origin guard every memmy HTTP service on loopback applies (the daemon's middleware and ``memmy serve``):
a request whose ``Host`` names some other site (DNS rebinding) or whose ``Origin`` is a foreign web page or ``null``
is refused before any route runs. Plain functions over an ASGI scope; standard library only, so both
``memmy.server`` and ``memmy.agent`` may import it."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

Scope = Mapping[str, Any]

HOST_MESSAGE = "the Host header does not name this loopback service (DNS rebinding guard)"
ORIGIN_MESSAGE = "cross-origin requests are refused (only this service's own origin and server.allowedOrigins)"


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused: HTTP status, a stable code and a message."""

    status: int
    code: str
    message: str


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of the header ``name`` (lower-case bytes) in an ASGI scope."""
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def is_loopback_name(host: str) -> bool:
    """``localhost`` or a loopback IP address (brackets allowed)."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def served_address(scope: Scope) -> tuple[str, int | None]:
    """The address and port the request came in on (the ASGI ``server`` entry)."""
    server = scope.get("server") or ("127.0.0.1", None)
    return str(server[0]), (int(server[1]) if server[1] is not None else None)


def host_allowed(host_header: str | None, scope: Scope) -> bool:
    """The ``Host`` names a loopback address (or the bound address) and the port the service serves.

    A page that reached the service through DNS rebinding sends its own name (``evil.example:18960``) and is refused.
    """
    if host_header is None:
        return True  # HTTP/1.0 without Host: not a browser
    try:
        parts = urlsplit(f"//{host_header}")
        name, port = parts.hostname or "", parts.port
    except ValueError:
        return False
    bound, served_port = served_address(scope)
    if not (is_loopback_name(name) or name == bound.strip("[]").lower()):
        return False
    return port is None or served_port is None or port == served_port


def origin_allowed(origin: str | None, scope: Scope, allowed: tuple[str, ...] = ()) -> bool:
    """Only the service's own loopback origin and the configured allowed origins may call from a browser.

    No ``Origin`` (curl, hooks, plugins, SDKs) is fine; ``null`` (sandboxed iframes, ``file://``) and every other
    site are refused, so a web page can neither write nor read.
    """
    if origin is None:
        return True
    origin = origin.strip().rstrip("/")
    if origin in allowed:
        return True
    if origin.lower() == "null":
        return False
    try:
        parts = urlsplit(origin)
        name, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return False
    _bound, served_port = served_address(scope)
    return parts.scheme == "http" and is_loopback_name(name) and (served_port is None or port == served_port)


def refusal(scope: Scope, allowed_origins: tuple[str, ...] = (), check_host: bool = True) -> Refusal | None:
    """The guard's verdict for one request: None when it may go on, else a 421 (Host) or 403 (Origin)."""
    if check_host and not host_allowed(header(scope, b"host"), scope):
        return Refusal(421, "misdirected_request", HOST_MESSAGE)
    if not origin_allowed(header(scope, b"origin"), scope, allowed_origins):
        return Refusal(403, "forbidden", ORIGIN_MESSAGE)
    return None
