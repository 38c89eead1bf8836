"""Connecting and disconnecting a channel, shared by ``memmy channels`` and the workbench's Channels page: the new
settings merged over what config.yaml has, checked with the platform through its SDK (the platform's own message,
credentials scrubbed, when it refuses), then written to config.yaml (``${ENV}`` references kept as given)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from memmy.agent.channels.settings import KNOWN, ChannelSettings, load_channels
from memmy.agent.channels.supervisor import unavailable_reason
from memmy.agent.config import AgentConfig, write_agent_sections
from memmy.errors import MemmyError


class ConnectError(MemmyError):
    """The channel cannot be connected (unknown, unavailable here, or refused by its platform)."""


def merged_settings(config: AgentConfig, name: str, entry: Mapping[str, Any]) -> ChannelSettings:
    """``channels.<name>`` as it would be with ``entry`` written over it."""
    if name not in KNOWN:
        raise ConnectError(f"unknown channel {name!r} (known: {', '.join(KNOWN)})")
    existing = dict((config.raw.get("channels") or {}).get(name) or {})
    return load_channels({"channels": {name: {**existing, **entry}}}, config.path)[0]


async def check(settings: ChannelSettings) -> str:
    """Reach the platform with these credentials; who it says the bot is."""
    reason = unavailable_reason(settings)
    if reason is not None:  # also every channel without an adapter in this version
        raise ConnectError(reason)
    module = importlib.import_module(f"memmy.agent.channels.{settings.name}")
    try:
        found: str = await module.check(settings)
    except Exception as exc:  # the SDK's own message: Unauthorized, a missing scope, a network error
        raise ConnectError(settings.scrub(f"{settings.label} refused the connection: {exc}")) from None
    return found


async def connect(
    config: AgentConfig, name: str, entry: Mapping[str, Any], verify: bool = True
) -> tuple[ChannelSettings, str]:
    """Check (unless ``verify`` is false) and enable the channel in config.yaml; its settings and who the bot is."""
    settings = merged_settings(config, name, {**entry, "enabled": True})
    who = await check(settings) if verify else ""
    write_agent_sections(config.path, {"channels": {name: {**entry, "enabled": True}}})
    return settings, who


def disconnect(config: AgentConfig, name: str) -> None:
    """Turn the channel off in config.yaml (its settings stay)."""
    if name not in (config.raw.get("channels") or {}):
        raise ConnectError(f"channels.{name} is not configured")
    write_agent_sections(config.path, {"channels": {name: {"enabled": False}}})
