"""Panel sign-in: one-time links, the session cookie, CSRF tokens and the Host/Origin check.

``memmy-memory panel`` asks the daemon (with the API token) for a one-time link; opening it sets an HttpOnly,
SameSite=Strict cookie scoped to ``/panel`` and redirects to the panel. Sessions are kept in
``<memmy home>/panel-sessions.json`` (mode 0600) as SHA-256 hashes of the session ids with their expiry, so a
signed-in browser stays signed in across daemon restarts while the file never holds a usable cookie; signing out
removes the hash. Every state-changing request must carry the session's CSRF token (a hidden form field or the
``x-csrf-token`` header; derived from the session id, so it survives restarts too) and come from a loopback
Host/Origin.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from starlette.requests import Request

from memmy.integrations.plan import atomic_write

COOKIE = "memmy_panel"
LINK_TTL_S = 600.0
SESSION_TTL_S = 12 * 3600.0
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
SESSIONS_FILE = "panel-sessions.json"
log = logging.getLogger("memmy.panel")


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


def session_hash(session_id: str) -> str:
    """What the sessions file keeps for a session id (never the id itself)."""
    return hashlib.sha256(session_id.encode()).hexdigest()


def csrf_for(session_id: str) -> str:
    """The session's CSRF token: an HMAC of a fixed label under the session id (not stored anywhere)."""
    return hmac.new(session_id.encode(), b"memmy-panel-csrf", hashlib.sha256).hexdigest()


class PanelAuth:
    """One-time sign-in codes (in memory) and cookie sessions (hashed, in ``store`` when given)."""

    def __init__(self, store: Path | None = None) -> None:
        self._lock = threading.Lock()
        self._codes: dict[str, float] = {}
        self._store = store
        self._sessions: dict[str, float] = self._load()  # session hash -> expiry (epoch seconds)

    def _load(self) -> dict[str, float]:
        if self._store is None or not self._store.is_file():
            return {}
        try:
            data = json.loads(self._store.read_text(encoding="utf-8"))
            sessions = {str(k): float(v) for k, v in (data.get("sessions") or {}).items()}
        except (OSError, ValueError, AttributeError, TypeError):
            log.warning("%s is unreadable; panel sessions start empty (sign in again)", self._store)
            return {}
        now = time.time()
        return {k: v for k, v in sessions.items() if v > now}

    def _save(self) -> None:
        """Write the live session hashes (called with the lock held)."""
        if self._store is None:
            return
        now = time.time()
        self._sessions = {k: v for k, v in self._sessions.items() if v > now}
        try:
            atomic_write(self._store, json.dumps({"sessions": self._sessions}, indent=1) + "\n", 0o600)
        except OSError as exc:  # the session still works until the daemon restarts
            log.warning("could not save panel sessions to %s: %s", self._store, exc)

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
            session_id = secrets.token_urlsafe(32)
            session = PanelSession(session_id, csrf_for(session_id), time.time() + SESSION_TTL_S)
            self._sessions[session_hash(session_id)] = session.expires
            self._save()
            return session

    def session(self, request: Request) -> PanelSession | None:
        """The request's live session (from the cookie), if any."""
        sid = request.cookies.get(COOKIE)
        if not sid:
            return None
        key = session_hash(sid)
        with self._lock:
            expires = self._sessions.get(key)
            if expires is None:
                return None
            if expires < time.time():
                self._sessions.pop(key, None)
                self._save()
                return None
            return PanelSession(sid, csrf_for(sid), expires)

    def sign_out(self, session: PanelSession) -> None:
        """Revoke a session (here and in the sessions file)."""
        with self._lock:
            if self._sessions.pop(session_hash(session.id), None) is not None:
                self._save()

    @staticmethod
    def csrf_ok(session: PanelSession, presented: str | None) -> bool:
        """Constant-time comparison of the presented CSRF token."""
        return bool(presented) and hmac.compare_digest(str(presented).encode(), session.csrf.encode())

    @staticmethod
    def cookie_header(session: PanelSession) -> str:
        """The Set-Cookie value for a new session."""
        return f"{COOKIE}={session.id}; Path=/panel; HttpOnly; SameSite=Strict; Max-Age={int(SESSION_TTL_S)}"
