"""``memmy-memory mcp``: serve memmy's MCP tools on stdin/stdout, backed by the running daemon.

The stdio server never opens the database: every tool is an HTTP call to the one daemon that holds the store
and the embedding model. When the daemon is not answering, the command starts it (``python -m memmy serve``,
detached, output in ``~/.memmy/logs/daemon-autostart.log``), waits for ``/api/v1/health`` and fails with a
clear message when it does not come up. ``--no-start`` turns that off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click

from memmy.cli.client import ClientError, ClientSettings, connect
from memmy.cli.context import CliContext, pass_ctx
from memmy.cli.output import fail
from memmy.config import MemmyConfig, load_config, memmy_home
from memmy.errors import MemmyError

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
POLL_S = 0.2


class DaemonStartError(MemmyError):
    """The daemon is not running and could not be started."""

    code = "unavailable"


def daemon_healthy(settings: ClientSettings) -> bool:
    """True when ``GET /api/v1/health`` answers 200 at the settings' URL (asked without a token: a wrong token
    is the caller's error to report, not a reason to start another daemon)."""
    client = connect(replace(settings, token=None, timeout_s=3.0))
    try:
        client.request("GET", "/health")
        return True
    except ClientError:
        return False
    finally:
        client.close()


def lock_holder(config: MemmyConfig | None) -> dict[str, Any] | None:
    """The live daemon recorded in ``<db>.server.lock`` (pid, host, port), or None."""
    if config is None:
        return None
    path = Path(config.storage.sqlite_path)
    try:
        holder = json.loads(path.with_name(path.name + ".server.lock").read_text())
        pid = int(holder.get("pid", 0))
    except (OSError, ValueError, AttributeError, TypeError):
        return None
    if pid <= 0 or not isinstance(holder, dict):
        return None
    from memmy.service.store_health import holder_if_alive  # lazily: the store layer is not needed otherwise

    return holder_if_alive(holder)  # the same process that wrote the lock, not just a live pid


def spawn_daemon(
    settings: ClientSettings, config_path: str | None, env: Mapping[str, str]
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start ``python -m memmy serve`` on the URL's host and port, detached from this process and its stdio."""
    parts = urlsplit(settings.url)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    if host not in LOOPBACK_HOSTS:
        raise DaemonStartError(
            f"the memmy memory service at {settings.url} is not answering, and it is not on this machine, so it "
            "cannot be started from here; start it there (`memmy-memory serve`) or fix MEMMY_MEMORY_URL"
        )
    home = memmy_home(env)
    (home / "logs").mkdir(parents=True, exist_ok=True)
    log_path = home / "logs" / "daemon-autostart.log"
    command = [sys.executable, "-m", "memmy"]
    if config_path:
        command += ["--config", os.path.abspath(config_path)]
    command += ["serve", "--host", host, "--port", str(port)]
    # The daemon is shared, not this host session's child: do not hand it the host's session id.
    child_env = {k: v for k, v in env.items() if k not in ("CLAUDE_CODE_SESSION_ID", "CODEX_THREAD_ID")}
    if settings.token:
        child_env["MEMMY_MEMORY_TOKEN"] = settings.token
    with log_path.open("ab") as log:
        log.write(f"\n--- {time.strftime('%Y-%m-%dT%H:%M:%S')} memmy-memory mcp: {' '.join(command)}\n".encode())
        log.flush()
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env,
            cwd=str(home),
            start_new_session=True,
            close_fds=True,
        )
    return process, log_path


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def ensure_daemon(
    settings: ClientSettings,
    config: MemmyConfig | None,
    config_path: str | None,
    *,
    start: bool = True,
    timeout_s: float = 90.0,
    env: Mapping[str, str] | None = None,
) -> str:
    """Make sure the daemon answers: ``"running"`` if it already did, ``"started"`` if this call started it."""
    env = os.environ if env is None else env
    if daemon_healthy(settings):
        return "running"
    holder = lock_holder(config)
    if holder is not None and str(holder.get("port")) != str(urlsplit(settings.url).port):
        raise DaemonStartError(
            f"the memory store is served by pid {holder.get('pid')} on {holder.get('host')}:{holder.get('port')}, "
            f"but this command is configured for {settings.url}; set MEMMY_MEMORY_URL or storage.endpoint to match"
        )
    if not start and holder is None:
        raise DaemonStartError(
            f"the memmy memory service is not running at {settings.url}; start it with `memmy-memory serve` "
            "(or drop --no-start to let `memmy-memory mcp` start it)"
        )
    process, log_path = (None, None) if holder is not None else spawn_daemon(settings, config_path, env)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if daemon_healthy(settings):
            return "started" if process is not None else "running"
        if process is not None and log_path is not None and process.poll() is not None:
            if lock_holder(config) is not None:  # another client's daemon won the race; wait for that one
                process = None
                continue
            raise DaemonStartError(
                f"the memmy memory service exited during start-up (exit code {process.returncode}); "
                f"last lines of {log_path}:\n{_tail(log_path)}"
            )
        time.sleep(POLL_S)
    where = f" (pid {process.pid}, log {log_path})" if process is not None else ""
    raise DaemonStartError(
        f"the memmy memory service did not answer at {settings.url}/api/v1/health within {timeout_s:.0f}s{where}"
    )


def identity_headers(settings: ClientSettings) -> dict[str, str]:
    """The ``x-memmy-*`` headers the CLI client would send."""
    return {**settings.identity_headers(), "x-memmy-source": settings.source or "mcp"}


@click.command("mcp")
@click.option("--no-start", is_flag=True, help="Fail instead of starting the daemon when it is not running.")
@click.option(
    "--start-timeout",
    type=click.FloatRange(1, 600),
    default=90.0,
    show_default=True,
    help="Seconds to wait for a daemon this command started.",
)
@pass_ctx
def mcp(obj: CliContext, no_start: bool, start_timeout: float) -> None:
    """Serve the MCP tools on stdin/stdout (for Claude Code, Codex, Cursor, ...), backed by the daemon."""
    # Imported here so other commands never pay for the MCP SDK.
    import anyio

    from memmy.mcp.api import api_client
    from memmy.mcp.server import serve_stdio

    config = obj.config()
    settings = ClientSettings.resolve(
        url=obj.url, token=obj.token, user_id=obj.user_id, source=obj.source or "mcp", config=config
    )
    remote = (urlsplit(settings.url).hostname or "") not in LOOPBACK_HOSTS
    try:
        ensure_daemon(settings, config, obj.config_path, start=not no_start, timeout_s=start_timeout)
    except MemmyError as exc:
        if not remote:
            fail(exc.message)
        # A team server that does not answer now: serve anyway (fail open); each tool call says it is unreachable.
        click.echo(f"warning: {exc.message}", err=True)

    async def main() -> None:
        revive_lock = anyio.Lock()

        async def revive() -> bool:
            """Start the daemon again when it went away mid-session (then the failed call is retried once); a team
            server elsewhere is not this machine's to start."""
            if remote:
                return False
            async with revive_lock:
                try:
                    await anyio.to_thread.run_sync(
                        lambda: ensure_daemon(settings, config, obj.config_path, timeout_s=start_timeout)
                    )
                except MemmyError:
                    return False
                return True

        found: list[str] = []

        def token() -> str | None:
            """The resolved token; without one, the token ``serve`` created in config.yaml (read until found)."""
            if settings.token or found:
                return settings.token or found[0]
            try:
                created = load_config(obj.config_path).storage.token
            except MemmyError:
                return None
            if created:
                found.append(created)
            return created or None

        api = api_client(
            settings.url,
            token=token,
            headers=identity_headers(settings),
            revive=None if no_start else revive,
            verify=settings.verify(),
        )
        await serve_stdio(api)

    anyio.run(main)
