"""``memmy channels list|status|connect|disconnect|pair``: which chat apps the agent is reachable from, their
state in the running ``memmy serve``, and connecting one (its credentials go to config.yaml, ``${ENV}``
references kept as written)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import click

from memmy.agent.channels.access import CODE_TTL_S, AccessBook
from memmy.agent.channels.connect import connect as connect_channel
from memmy.agent.channels.connect import disconnect as disconnect_channel
from memmy.agent.channels.settings import KNOWN, NOTES, ChannelSettings, load_channels
from memmy.agent.channels.supervisor import read_status, unavailable_reason
from memmy.agent.config import AgentConfig, load_agent_config
from memmy.errors import MemmyError


def _config(ctx: click.Context) -> AgentConfig:
    try:
        return load_agent_config((ctx.find_root().obj or {}).get("config"))
    except MemmyError as exc:
        raise click.ClickException(str(exc)) from None


def _configured(config: AgentConfig) -> dict[str, ChannelSettings]:
    try:
        return {c.name: c for c in load_channels(config.raw, config.path)}
    except MemmyError as exc:
        raise click.ClickException(str(exc)) from None


def _emit(as_json: bool, payload: Any, human: str) -> None:
    click.echo(json.dumps(payload, ensure_ascii=False, indent=2) if as_json else human)


@click.group()
def channels() -> None:
    """Chat apps the agent answers in (Telegram, Discord, Feishu, DingTalk, WeCom for WeChat, iMessage)."""


@channels.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def list_channels(ctx: click.Context, as_json: bool) -> None:
    """Every channel memmy knows: configured, enabled, and whether it can run here."""
    configured = _configured(_config(ctx))
    rows = []
    for name, (label, needed, limit) in KNOWN.items():
        settings = configured.get(name, ChannelSettings(name))
        here = unavailable_reason(ChannelSettings(name, options={**dict.fromkeys(needed, "x"), **settings.options}))
        rows.append(
            {
                "name": name,
                "label": label,
                "configured": name in configured,
                "enabled": settings.enabled,
                "available": here is None,
                "unavailableBecause": here,
                "problem": unavailable_reason(settings) if name in configured else None,
                "textLimit": limit,
                "note": NOTES.get(name),
            }
        )
    human = "\n".join(
        f"{r['name']:<9} {r['label']:<32} "
        + ("enabled" if r["enabled"] else "configured, off" if r["configured"] else "not configured")
        + ("" if r["available"] else f"   (not available here: {r['unavailableBecause']})")
        + (f"   problem: {r['problem']}" if r["problem"] else "")
        + (f"\n{'':<10}{r['note']}" if r["note"] else "")
        for r in rows
    )
    _emit(as_json, {"channels": rows}, human)


@channels.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Each enabled channel's state in the running `memmy serve` (connected, retrying, …)."""
    config = _config(ctx)
    configured = _configured(config)
    written = read_status(config.home)
    states: dict[str, Any] = dict(written.get("channels") or {})
    running = bool(written.get("running"))
    rows = []
    for name, settings in configured.items():
        state = states.get(name) if running else None
        if not settings.enabled:
            rows.append({"name": name, "state": "disabled", "detail": ""})
        elif state is None:
            rows.append({"name": name, "state": "not running", "detail": "start `memmy serve` to run the channels"})
        else:
            rows.append({"name": name, **state})
    human = (
        "\n".join(
            f"{r['name']:<9} {r['state']:<12} {r.get('detail') or ''}".rstrip()
            + (
                f"   in {r['messages_in']} / out {r['messages_out']} / refused {r['refused']}"
                if "messages_in" in r
                else ""
            )
            for r in rows
        )
        or "No channel is configured: memmy channels connect telegram --token …"
    )
    _emit(as_json, {"running": running, "channels": rows}, human)


@channels.command()
@click.argument("name", type=click.Choice(list(KNOWN)))
@click.option("--token", help="Bot token (Telegram, Discord); '${ENV_NAME}' keeps a reference instead of the value.")
@click.option("--api-base", help="The platform's API base URL (e.g. a self-hosted Telegram Bot API server).")
@click.option("--set", "options", multiple=True, metavar="KEY=VALUE", help="Another setting, e.g. appId=cli_x.")
@click.option("--allow-from", multiple=True, metavar="USER_ID", help="A user id that may talk to the bot.")
@click.option("--tools/--no-tools", default=None, help="Shell and file tools in this channel's sessions (off).")
@click.option("--no-check", is_flag=True, help="Write the settings without reaching the platform first.")
@click.pass_context
def connect(
    ctx: click.Context,
    name: str,
    token: str | None,
    api_base: str | None,
    options: tuple[str, ...],
    allow_from: tuple[str, ...],
    tools: bool | None,
    no_check: bool,
) -> None:
    """Connect a channel: check the credentials with the platform, then enable it in config.yaml."""
    config = _config(ctx)
    entry: dict[str, Any] = {}
    if token:
        entry["token"] = token
    if api_base:
        entry["apiBase"] = api_base.rstrip("/")
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{option!r}: expected KEY=VALUE", param_hint="--set")
        entry[key.strip()] = value
    if allow_from:
        entry["allowFrom"] = list(allow_from)
    if tools is not None:
        entry["tools"] = tools
    try:
        settings, who = asyncio.run(connect_channel(config, name, entry, verify=not no_check))
    except MemmyError as exc:
        raise click.ClickException(str(exc)) from None
    if who:
        click.echo(f"{settings.label}: connected as {who}")
    click.echo(f"channels.{name} enabled in {config.path}. `memmy serve` runs it (restart it if it is running).")
    if not settings.allow_from and not AccessBook(config.home).paired(name):
        click.echo(f"Nobody may talk to the bot yet: run `memmy channels pair {name}` and send the code to it.")


@channels.command()
@click.argument("name", type=click.Choice(list(KNOWN)))
@click.pass_context
def disconnect(ctx: click.Context, name: str) -> None:
    """Turn a channel off (its settings stay in config.yaml)."""
    try:
        disconnect_channel(_config(ctx), name)
    except MemmyError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"channels.{name} disabled. Restart `memmy serve` if it is running.")


@channels.command()
@click.argument("name", type=click.Choice(list(KNOWN)))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def pair(ctx: click.Context, name: str, as_json: bool) -> None:
    """Print a one-time code; sending `/pair CODE` to the bot lets that person talk to it."""
    config = _config(ctx)
    code = AccessBook(config.home).new_code(name)
    expires = time.time() + CODE_TTL_S
    human = f"Send this to the bot within {int(CODE_TTL_S // 60)} minutes:\n\n  /pair {code}\n"
    _emit(as_json, {"channel": name, "code": code, "expiresAt": expires}, human)
