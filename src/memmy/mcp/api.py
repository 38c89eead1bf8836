"""How the MCP tools reach the daemon's ``/api/v1`` routes: a :class:`~memmy.daemon_client.DaemonClient` (async
side), over the network (the stdio server, ``base_url`` is the daemon's URL) or in-process (the daemon's ``/mcp``
endpoint passes an :class:`httpx.ASGITransport` wrapping the daemon app). Either way a request goes through the
same routes, token check, validation and error envelope.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import TYPE_CHECKING

from memmy.daemon_client import DaemonClient, TokenSource, Wording
from memmy.daemon_client.client import Reviver

if TYPE_CHECKING:
    import httpx

#: Identity headers a caller may set (see docs/api.md "Caller identity").
IDENTITY_HEADERS = (
    "x-memmy-user-id",
    "x-memmy-source",
    "x-memmy-workspace-path",
    "x-memmy-project-id",
    "x-memmy-session-key",
    "x-memmy-profile-id",
)
#: The MCP tools' words for a daemon they cannot reach (docs/mcp.md).
MCP_WORDING = Wording(
    unreachable="the memmy memory service is not reachable at {url} (start it with `memmy-memory serve`)",
    timeout="the memmy memory service at {url} did not answer in time",
    client="this MCP server",
)


def api_client(
    base_url: str,
    *,
    token: TokenSource = None,
    headers: Mapping[str, str] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    revive: Reviver | None = None,
    verify: ssl.SSLContext | bool = True,
) -> DaemonClient:
    """The tools' client of the daemon (a slow tool such as a big search may take two minutes)."""
    return DaemonClient(
        base_url,
        token=token,
        headers=headers,
        timeout_s=120.0,
        wording=MCP_WORDING,
        async_transport=transport,
        revive=revive,
        verify=verify,
    )
