"""The one client of the daemon's HTTP API (the hook keeps its own standard-library client, checked against the
same route table by ``tests/test_daemon_client.py``): :class:`DaemonClient`, its errors, and ``routes``, the typed
routes generated from ``memmy/server/routes.py``, and ``answers`` (:mod:`memmy.commands.answers`), their types.
Light to import: httpx loads on the first request."""

from memmy.commands import answers
from memmy.daemon_client.client import (
    AsyncSend,
    DaemonClient,
    DaemonError,
    DaemonTimeout,
    DaemonUnreachable,
    SyncSend,
    TokenSource,
    Wording,
    api_path,
    parse_sse,
)
from memmy.daemon_client.route import Route

__all__ = [
    "answers",
    "AsyncSend",
    "DaemonClient",
    "DaemonError",
    "DaemonTimeout",
    "DaemonUnreachable",
    "Route",
    "SyncSend",
    "TokenSource",
    "Wording",
    "api_path",
    "parse_sse",
]
