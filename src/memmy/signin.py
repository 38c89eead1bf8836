"""Browser sign-in for memmy's local web pages (the Memory panel at ``/panel``, the workbench of ``memmy serve``):
one-time links, an HttpOnly SameSite=Strict session cookie, CSRF tokens and the loopback Host/Origin check.

A CLI command that holds the service's token asks for a one-time code; opening the link spends it and sets the
cookie (scoped to the page's path). Sessions are kept in a file (mode 0600) as SHA-256 hashes of the session ids
with their expiry, so a signed-in browser stays signed in across restarts while the file never holds a usable
cookie; signing out removes the hash. Every state-changing request must carry the session's CSRF token (a hidden
form field or the ``x-csrf-token`` header; an HMAC under the session id, so it survives restarts too) and come
from a loopback Host/Origin. Starlette and the standard library only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from starlette.requests import Request

LINK_TTL_S = 600.0
SESSION_TTL_S = 12 * 3600.0
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
log = logging.getLogger("memmy.signin")


@dataclass
class CookieSession:
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


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (mode 0600) through a temporary file and an atomic rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class CookieAuth:
    """One-time sign-in codes (in memory) and cookie sessions (hashed, in ``store`` when given).

    ``cookie`` is the cookie's name and ``path`` its ``Path`` attribute (``/panel``, ``/``).
    """

    def __init__(self, store: Path | None, cookie: str, path: str) -> None:
        self._lock = threading.Lock()
        self._codes: dict[str, float] = {}
        self._store = store
        self.cookie = cookie
        self.path = path
        self._sessions: dict[str, float] = self._load()  # session hash -> expiry (epoch seconds)

    def _load(self) -> dict[str, float]:
        if self._store is None or not self._store.is_file():
            return {}
        try:
            data = json.loads(self._store.read_text(encoding="utf-8"))
            sessions = {str(k): float(v) for k, v in (data.get("sessions") or {}).items()}
        except (OSError, ValueError, AttributeError, TypeError):
            log.warning("%s is unreadable; browser sessions start empty (sign in again)", self._store)
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
            _write_private(self._store, json.dumps({"sessions": self._sessions}, indent=1) + "\n")
        except OSError as exc:  # the session still works until the process restarts
            log.warning("could not save browser sessions to %s: %s", self._store, exc)

    def new_link_code(self) -> str:
        """A single-use code valid for ten minutes."""
        code = secrets.token_urlsafe(32)
        with self._lock:
            now = time.monotonic()
            self._codes = {c: t for c, t in self._codes.items() if t > now}
            self._codes[code] = now + LINK_TTL_S
        return code

    def redeem(self, code: str) -> CookieSession | None:
        """Spend a code: a new session, or None when the code is unknown, used or expired."""
        with self._lock:
            expires = self._codes.pop(code, None)
            if expires is None or expires < time.monotonic():
                return None
            session_id = secrets.token_urlsafe(32)
            session = CookieSession(session_id, csrf_for(session_id), time.time() + SESSION_TTL_S)
            self._sessions[session_hash(session_id)] = session.expires
            self._save()
            return session

    def session(self, request: Request) -> CookieSession | None:
        """The request's live session (from the cookie), if any."""
        sid = request.cookies.get(self.cookie)
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
            return CookieSession(sid, csrf_for(sid), expires)

    def sign_out(self, session: CookieSession) -> None:
        """Revoke a session (here and in the sessions file)."""
        with self._lock:
            if self._sessions.pop(session_hash(session.id), None) is not None:
                self._save()

    @staticmethod
    def csrf_ok(session: CookieSession, presented: str | None) -> bool:
        """Constant-time comparison of the presented CSRF token."""
        return bool(presented) and hmac.compare_digest(str(presented).encode(), session.csrf.encode())

    def cookie_header(self, session: CookieSession) -> str:
        """The Set-Cookie value for a new session."""
        return f"{self.cookie}={session.id}; Path={self.path}; HttpOnly; SameSite=Strict; Max-Age={int(SESSION_TTL_S)}"

    def clear_cookie_header(self) -> str:
        """The Set-Cookie value that removes the cookie (signing out)."""
        return f"{self.cookie}=; Path={self.path}; HttpOnly; SameSite=Strict; Max-Age=0"
