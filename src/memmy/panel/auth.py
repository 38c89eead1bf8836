"""Panel sign-in: the shared cookie sign-in of :mod:`memmy.signin` with the panel's cookie, scoped to ``/panel``.

``memmy-memory panel`` asks the daemon (with the API token) for a one-time link; opening it sets an HttpOnly,
SameSite=Strict cookie scoped to ``/panel`` and redirects to the panel. Sessions are kept in
``<memmy home>/panel-sessions.json`` (mode 0600) as SHA-256 hashes of the session ids with their expiry; every
state-changing request must carry the session's CSRF token and come from a loopback Host/Origin.
"""

from __future__ import annotations

from pathlib import Path

from memmy.signin import LINK_TTL_S, LOOPBACK_HOSTS, SESSION_TTL_S, CookieAuth, csrf_for, host_allowed, session_hash
from memmy.signin import CookieSession as PanelSession

COOKIE = "memmy_panel"
SESSIONS_FILE = "panel-sessions.json"

__all__ = [
    "COOKIE",
    "LINK_TTL_S",
    "LOOPBACK_HOSTS",
    "SESSIONS_FILE",
    "SESSION_TTL_S",
    "PanelAuth",
    "PanelSession",
    "csrf_for",
    "host_allowed",
    "session_hash",
]


class PanelAuth(CookieAuth):
    """One-time sign-in codes and cookie sessions of the panel (cookie ``memmy_panel``, path ``/panel``)."""

    def __init__(self, store: Path | None = None) -> None:
        super().__init__(store, COOKIE, "/panel")
