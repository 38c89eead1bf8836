"""``memmy workbench``: find the running ``memmy serve`` (or start it in the background, logging to
``$MEMMY_HOME/agent/serve.log``) and ask it for a one-time sign-in link with the serve token."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from memmy.agent.config import AgentConfig

START_TIMEOUT_S = 30.0


class LaunchError(Exception):
    """Why no link could be had, in words a user can act on."""


def _base(config: AgentConfig) -> str:
    host = config.serve_host if config.serve_host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    return f"http://{'[' + host + ']' if ':' in host else host}:{config.serve_port}"


def healthy(base: str, timeout_s: float = 1.0) -> bool:
    """Whether ``memmy serve`` answers ``GET /health`` at ``base``."""
    try:
        with urllib.request.urlopen(base + "/health", timeout=timeout_s) as answer:
            return bool(json.loads(answer.read()).get("status") == "ok")
    except (OSError, ValueError):
        return False


def start_serve(config: AgentConfig, config_file: str | None) -> subprocess.Popen[bytes]:
    """``memmy serve`` as a detached background process (it outlives this command)."""
    log = config.home / "agent" / "serve.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-c", "from memmy.agent.cli import main; main()"]
    if config_file:
        args += ["--config", config_file]
    args.append("serve")
    detach: dict[str, Any] = (
        {"creationflags": 0x00000200 | 0x00000008}  # CREATE_NEW_PROCESS_GROUP | DETACHED_PROCESS
        if sys.platform == "win32"
        else {"start_new_session": True}
    )
    with open(log, "ab") as out:
        return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=out, **detach)


def sign_in_link(
    config: AgentConfig, config_file: str | None, *, pet: bool, start: bool, say: Callable[[str], None]
) -> str:
    """A one-time sign-in link to the workbench (``/pet`` with ``pet``)."""
    base = _base(config)
    if not healthy(base):
        if not start:
            raise LaunchError(f"memmy serve is not running at {base}: start it with `memmy serve`")
        process = start_serve(config, config_file)
        say(
            f"memmy workbench: started `memmy serve` in the background (pid {process.pid}, log "
            f"{config.home / 'agent' / 'serve.log'}; stop it with `kill {process.pid}`)"
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not healthy(base):
            if process.poll() is not None:
                raise LaunchError(
                    f"memmy serve exited with {process.returncode}: see {config.home / 'agent' / 'serve.log'}"
                )
            if time.monotonic() > deadline:
                raise LaunchError(f"memmy serve did not answer at {base} within {START_TIMEOUT_S:.0f} s")
            time.sleep(0.1)
    request = urllib.request.Request(
        base + "/workbench/link", method="POST", headers={"authorization": f"Bearer {config.serve_token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            url = str(json.loads(answer.read())["url"])
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise LaunchError(f"the process at {base} has no workbench: restart `memmy serve`") from exc
        raise LaunchError(f"{base} refused the sign-in request (HTTP {exc.code}): check serve.token") from exc
    except (OSError, ValueError, KeyError) as exc:
        raise LaunchError(f"no sign-in link from {base}: {exc}") from exc
    return url + ("&next=/pet" if pet else "")
