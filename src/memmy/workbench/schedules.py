"""The scheduler of ``memmy serve``: it claims the schedules that are due (see :mod:`memmy.agent.schedule`) and runs
each firing as a turn in a new session ``schedule:<id>-<time>``; the turn's end marks the task unread, which is the
workbench's notification."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from memmy.agent.schedule import Schedule, ScheduleStore
from memmy.agent.sessions import Session
from memmy.workbench.running_turns import Input, Turns

#: How often the schedules file is read (a schedule added by ``memmy schedule add`` is seen within this).
POLL_S = 1.0
LOG = logging.getLogger("memmy.schedule")


class Scheduler:
    """One asyncio task of the server that fires due schedules."""

    def __init__(self, turns: Turns, store: ScheduleStore, poll_s: float = POLL_S) -> None:
        self.turns = turns
        self.store = store
        self.poll_s = poll_s
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start firing (a firing missed while no server ran is claimed at once)."""
        self.task = asyncio.create_task(self._loop(), name="memmy-scheduler")

    async def _loop(self) -> None:
        while True:
            try:
                for item in await asyncio.to_thread(self.store.claim_due):
                    self.fire(item)
            except Exception:  # a locked or broken file: try again at the next poll, never stop the server
                LOG.exception("the scheduler could not read %s", self.store.path)
            await asyncio.sleep(self.poll_s)

    def fire(self, item: Schedule) -> Session:
        """Run one claimed firing in a session of its own."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        session = Session(name=f"schedule:{item.id}-{stamp}-{item.fired_count + 1}", title=item.task[:80])
        self.turns.store.save(session)
        self.store.ran_in(item.id, session.id)
        self.turns.hub.publish(session.id, "schedule", item.task, {"schedule": item.id})
        self.turns.send(session, Input(item.task))
        return session

    async def close(self) -> None:
        """Stop firing (the turns it started are the turns' owner's to stop)."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
