"""Mounting the workbench on the ``memmy serve`` app: the composition of its parts (session files, memory client,
turns, sign-in) for the one long-lived process."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.applications import Starlette

from memmy.agent.config import AgentConfig
from memmy.agent.runtime import open_memory
from memmy.agent.schedule import ScheduleStore
from memmy.agent.sessions import SessionStore
from memmy.signin import CookieAuth
from memmy.workbench.routes import COOKIE, SESSIONS_FILE, Workbench
from memmy.workbench.running_turns import EventHub, Turns
from memmy.workbench.schedules import Scheduler
from memmy.workbench.settings import LOGGER, general


def mounter(
    config: AgentConfig, config_file: str | None = None
) -> Callable[[Starlette], Callable[[], Awaitable[None]]]:
    """The ``extend`` hook of :func:`memmy.agent.serve.create_app` that adds the workbench at ``/``."""

    def mount(app: Starlette) -> Callable[[], Awaitable[None]]:
        level = general(config.raw)["logLevel"]
        if level:  # the level Settings chose last time
            logging.getLogger(LOGGER).setLevel(level)
        memory = open_memory(config, True, config_file)
        turns = Turns(config, SessionStore(config.home), memory, EventHub())
        auth = CookieAuth(config.home / "agent" / SESSIONS_FILE, COOKIE, "/")
        scheduler = Scheduler(turns, ScheduleStore(config.home))
        bench = Workbench(config, turns, auth, memory.settings.url.rstrip("/") + "/panel", scheduler.store)
        app.router.routes.extend(bench.routes())
        app.state.workbench = bench
        app.state.starters.append(scheduler.start)

        async def close() -> None:
            await scheduler.close()
            await turns.close()
            await memory.aclose()

        return close

    return mount
