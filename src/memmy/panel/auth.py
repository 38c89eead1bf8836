"""Panel sign-in: one-time links, the session cookie, CSRF tokens and the Host/Origin check.

``memmy-memory panel`` asks the daemon (with the API token) for a one-time link; opening it sets an HttpOnly,
SameSite=Strict cookie scoped to ``/panel`` and redirects to the panel. Sessions live in the daemon's memory
(a restart signs everyone out). Every state-changing request must carry the session's CSRF token (a hidden form
field or the ``x-csrf-token`` header) and come from a loopback Host/Origin.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.requests import Request

COOKIE = "memmy_panel"
LINK_TTL_S = 600.0
SESSION_TTL_S = 12 * 3600.0
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


@dataclass
class PanelSession:
    """One signed-in browser."""

    id: str
    csrf: str
    expires: float


def host_allowed(request: Request) -> bool:
    """The Host header names a loopback address (DNS-rebinding guard) and any Origin is loopback too."""
    host = request.headers.get("host", "")
    hostname = urlsplit(f"http://{host}").hostname or ""
    if hostname not in LOOPBACK_HOSTS and f"[{hostname}]" not in LOOPBACK_HOSTS:
        return False
    origin = request.headers.get("origin")
    if origin and origin != "null":
        return (urlsplit(origin).hostname or "") in LOOPBACK_HOSTS
    return True


class PanelAuth:
    """One-time sign-in codes and cookie sessions, in memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._codes: dict[str, float] = {}
        self._sessions: dict[str, PanelSession] = {}

    def new_link_code(self) -> str:
        """A single-use code valid for ten minutes."""
        code = secrets.token_urlsafe(32)
        with self._lock:
            now = time.monotonic()
            self._codes = {c: t for c, t in self._codes.items() if t > now}
            self._codes[code] = now + LINK_TTL_S
        return code

    def redeem(self, code: str) -> PanelSession | None:
        """Spend a code: a new session, or None when the code is unknown, used or expired."""
        with self._lock:
            expires = self._codes.pop(code, None)
            if expires is None or expires < time.monotonic():
                return None
            session = PanelSession(secrets.token_urlsafe(32), secrets.token_urlsafe(24), time.time() + SESSION_TTL_S)
            self._sessions[session.id] = session
            return session

    def session(self, request: Request) -> PanelSession | None:
        """The request's live session (from the cookie), if any."""
        sid = request.cookies.get(COOKIE)
        if not sid:
            return None
        with self._lock:
            session = self._sessions.get(sid)
            if session is None or session.expires < time.time():
                self._sessions.pop(sid, None)
                return None
            return session

    def sign_out(self, session: PanelSession) -> None:
        """Forget a session."""
        with self._lock:
            self._sessions.pop(session.id, None)

    @staticmethod
    def csrf_ok(session: PanelSession, presented: str | None) -> bool:
        """Constant-time comparison of the presented CSRF token."""
        return bool(presented) and hmac.compare_digest(str(presented).encode(), session.csrf.encode())

    @staticmethod
    def cookie_header(session: PanelSession) -> str:
        """The Set-Cookie value for a new session."""
        return f"{COOKIE}={session.id}; Path=/panel; HttpOnly; SameSite=Strict; Max-Age={int(SESSION_TTL_S)}"
