"""``memmy schedule add|list|remove``: tasks the long-lived ``memmy serve`` runs at a time or on a cron schedule."""

from __future__ import annotations

import json
import time

import click
import httpx

from memmy.agent.config import AgentConfig, load_agent_config
from memmy.agent.schedule import Schedule, ScheduleStore, parse_at
from memmy.errors import MemmyError


def _config(ctx: click.Context) -> AgentConfig:
    try:
        return load_agent_config(ctx.obj.get("config") if ctx.obj else None)
    except MemmyError as exc:
        raise click.ClickException(str(exc)) from exc


def _store(ctx: click.Context) -> ScheduleStore:
    return ScheduleStore(_config(ctx).home)


def _serving(config: AgentConfig) -> bool:
    """Whether ``memmy serve`` answers on its configured address."""
    try:
        return httpx.get(f"http://{config.serve_host}:{config.serve_port}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _when(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp)) if stamp is not None else "done"


def _line(item: Schedule) -> str:
    rule = item.cron if item.cron else "once"
    return f"{item.id}  next {_when(item.next_at):<19}  {rule:<14} fired {item.fired_count}  {item.task[:60]}"


@click.group()
def schedule() -> None:
    """Tasks `memmy serve` runs at a time or on a cron schedule, each in its own session."""


@schedule.command("add")
@click.argument("task")
@click.option("--at", "at", help="When: an ISO time (2026-12-05T09:30), HH:MM, or +N[smhd] from now.")
@click.option("--cron", help="A five-field cron expression, e.g. '0 9 * * 1-5' (local time).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def add(ctx: click.Context, task: str, at: str | None, cron: str | None, as_json: bool) -> None:
    """Schedule TASK (a prompt) once (--at) or repeatedly (--cron)."""
    config = _config(ctx)
    try:
        item = ScheduleStore(config.home).add(task, parse_at(at) if at is not None else None, cron)
    except MemmyError as exc:
        raise click.UsageError(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(item.to_json()))
        return
    click.echo(f"scheduled {item.id}: next run {_when(item.next_at)} (`memmy serve` runs it; the workbench shows it)")
    if not _serving(config):
        click.echo(
            "memmy serve is not running: start it (`memmy serve` or `memmy workbench`), or the task runs when it "
            "next starts",
            err=True,
        )


@schedule.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def list_(ctx: click.Context, as_json: bool) -> None:
    """Every schedule, the next to run first."""
    found = _store(ctx).all()
    if as_json:
        click.echo(json.dumps([s.to_json() for s in found]))
        return
    if not found:
        click.echo("no schedules (memmy schedule add 'TASK' --at +10m)")
    for item in found:
        click.echo(_line(item))


@schedule.command("remove")
@click.argument("schedule_id")
@click.pass_context
def remove(ctx: click.Context, schedule_id: str) -> None:
    """Delete the schedule SCHEDULE_ID (a firing already running finishes)."""
    if not _store(ctx).remove(schedule_id):
        raise click.ClickException(f"no schedule {schedule_id!r} (see `memmy schedule list`)")
    click.echo(f"removed {schedule_id}")
