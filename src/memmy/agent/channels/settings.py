"""``channels.<name>`` in config.yaml: which channels run, their credentials (``${ENV}`` references expanded),
who may talk to them, and whether their sessions get the shell and file tools.

Example::

    channels:
      telegram:
        enabled: true
        token: ${TELEGRAM_BOT_TOKEN}
        apiBase: https://api.telegram.org      # or a self-hosted Bot API server
        allowFrom: ["123456789"]               # user ids; others pair with `memmy channels pair telegram`
        tools: false                           # shell + file tools for this channel's sessions (off by default)
      workers: 2                               # chat turns' worker processes (default: cores - 1, from 1 to 4)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memmy.agent.config import expand_env
from memmy.errors import ConfigError

# name -> (label, the settings a connection needs, platform text limit, where it works)
KNOWN: dict[str, tuple[str, tuple[str, ...], int]] = {
    "telegram": ("Telegram", ("token",), 4096),
    "discord": ("Discord", ("token",), 2000),
    "feishu": ("Feishu / Lark", ("appId", "appSecret"), 30000),
    "dingtalk": ("DingTalk", ("clientId", "clientSecret"), 5000),
    "wecom": ("WeCom (WeChat Work) app bot", ("corpId", "agentId", "secret", "token", "encodingAESKey"), 2048),
    "imessage": ("iMessage (BlueBubbles on a Mac)", ("password",), 20000),
}
DEFAULT_API_BASE = {
    "telegram": "https://api.telegram.org",
    "dingtalk": "https://api.dingtalk.com",
    "discord": "https://discord.com",
    "feishu": "https://open.feishu.cn",
    "wecom": "https://qyapi.weixin.qq.com",
    "imessage": "http://127.0.0.1:1234",  # BlueBubbles server's default port, on the Mac itself
}
PUBLIC_OPTIONS = ("apiBase", "oapiBase", "appId", "clientId", "corpId", "agentId", "listen")
WORKERS_KEY = "workers"  # channels.workers: the chat turns' worker processes, not a channel
MAX_DEFAULT_WORKERS = 4
MAX_WORKERS = 64
# what a channel cannot do, said in `memmy channels list` beside it
NOTES = {
    "wecom": "personal WeChat has no lawful bot API; WeCom (WeChat Work) apps are the substitute",
    "imessage": "through a BlueBubbles server on a Mac signed in to Messages",
}


@dataclass(frozen=True)
class ChannelSettings:
    """One channel's settings, resolved."""

    name: str
    enabled: bool = False
    options: dict[str, str] = field(default_factory=dict)  # token, apiBase, appId … (expanded)
    allow_from: tuple[str, ...] = ()
    tools: bool = False

    @property
    def label(self) -> str:
        """The platform's name for people."""
        return KNOWN.get(self.name, (self.name,))[0]

    @property
    def text_limit(self) -> int:
        """The longest message the platform takes."""
        return KNOWN[self.name][2] if self.name in KNOWN else 4000

    @property
    def api_base(self) -> str:
        """Where the platform's API is (configurable so a self-hosted server or a test can stand in)."""
        return (self.options.get("apiBase") or DEFAULT_API_BASE.get(self.name, "")).rstrip("/")

    def scrub(self, text: str) -> str:
        """``text`` (an SDK's error message, a log line) without this channel's credentials in it."""
        for key, value in self.options.items():
            if key not in PUBLIC_OPTIONS and len(value) >= 6:
                text = text.replace(value, f"<{key}>")
        return text

    def missing(self) -> list[str]:
        """The required settings that are empty (an unset ``${ENV}`` expands to empty)."""
        needed = KNOWN.get(self.name, ("", ()))[1] if self.name in KNOWN else ()
        return [key for key in needed if not self.options.get(key)]


def _ids(value: Any, where: str, path: Path) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str | int):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str | int) and not isinstance(v, bool) for v in value):
        raise ConfigError(f"{path}: {where}: expected a list of user ids")
    return tuple(str(v).strip() for v in value if str(v).strip())


def default_workers() -> int:
    """How many chat turns' worker processes run when ``channels.workers`` does not say: one per core but one, at
    most 4, at least 1. The core left is the channels' process's (receiving and sending, ~2.5 ms of CPU a message):
    on two cores a second worker took it from that process, and 20 chats at once were answered slower with two
    workers than with one (bench/channels.py); more processes than cores only take turns on them."""
    return max(1, min(MAX_DEFAULT_WORKERS, (os.cpu_count() or 1) - 1))


def turn_workers(raw: Mapping[str, Any], path: Path) -> int:
    """``channels.workers``: the chat turns' worker processes (each chat's session lives in one of them)."""
    section = raw.get("channels") or {}
    value = section.get(WORKERS_KEY) if isinstance(section, dict) else None
    if value is None:
        return default_workers()
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WORKERS:
        raise ConfigError(f"{path}: channels.{WORKERS_KEY}: expected a whole number from 1 to {MAX_WORKERS}")
    return value


def load_channels(raw: Mapping[str, Any], path: Path, env: Mapping[str, str] | None = None) -> list[ChannelSettings]:
    """Every ``channels.<name>`` entry of the config file, expanded and checked (``channels.workers`` is the pool's
    size, not a channel)."""
    section = raw.get("channels") or {}
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: channels: expected a mapping")
    expanded = expand_env(section, os.environ if env is None else env)
    found = []
    for name, entry in expanded.items():
        if name == WORKERS_KEY:
            continue
        if name not in KNOWN:
            raise ConfigError(f"{path}: channels.{name}: unknown channel (known: {', '.join(KNOWN)})")
        if entry is None:
            entry = {}
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: channels.{name}: expected a mapping")
        options = {
            str(k): str(v) for k, v in entry.items() if k not in ("enabled", "allowFrom", "tools") and v is not None
        }
        found.append(
            ChannelSettings(
                name=str(name),
                enabled=bool(entry.get("enabled", True)),
                options=options,
                allow_from=_ids(entry.get("allowFrom"), f"channels.{name}.allowFrom", path),
                tools=bool(entry.get("tools", False)),
            )
        )
    return found
