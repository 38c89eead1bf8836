"""The CLI's side of the daemon client: URL/token/user resolution and a :class:`~memmy.daemon_client.DaemonClient`
built from it (``ClientError`` is its :class:`~memmy.daemon_client.DaemonError`)."""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from memmy.config import MemmyConfig, load_config
from memmy.config_defaults import DEFAULT_ENDPOINT
from memmy.daemon_client import DaemonClient, DaemonError
from memmy.hook.runtime import team_project, team_settings

#: A request the daemon refused, or a daemon that could not be reached.
ClientError = DaemonError


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


def connect(settings: ClientSettings) -> DaemonClient:
    """The daemon client for these settings: the token and the caller's identity on every request, ``--source``
    in every written body, HTTPS verified with the team server's CA when one is configured."""
    return DaemonClient(
        settings.url,
        token=settings.token,
        headers=settings.identity_headers(),
        timeout_s=settings.timeout_s,
        source_in_body=settings.source,
        verify=settings.verify(),
    )


def default_db_path_hint(config: MemmyConfig | None) -> Path | None:
    """The configured database path, for messages."""
    return config.storage.sqlite_path if config is not None else None
