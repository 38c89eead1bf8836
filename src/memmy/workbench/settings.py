"""The workbench's Settings page: the configured models with a real connection test, the process's log level,
and a diagnostic report that holds no secret (no key, token, prompt or message). The page's language (English or
Chinese) is a choice of the browser, kept in its local storage."""

from __future__ import annotations

import logging
import platform
import sys
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from memmy import __version__
from memmy.agent.config import AgentConfig, ModelChoice
from memmy.agent.onboard import probe_model
from memmy.signin import CookieSession
from memmy.workbench.turns import Turns

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOGGER = "memmy"


async def json_body(request: Request) -> dict[str, Any]:
    """The JSON object body, or ``{}`` when there is none or it is not an object."""
    try:
        body = await request.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _model(choice: ModelChoice) -> dict[str, Any]:
    return {
        "name": choice.name,
        "provider": choice.provider,
        "model": choice.model,
        "apiBase": choice.api_base,
        "key": bool(choice.api_key),  # whether one is set, never the key
        "contextWindow": choice.context_window,
    }


class Settings:
    """Handlers of ``/api/settings*`` and ``/api/diagnostics``."""

    def __init__(self, config: AgentConfig, turns: Turns) -> None:
        self.config = config
        self.turns = turns
        self.started = time.time()

    def choices(self) -> dict[str, ModelChoice]:
        """The default model and the presets by name."""
        found = dict(self.config.presets)
        if self.config.default is not None:
            found = {"default": self.config.default, **found}
        return found

    async def read(self, request: Request, _: CookieSession) -> Response:
        """Models (slot ``default`` and the presets) and the log level."""
        level = logging.getLevelName(logging.getLogger(LOGGER).getEffectiveLevel())
        models = [_model(c) for c in self.choices().values()]
        return JSONResponse({"models": models, "logLevel": level, "levels": list(LEVELS), "version": __version__})

    async def test(self, request: Request, _: CookieSession) -> Response:
        """``{name}``: a real authenticated call to that model's provider (it lists the provider's models)."""
        choice = self.choices().get(str((await json_body(request)).get("name", "")))
        if choice is None:
            return JSONResponse({"error": "no such model"}, status_code=404)
        ok, message = await probe_model(choice)
        return JSONResponse({"ok": ok, "message": message})

    async def log_level(self, request: Request, _: CookieSession) -> Response:
        """``{level}``: the log level of this process (until it restarts)."""
        level = str((await json_body(request)).get("level", "")).upper()
        if level not in LEVELS:
            return JSONResponse({"error": f"level: one of {', '.join(LEVELS)}"}, status_code=400)
        logging.getLogger(LOGGER).setLevel(level)
        return JSONResponse({"logLevel": level})

    async def diagnostics(self, request: Request, _: CookieSession) -> Response:
        """A report to attach to a bug: versions, platform, models (no keys), counts; no prompts or messages."""
        sessions = self.turns.store.list()
        memory = self.turns.memory
        report = {
            "memmy": __version__,
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "uptimeS": round(time.time() - self.started),
            "models": [{k: v for k, v in _model(c).items() if k != "apiBase"} for c in self.choices().values()],
            "tools": {
                "exec": self.config.tools.exec_enabled,
                "approval": self.config.tools.exec_approval,
                "web": self.config.tools.web_enabled,
                "mcpServers": len(self.config.tools.mcp_servers),
            },
            "memory": {"state": memory.state if memory else "off", "error": bool(memory and memory.error)},
            "sessions": len(sessions),
            "running": len(self.turns.running_ids()),
            "logLevel": logging.getLevelName(logging.getLogger(LOGGER).getEffectiveLevel()),
        }
        headers = {"content-disposition": 'attachment; filename="memmy-diagnostics.json"'}
        return JSONResponse(report, headers=headers)
