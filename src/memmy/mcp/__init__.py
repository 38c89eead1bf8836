"""memmy's MCP server: memmy and keymem memory tools, trust-gated transcript tools and a system prompt.

Every tool is a thin adapter over the daemon's HTTP API (``/api/v1/...``), whichever transport carries MCP:

- **stdio** (``memmy-memory mcp``): the server process talks to the running daemon over loopback HTTP, starting
  it first when needed; it never opens the database.
- **streamable HTTP** (``/mcp`` on the daemon, :mod:`memmy.mcp.http`): the same tools call the daemon's own
  ASGI app in-process, through the same routes, auth, validation and error envelope.

Modules: :mod:`~memmy.mcp.api` (the tools' :class:`~memmy.daemon_client.DaemonClient`), :mod:`~memmy.mcp.tools`
(tool registry, argument validation and the memmy tools), :mod:`~memmy.mcp.keymem` (keymem tools),
:mod:`~memmy.mcp.transcripts` (host transcripts), :mod:`~memmy.mcp.prompts`, :mod:`~memmy.mcp.server` (the MCP
server and stdio runner) and :mod:`~memmy.mcp.http` (the ASGI endpoint).

Nothing is imported here: the MCP SDK takes about a second to import, and ``memmy.mcp.http`` must stay cheap to
import for the daemon (it loads the SDK on the first ``/mcp`` request).
"""
