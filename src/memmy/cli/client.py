"""A thin HTTP client for the daemon, with the CLI's URL/token/user resolution and friendly errors."""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # httpx loads on the first request: `--help` and local commands never pay for it
    import httpx

from memmy.config import MemmyConfig, load_config
from memmy.config_defaults import DEFAULT_ENDPOINT
from memmy.errors import MemmyError
from memmy.hook.runtime import team_project, team_settings


class ClientError(MemmyError):
    """A request the daemon refused, or a daemon that could not be reached."""

    def __init__(self, message: str, status: int | None = None, code: str = "client_error") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def _first_env(env: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        if env.get(name):
            return env[name]
    return None


@dataclass(frozen=True)
class ClientSettings:
    """Where to send requests and as whom."""

    url: str
    token: str | None
    user_id: str | None
    source: str | None
    workspace_path: str | None
    timeout_s: float = 30.0
    #: The private CA a team server's certificate is verified with (None: the system's CAs).
    ca: str | None = None
    #: The team project the working folder opted into (``memmy-memory team share``).
    team_project: str | None = None

    def identity_headers(self) -> dict[str, str]:
        """The ``x-memmy-*`` headers of this caller (user, workspace, team project, source when set)."""
        headers: dict[str, str] = {}
        if self.user_id:
            headers["x-memmy-user-id"] = self.user_id
        if self.workspace_path:
            headers["x-memmy-workspace-path"] = self.workspace_path
        if self.team_project:
            headers["x-memmy-team-project"] = self.team_project
        if self.source:
            headers["x-memmy-source"] = self.source
        return headers

    def verify(self) -> ssl.SSLContext | bool:
        """What HTTPS is verified with: the team server's private CA, else the system's (never off)."""
        return ssl.create_default_context(cafile=self.ca) if self.ca else True

    @classmethod
    def resolve(
        cls,
        *,
        url: str | None,
        token: str | None,
        user_id: str | None,
        source: str | None,
        config: MemmyConfig | None,
        env: Mapping[str, str] | None = None,
    ) -> ClientSettings:
        """flag > env (MEMMY_MEMORY_URL|MEMORY_SERVICE_URL, ..._TOKEN) > config > http://127.0.0.1:18960."""
        env = os.environ if env is None else env
        tree = config.tree if config is not None else {}
        storage = tree.get("storage", {}) if tree else {}
        resolved_url = (
            url
            or _first_env(env, "MEMMY_MEMORY_URL", "MEMORY_SERVICE_URL")
            or storage.get("endpoint")
            or tree.get("endpoint")
            or DEFAULT_ENDPOINT
        )
        resolved_token = (
            token or _first_env(env, "MEMMY_MEMORY_TOKEN", "MEMORY_SERVICE_TOKEN") or storage.get("token") or None
        )
        resolved_user = user_id or _first_env(env, "MEMMY_MEMORY_USER_ID", "MEMMY_USER_ID", "MEMORY_SERVICE_USER_ID")
        team = team_settings()
        workspace = os.getcwd()
        return cls(
            url=resolved_url.rstrip("/"),
            token=resolved_token,
            user_id=resolved_user,
            source=source,
            workspace_path=workspace,
            ca=team["ca"],
            team_project=team_project(team["teams"], workspace),
        )


def load_cli_config(path: str | None) -> MemmyConfig | None:
    """Load config for the CLI; a missing default file is fine, a broken one is an error."""
    return load_config(path)


class MemoryClient:
    """Calls ``/api/v1/...`` on the daemon."""

    def __init__(self, settings: ClientSettings, transport: httpx.BaseTransport | None = None) -> None:
        import httpx

        self.settings = settings
        headers = {"accept": "application/json", **settings.identity_headers()}
        if settings.token:
            headers["authorization"] = f"Bearer {settings.token}"
        self._http = httpx.Client(
            base_url=settings.url,
            headers=headers,
            timeout=settings.timeout_s,
            transport=transport,
            verify=settings.verify(),
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    @contextmanager
    def stream_events(self, path: str) -> Iterator[Iterator[Any]]:
        """Open a server-sent event stream (``GET /api/v1/<path>``) and yield its decoded ``data`` payloads."""
        import httpx

        url = path if path.startswith("/api/") else "/api/v1" + path
        with self._http.stream("GET", url, timeout=httpx.Timeout(30.0, read=None)) as response:
            if response.status_code >= 400:
                response.read()
                raise ClientError(f"event stream refused: HTTP {response.status_code}", status=response.status_code)
            yield parse_sse(response.iter_lines())

    def request(self, method: str, path: str, body: Any = None, params: Mapping[str, Any] | None = None) -> Any:
        """Send one request; return the decoded JSON or raise :class:`ClientError` with the server's message."""
        import httpx

        if not path.startswith("/"):
            path = "/" + path
        if not path.startswith("/api/"):
            path = "/api/v1" + path
        if body is not None and self.settings.source and isinstance(body, dict) and method.upper() != "GET":
            body = {"source": self.settings.source, **body}
        try:
            response = self._http.request(method.upper(), path, json=body, params=params)
        except httpx.ConnectError:
            raise ClientError(
                f"memmy memory service is not running at {self.settings.url} (start it with `memmy-memory serve`)",
                code="unavailable",
            ) from None
        except httpx.TimeoutException:
            raise ClientError(
                f"memmy memory service at {self.settings.url} did not answer in time", code="timeout"
            ) from None
        try:
            payload = response.json()
        except ValueError:
            payload = None
        if response.status_code >= 400:
            error = payload.get("error") if isinstance(payload, dict) else None
            message = error.get("message") if isinstance(error, dict) else response.text[:300]
            code = error.get("code") if isinstance(error, dict) else "http_error"
            raise ClientError(str(message), status=response.status_code, code=str(code))
        return payload


def parse_sse(lines: Iterator[str]) -> Iterator[Any]:
    """Yield the JSON payload of each ``data:`` line of a server-sent event stream."""
    for line in lines:
        if line.startswith("data: "):
            yield json.loads(line[6:])


def default_db_path_hint(config: MemmyConfig | None) -> Path | None:
    """The configured database path, for messages."""
    return config.storage.sqlite_path if config is not None else None
