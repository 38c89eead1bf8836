"""The workbench's Settings page: the six model slots (:mod:`memmy.agent.slots`), each edited in place (the file's
comments kept, ``${ENV}`` references written as given) with a real connection test; the presets; the page language
(English or Chinese) and notifications, kept in ``workbench.language`` / ``workbench.notifications`` of the config;
the process's log level (``workbench.logLevel``, applied again at the next start); the usage of each slot; and a
diagnostic report that holds no secret (no key, token, prompt or message)."""

from __future__ import annotations

import asyncio
import logging
import platform
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from memmy import __version__
from memmy.agent.config import AgentConfig, ModelChoice, load_agent_config, read_raw, write_agent_sections
from memmy.agent.daemon_link import DaemonError
from memmy.agent.onboard import probe_model
from memmy.agent.slots import SLOTS, Slot, parse_slot, read_slots, section, slot_patch, test_slot
from memmy.agent.usage import UsageBook
from memmy.errors import ConfigError
from memmy.signin import CookieSession
from memmy.workbench.running_turns import Turns

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LANGUAGES = ("en", "zh")
LOGGER = "memmy"
#: Slots the memory daemon reads: an edit applies when it restarts.
MEMORY_SLOTS = ("embedding", "summary", "evolution")


def general(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``workbench.*`` of the config: language ("" follows the browser), notifications, log level ("": default)."""
    tree = section(raw, "workbench")
    language = str(tree.get("language") or "")
    level = str(tree.get("logLevel") or "").upper()
    return {
        "language": language if language in LANGUAGES else "",
        "notifications": bool(tree.get("notifications", False)),
        "logLevel": level if level in LEVELS else "",
    }


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

    def __init__(
        self, config: AgentConfig, turns: Turns, reloaded: Callable[[AgentConfig], None] | None = None
    ) -> None:
        self.config = config
        self.turns = turns
        self.reloaded = reloaded
        self.started = time.time()

    def raw(self) -> dict[str, Any]:
        """The config file as it is now (unexpanded), re-read so an edit elsewhere shows."""
        return read_raw(self.config.path)

    def slots(self) -> dict[str, Slot]:
        """The six slots from the file."""
        return read_slots(self.raw())

    def _write(self, patch: dict[str, Any]) -> None:
        """Write ``patch`` (comments kept) and hand the re-read config to the process."""
        write_agent_sections(self.config.path, patch)
        self.config = load_agent_config(str(self.config.path))
        if self.reloaded is not None:
            self.reloaded(self.config)

    def choices(self) -> dict[str, ModelChoice]:
        """The default model and the presets by name."""
        found = dict(self.config.presets)
        if self.config.default is not None:
            found = {"default": self.config.default, **found}
        return found

    async def read(self, request: Request, _: CookieSession) -> Response:
        """The slots, the models (``default`` and the presets), the general settings and the log level."""
        level = logging.getLevelName(logging.getLogger(LOGGER).getEffectiveLevel())
        models = [_model(c) for c in self.choices().values()]
        raw = await asyncio.to_thread(self.raw)
        return JSONResponse(
            {
                "slots": [s.to_json() for s in read_slots(raw).values()],
                "models": models,
                "general": general(raw),
                "logLevel": level,
                "levels": list(LEVELS),
                "version": __version__,
            }
        )

    async def test(self, request: Request, _: CookieSession) -> Response:
        """``{slot}`` or ``{name}`` (a preset): a real call through it (see :func:`memmy.agent.slots.test_slot`;
        the primary model and the presets list their provider's models)."""
        body = await json_body(request)
        slot = str(body.get("slot") or "")
        if slot and slot != "primary":
            if slot not in SLOTS:
                return JSONResponse({"error": "no such slot"}, status_code=404)
            ok, message = await test_slot(self.slots()[slot].resolved())
            return JSONResponse({"ok": ok, "message": message})
        choice = self.config.default if slot else self.choices().get(str(body.get("name", "")))
        if choice is None:
            return JSONResponse({"error": "no such model"}, status_code=404)
        ok, message = await probe_model(choice)
        return JSONResponse({"ok": ok, "message": message})

    async def save_slot(self, request: Request, _: CookieSession) -> Response:
        """``{slot, provider, model, apiBase, apiKey}``: write the slot (an empty key keeps the one there)."""
        body = await json_body(request)
        name = str(body.get("slot") or "")
        if name not in SLOTS:
            return JSONResponse({"error": "no such slot"}, status_code=404)
        try:
            slot = parse_slot(body, self.slots()[name])
            await asyncio.to_thread(self._write, slot_patch(slot))
        except ConfigError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        note = await self._reload_memory() if name in MEMORY_SLOTS else "saved"
        return JSONResponse({"slot": self.slots()[name].to_json(), "message": note})

    async def _reload_memory(self) -> str:
        """Ask the memory daemon to re-read the file; what the page says about it."""
        memory = self.turns.memory
        if memory is None or not memory.enabled:
            return "saved; restart the memory daemon (memmy-memory serve) to use it"
        try:
            await memory.request("POST", "/admin/reload-config", {})
        except (DaemonError, ValueError):
            return "saved; restart the memory daemon (memmy-memory serve) to use it"
        return "saved and applied by the memory daemon"

    async def usage(self, request: Request, _: CookieSession) -> Response:
        """Today's use per slot: chat, ASR and image from this machine's meter; summary and evolution from the
        memory daemon, with the daily cap that stops them (chat is never stopped)."""
        slots = await asyncio.to_thread(UsageBook(self.config.home).day)
        memory = self.turns.memory
        health = await memory.health() if memory is not None and memory.enabled else None
        meter = ((health or {}).get("evolution") or {}).get("llmUsage") or {}
        for name, counts in (meter.get("slots") or {}).items():
            slots[str(name)] = {"calls": int(counts.get("calls", 0)), "tokens": int(counts.get("tokens", 0)), "cost": 0}
        budget = section(self.raw(), "memmyMemory", "llmBudget")
        cap = {
            "dailyCalls": int(budget.get("dailyCalls", 2000)),
            "dailyTokens": int(budget.get("dailyTokens", 2_000_000)),
            "exhausted": bool(meter.get("exhausted", False)),
            "memory": health is not None,
        }
        rows = [{"slot": name, **slots.get(name, {"calls": 0, "tokens": 0, "cost": 0})} for name in SLOTS]
        return JSONResponse({"slots": rows, "cap": cap})

    async def save_cap(self, request: Request, _: CookieSession) -> Response:
        """``{dailyCalls, dailyTokens}`` (0: no cap): the memory slots' daily cap (``memmyMemory.llmBudget``)."""
        body = await json_body(request)
        cap: dict[str, int] = {}
        for key in ("dailyCalls", "dailyTokens"):
            value = body.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                return JSONResponse({"error": f"{key}: a whole number, 0 for no cap"}, status_code=400)
            cap[key] = value
        await asyncio.to_thread(self._write, {"memmyMemory": {"llmBudget": cap}})
        return JSONResponse({**cap, "message": await self._reload_memory()})

    async def save_general(self, request: Request, _: CookieSession) -> Response:
        """``{language?, notifications?}``: kept in ``workbench.*`` of the config."""
        body = await json_body(request)
        patch: dict[str, Any] = {}
        if "language" in body:
            if body["language"] not in LANGUAGES:
                return JSONResponse({"error": f"language: one of {', '.join(LANGUAGES)}"}, status_code=400)
            patch["language"] = body["language"]
        if "notifications" in body:
            patch["notifications"] = bool(body["notifications"])
        if patch:
            await asyncio.to_thread(self._write, {"workbench": patch})
        return JSONResponse(general(await asyncio.to_thread(self.raw)))

    async def log_level(self, request: Request, _: CookieSession) -> Response:
        """``{level}``: the log level of this process, kept in ``workbench.logLevel`` for the next start."""
        level = str((await json_body(request)).get("level", "")).upper()
        if level not in LEVELS:
            return JSONResponse({"error": f"level: one of {', '.join(LEVELS)}"}, status_code=400)
        logging.getLogger(LOGGER).setLevel(level)
        await asyncio.to_thread(self._write, {"workbench": {"logLevel": level}})
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
            "slots": {
                s.name: {"provider": s.provider, "model": s.model, "key": bool(s.api_key)}
                for s in self.slots().values()
            },
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
