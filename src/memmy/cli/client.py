"""The CLI's side of the daemon client: URL/token/user resolution and a :class:`~memmy.daemon_client.DaemonClient`
built from it (``ClientError`` is its :class:`~memmy.daemon_client.DaemonError`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from memmy.config import MemmyConfig, load_config
from memmy.config_defaults import DEFAULT_ENDPOINT
from memmy.daemon_client import DaemonClient, DaemonError

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
        return cls(
            url=resolved_url.rstrip("/"),
            token=resolved_token,
            user_id=resolved_user,
            source=source,
            workspace_path=os.getcwd(),
        )


def load_cli_config(path: str | None) -> MemmyConfig | None:
    """Load config for the CLI; a missing default file is fine, a broken one is an error."""
    return load_config(path)


def connect(settings: ClientSettings) -> DaemonClient:
    """The daemon client for these settings: the token and the caller's identity on every request, ``--source``
    in every written body."""
    headers = {}
    if settings.user_id:
        headers["x-memmy-user-id"] = settings.user_id
    if settings.workspace_path:
        headers["x-memmy-workspace-path"] = settings.workspace_path
    if settings.source:
        headers["x-memmy-source"] = settings.source
    return DaemonClient(
        settings.url,
        token=settings.token,
        headers=headers,
        timeout_s=settings.timeout_s,
        source_in_body=settings.source,
    )


def default_db_path_hint(config: MemmyConfig | None) -> Path | None:
    """The configured database path, for messages."""
    return config.storage.sqlite_path if config is not None else None
