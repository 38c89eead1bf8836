"""The workbench's Channels page: each chat app's state in this process (connected, retrying with the reason,
unavailable), its message counts and paired people, a connect form per platform (credentials checked with the
platform before anything is written; a channel connected here starts at once), disconnect, and one-time pairing
codes."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from memmy.agent.channels.access import CODE_TTL_S, AccessBook
from memmy.agent.channels.connect import ConnectError, connect, disconnect
from memmy.agent.channels.settings import KNOWN, NOTES, PUBLIC_OPTIONS, load_channels
from memmy.agent.channels.supervisor import ChannelSupervisor, read_status, unavailable_reason
from memmy.agent.config import AgentConfig, load_agent_config
from memmy.errors import MemmyError
from memmy.signin import CookieSession
from memmy.workbench.settings import json_body

#: The fields of each platform's connect form (secrets are password fields; ``${ENV}`` references are kept).
FORMS: dict[str, list[dict[str, Any]]] = {
    "telegram": [{"key": "token", "label": "Bot token", "secret": True}],
    "discord": [{"key": "token", "label": "Bot token", "secret": True}],
    "feishu": [
        {"key": "appId", "label": "App ID", "secret": False},
        {"key": "appSecret", "label": "App Secret", "secret": True},
    ],
    "dingtalk": [
        {"key": "clientId", "label": "Client ID (AppKey)", "secret": False},
        {"key": "clientSecret", "label": "Client Secret (AppSecret)", "secret": True},
    ],
    "wecom": [
        {"key": "corpId", "label": "Corp ID", "secret": False},
        {"key": "agentId", "label": "AgentId", "secret": False},
        {"key": "secret", "label": "App Secret", "secret": True},
        {"key": "token", "label": "Callback Token", "secret": True},
        {"key": "encodingAESKey", "label": "Callback EncodingAESKey", "secret": True},
        {"key": "listen", "label": "Listen on (host:port, default 127.0.0.1:18991)", "secret": False},
    ],
    "imessage": [
        {"key": "apiBase", "label": "BlueBubbles server URL", "secret": False},
        {"key": "password", "label": "BlueBubbles password", "secret": True},
    ],
}


class ChannelsPage:
    """Handlers of ``/api/channels*``."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config

    def _config(self) -> AgentConfig:
        """config.yaml as it is now (a connect or disconnect changes it while the process runs)."""
        return load_agent_config(str(self.config.path))

    @staticmethod
    def _supervisor(request: Request) -> ChannelSupervisor | None:
        found = getattr(request.app.state, "channels", None)
        return found if isinstance(found, ChannelSupervisor) else None

    async def read(self, request: Request, _: CookieSession) -> Response:
        """Every known channel: configured or not, its state here, counts, paired people, its form."""
        config = self._config()
        configured = {c.name: c for c in load_channels(config.raw, config.path)}
        supervisor = self._supervisor(request)
        live = {name: vars(state) for name, state in supervisor.states.items()} if supervisor else {}
        if not live:
            live = dict(read_status(config.home).get("channels") or {})
        book = AccessBook(config.home)
        rows = []
        for name, (label, needed, _limit) in KNOWN.items():
            settings = configured.get(name)
            state = live.get(name) or {}
            rows.append(
                {
                    "name": name,
                    "label": label,
                    "configured": settings is not None,
                    "enabled": bool(settings and settings.enabled),
                    "state": state.get("state") or ("disabled" if settings else "not configured"),
                    "detail": state.get("detail", ""),
                    "messagesIn": state.get("messages_in", 0),
                    "messagesOut": state.get("messages_out", 0),
                    "refused": state.get("refused", 0),
                    "problem": unavailable_reason(settings) if settings is not None and settings.enabled else None,
                    "paired": sorted(book.paired(name)),
                    "allowFrom": list(settings.allow_from) if settings else [],
                    "public": {k: v for k, v in (settings.options.items() if settings else []) if k in PUBLIC_OPTIONS},
                    "form": FORMS.get(name, []),
                    "needs": list(needed),
                    "note": NOTES.get(name),
                }
            )
        return JSONResponse({"channels": rows, "refreshS": 5})

    async def connect(self, request: Request, _: CookieSession) -> Response:
        """``{name, options: {...}, allowFrom?: [...]}``: check with the platform, write config.yaml, start it."""
        body = await json_body(request)
        name = str(body.get("name", ""))
        options = body.get("options") or {}
        if not isinstance(options, dict) or not all(isinstance(v, str) for v in options.values()):
            return JSONResponse({"error": "options: an object of strings"}, status_code=400)
        entry: dict[str, Any] = {k: v for k, v in options.items() if k in {f["key"] for f in FORMS.get(name, [])}}
        allow = body.get("allowFrom")
        if isinstance(allow, list) and all(isinstance(v, str) for v in allow):
            entry["allowFrom"] = [v.strip() for v in allow if v.strip()]
        try:
            settings, who = await connect(self._config(), name, entry)
        except MemmyError as exc:
            return JSONResponse(
                {"ok": False, "error": str(exc)}, status_code=400 if isinstance(exc, ConnectError) else 500
            )
        supervisor = self._supervisor(request)
        if supervisor is not None:
            await supervisor.restart(settings)
        return JSONResponse({"ok": True, "bot": who, "started": supervisor is not None})

    async def disconnect(self, request: Request, _: CookieSession) -> Response:
        """``{name}``: turn the channel off in config.yaml and stop it here."""
        name = str((await json_body(request)).get("name", ""))
        try:
            disconnect(self._config(), name)
        except MemmyError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        supervisor = self._supervisor(request)
        if supervisor is not None:
            await supervisor.stop(name)
        return JSONResponse({"ok": True})

    async def pair(self, request: Request, _: CookieSession) -> Response:
        """``{name}``: a one-time pairing code to send to the bot as ``/pair CODE``."""
        name = str((await json_body(request)).get("name", ""))
        if name not in KNOWN:
            return JSONResponse({"error": f"unknown channel {name!r}"}, status_code=400)
        code = AccessBook(self._config().home).new_code(name)
        return JSONResponse({"code": code, "expiresAt": time.time() + CODE_TTL_S})
