"""Keeps every enabled channel running: each in a task of its own (one channel's failure never blocks another),
started again with exponential backoff when its connection drops, its state written to
``$MEMMY_HOME/channels/status.json`` for ``memmy channels status`` and the workbench."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from memmy.agent.channels.base import ChannelAdapter, ChannelState, freeze_startup_heap
from memmy.agent.channels.router import ChatRouter, TurnRunner
from memmy.agent.channels.settings import ChannelSettings, load_channels, turn_workers
from memmy.agent.config import AgentConfig

log = logging.getLogger("memmy.channels")

BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 60.0
HEALTHY_AFTER_S = 30.0  # a connection that lasted this long resets the backoff
STATUS_EVERY_S = 2.0

AdapterFactory = Callable[[ChannelSettings, Path], ChannelAdapter]


def unavailable_reason(settings: ChannelSettings) -> str | None:
    """Why a configured channel cannot run here (``None`` when it can)."""
    if settings.name == "imessage" and sys.platform != "darwin" and not settings.options.get("apiBase"):
        return (
            "iMessage needs a Mac: run BlueBubbles server on a Mac signed in to Messages and set "
            "channels.imessage.apiBase to it (memmy on this OS reaches that Mac over the network)"
        )
    if settings.name not in ADAPTERS:
        return f"{settings.label} is not available in this version of memmy yet"
    module = SDK_MODULES.get(settings.name)
    if module is not None and importlib.util.find_spec(module) is None:
        return f"{settings.label} needs its SDK: pip install 'memmy[channels]'"
    missing = settings.missing()
    if missing:
        return f"missing {', '.join(f'channels.{settings.name}.{key}' for key in missing)}"
    return None


def _telegram(settings: ChannelSettings, home: Path) -> ChannelAdapter:
    from memmy.agent.channels.telegram import TelegramChannel

    return TelegramChannel(settings, home)


def _dingtalk(settings: ChannelSettings, home: Path) -> ChannelAdapter:
    from memmy.agent.channels.dingtalk import DingTalkChannel

    return DingTalkChannel(settings, home)


def _discord(settings: ChannelSettings, home: Path) -> ChannelAdapter:
    from memmy.agent.channels.discord import DiscordChannel

    return DiscordChannel(settings, home)


def _feishu(settings: ChannelSettings, home: Path) -> ChannelAdapter:
    from memmy.agent.channels.feishu import FeishuChannel

    return FeishuChannel(settings, home)


def _wecom(settings: ChannelSettings, home: Path) -> ChannelAdapter:
    from memmy.agent.channels.wecom import WeComChannel

    return WeComChannel(settings, home)


def _imessage(settings: ChannelSettings, home: Path) -> ChannelAdapter:
    from memmy.agent.channels.imessage import IMessageChannel

    return IMessageChannel(settings, home)


ADAPTERS: dict[str, AdapterFactory] = {
    "telegram": _telegram,
    "dingtalk": _dingtalk,
    "discord": _discord,
    "feishu": _feishu,
    "wecom": _wecom,
    "imessage": _imessage,
}

# the maintained SDK each adapter runs on (WeCom and BlueBubbles have none: their HTTP APIs through httpx, WeCom's
# message encryption through cryptography)
SDK_MODULES = {
    "telegram": "telegram",
    "dingtalk": "dingtalk_stream",
    "discord": "discord",
    "feishu": "lark_oapi",
    "wecom": "cryptography",
}


def status_path(home: Path) -> Path:
    """Where the running supervisor writes the channels' states."""
    return home / "channels" / "status.json"


def read_status(home: Path) -> dict[str, Any]:
    """The last states written, with ``running`` false when the process that wrote them is gone."""
    try:
        data: dict[str, Any] = json.loads(status_path(home).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"running": False, "channels": {}}
    if not isinstance(data, dict):
        return {"running": False, "channels": {}}
    pid = int(data.get("pid") or 0)
    alive = False
    if pid > 0:
        try:
            os.kill(pid, 0)
            alive = True
        except ProcessLookupError:
            alive = False
        except PermissionError:
            alive = True
    data["running"] = alive
    return data


class ChannelSupervisor:
    """Runs the enabled channels for one process (``memmy serve``)."""

    def __init__(
        self,
        channels: list[ChannelSettings],
        runner: TurnRunner,
        home: Path,
        adapters: dict[str, AdapterFactory] | None = None,
    ) -> None:
        self.channels = [c for c in channels if c.enabled]
        self.runner = runner
        self.home = home
        self.adapters = ADAPTERS if adapters is None else adapters
        self.states = {c.name: ChannelState(c.name) for c in self.channels}
        self.routers: dict[str, ChatRouter] = {}
        self.tasks: list[asyncio.Task[None]] = []
        self.running: dict[str, asyncio.Task[None]] = {}  # one task per channel

    def start(self) -> None:
        """Start a task per enabled channel."""
        for settings in self.channels:
            self._launch(settings)
        self.tasks.append(asyncio.create_task(self._heartbeat(), name="channels:status"))
        if self.channels:
            self.tasks.append(asyncio.create_task(self._start_runner(), name="channels:turns"))
        self.write_status()

    async def _start_runner(self) -> None:
        """Start the chat turns' workers before the first message (a failure is said here and again to the chat);
        then, the channels' SDKs loaded meanwhile, leave the start-up heap out of the garbage collector's passes."""
        try:
            await self.runner.start()
        except Exception as exc:
            log.warning("the chat turns' workers did not start: %s", exc)
        freeze_startup_heap()

    async def restart(self, settings: ChannelSettings) -> None:
        """Run ``settings`` now (a channel connected or changed while the process runs), replacing its old task."""
        await self.stop(settings.name)
        self.channels = [c for c in self.channels if c.name != settings.name] + [settings]
        self.states[settings.name] = ChannelState(settings.name)
        self._launch(settings)
        self.write_status()

    def _launch(self, settings: ChannelSettings) -> None:
        """The channel's task (kept by name, so one channel can be stopped or replaced on its own)."""
        self.running[settings.name] = asyncio.create_task(self._keep(settings), name=f"channel:{settings.name}")

    async def stop(self, name: str) -> None:
        """Stop one channel (its chats' running turns too) and forget it."""
        task = self.running.pop(name, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        router = self.routers.pop(name, None)
        if router is not None:
            await router.close()
        self.channels = [c for c in self.channels if c.name != name]
        self.states.pop(name, None)
        self.write_status()

    async def _heartbeat(self) -> None:
        """Keep the status file fresh (message counts change between state changes)."""
        while True:
            await asyncio.sleep(STATUS_EVERY_S)
            self.write_status()

    async def _keep(self, settings: ChannelSettings) -> None:
        state = self.states[settings.name]
        reason = unavailable_reason(settings) if self.adapters is ADAPTERS else None
        factory = self.adapters.get(settings.name)
        if reason is not None or factory is None:
            state.moved("unavailable", reason or "no adapter")
            self.write_status()
            log.warning("channel %s not started: %s", settings.name, state.detail)
            return
        delay = BACKOFF_START_S
        while True:
            state.moved("connecting")
            self.write_status()
            started = time.monotonic()
            try:
                router = self.routers.get(settings.name)
                if router is None:  # one adapter and router per channel: chats' queues, running turns and the
                    # platform's reply handles (DingTalk's session webhooks) survive a reconnect
                    adapter = factory(settings, self.home)
                    router = self.routers[settings.name] = ChatRouter(settings, adapter, self.runner, self.home, state)
                adapter = router.adapter
                state.moved("connected")
                self.write_status()
                await adapter.run(router.deliver)
                detail = "the connection ended"
            except asyncio.CancelledError:
                state.moved("stopped")
                self.write_status()
                raise
            except Exception as exc:  # any failure of one channel: log, back off, reconnect
                detail = settings.scrub(f"{type(exc).__name__}: {exc}")[:300]
                log.warning("channel %s dropped: %s", settings.name, detail)
            if time.monotonic() - started > HEALTHY_AFTER_S:
                delay = BACKOFF_START_S
            state.restarts += 1
            state.moved("retrying", f"{detail}; reconnecting in {delay:.0f} s")
            self.write_status()
            await asyncio.sleep(delay)
            delay = min(BACKOFF_MAX_S, delay * 2)

    def write_status(self) -> None:
        """Write every channel's state for ``memmy channels status`` (best effort)."""
        path = status_path(self.home)
        payload = {
            "pid": os.getpid(),
            "updatedAt": time.time(),
            "channels": {name: asdict(state) for name, state in self.states.items()},
        }
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(payload), encoding="utf-8")
            os.replace(tmp, path)

    async def close(self) -> None:
        """Stop every channel and its chats' turns."""
        for name in list(self.running):
            await self.stop(name)
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for router in self.routers.values():
            await router.close()
        await self.runner.close()
        self.write_status()


def supervisor_for(config: AgentConfig, config_file: str | None = None) -> ChannelSupervisor:
    """The supervisor of the channels config.yaml enables, for ``memmy serve`` (with none it waits for one to be
    connected from the workbench; agent runtimes open with a chat's first message, so it costs nothing idle)."""
    from memmy.agent.channels.turn_worker import TurnPool

    channels = [c for c in load_channels(config.raw, config.path) if c.enabled]
    pool = TurnPool(config, config_file, turn_workers(config.raw, config.path))
    return ChannelSupervisor(channels, pool, config.home)
