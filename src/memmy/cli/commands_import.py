"""``memmy-memory import`` and ``memmy-memory sources``: history import through the daemon, with live progress."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import click
import httpx
from rich.console import Console
from rich.live import Live
from rich.table import Table

from memmy.cli.client import ClientError
from memmy.cli.context import CliContext, pass_ctx, strip_none
from memmy.cli.output import emit_json, fail, make_console
from memmy.daemon_client import routes
from memmy.sources.adapters import ADAPTERS
from memmy.sources.model import ScanStats
from memmy.sources.recipe import FORMATS, Recipe, RecipeAdapter, discover_installation, normalise_name, recipes_dir

FINAL_STATES = ("done", "stopped", "failed")


def progress_table(status: dict[str, Any], title: str) -> Table:
    """One row per source: messages scanned, turns added / already there / waiting, skipped, failed."""
    table = Table(title=title, title_justify="left")
    for column in ("source", "state", "messages", "added", "existing", "waiting", "skipped", "failed"):
        table.add_column(column, justify="left" if column in ("source", "state") else "right")
    for part in status.get("sources", []):
        skipped = sum(part["skipped"].values())
        table.add_row(
            part["source"],
            part["state"],
            str(part["messagesScanned"]),
            str(part["turnsAdded"]),
            str(part["turnsExisting"]),
            str(part["turnsWaiting"]),
            str(skipped),
            str(part["failed"]),
        )
    return table


def skipped_table(status: dict[str, Any]) -> Table | None:
    """Skipped records by reason (so nothing is silently lost)."""
    reasons = status.get("totals", {}).get("skipped", {})
    if not reasons:
        return None
    table = Table(title="skipped, by reason", title_justify="left")
    table.add_column("reason")
    table.add_column("count", justify="right")
    for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1]):
        table.add_row(reason, str(count))
    return table


def history_hints(status: dict[str, Any]) -> list[str]:
    """What a run found outside its usual window, and how to get the rest: nothing older is left behind unsaid."""
    totals = status.get("totals", {})
    hints = []
    late = int(totals.get("lateConversations") or 0)
    if late:
        hints.append(
            f"Found {late} conversation(s) older than the last sync that were never read before (history restored "
            "or added later); their turns are included above."
        )
    older = int((totals.get("skipped") or {}).get("older_than_initial_subset") or 0)
    if older:
        hints.append(
            f"{older} older turn(s) were left out of this first sync (it takes only the newest turns): "
            "`memmy-memory import --deep --yes` imports them."
        )
    return hints


STOP_WAIT_S = 30.0


class Terminated(KeyboardInterrupt):
    """SIGTERM while an import runs: handled like Ctrl-C (the job is stopped before the command exits)."""


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Turn SIGTERM into :class:`Terminated` for the block (a killed import must not leave its job running)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: nothing to install
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop_job(obj: CliContext, job_id: str, timeout_s: float = STOP_WAIT_S) -> dict[str, Any]:
    """Ask the daemon to stop the job and wait until it has (so a new import can start at once)."""
    status: dict[str, Any] = dict(obj.call(routes.SOURCES_SCAN_STOP, {}, job_id=job_id))
    deadline = time.monotonic() + timeout_s
    while status.get("state") not in FINAL_STATES and time.monotonic() < deadline:
        time.sleep(0.2)
        status = dict(obj.call(routes.SOURCES_SCAN_GET, job_id=job_id))
    return status


def start_and_follow(obj: CliContext, body: dict[str, Any], console: Console, show: bool) -> dict[str, Any]:
    """Start the import job and follow it; Ctrl-C or SIGTERM stops the job (and waits for it) before exiting."""
    job_id: str | None = None
    try:
        with sigterm_interrupts():
            job_id = str(obj.call(routes.SOURCES_SCAN, body)["jobId"])
            return follow(obj, job_id, console, show)
    except KeyboardInterrupt as interrupt:
        if job_id is not None:
            stop_job(obj, job_id)
        # (interrupted before the daemon answered: the job has no follower and the daemon stops it by itself)
        console.print("[yellow]Stopped. Turns written so far are kept; run the import again to continue.[/]")
        raise SystemExit(143 if isinstance(interrupt, Terminated) else 130) from None


def progress_line(status: dict[str, Any]) -> str:
    """One plain progress line (for a log or a pipe, where a live table cannot redraw)."""
    totals = status.get("totals") or {}
    parts = [
        f"import {status.get('jobId', '')}: {status.get('state')}",
        f"messages {totals.get('messagesScanned', 0)}",
        f"added {totals.get('turnsAdded', 0)}",
        f"existing {totals.get('turnsExisting', 0)}",
        f"waiting {totals.get('turnsWaiting', 0)}",
        f"failed {totals.get('failed', 0)}",
    ]
    return ", ".join(parts)


def _follow_plain(obj: CliContext, job_id: str, console: Console, status: dict[str, Any]) -> dict[str, Any]:
    """Progress as lines (at most one a second, plus the last) when the console is not a terminal."""
    client = obj.client()
    last, shown_at = "", 0.0
    try:
        with client.stream_events(routes.SOURCES_SCAN_EVENTS, job_id=job_id) as events:
            for event in events:
                status = dict(event)
                line = progress_line(status)
                final = status["state"] in FINAL_STATES
                if line != last and (final or time.monotonic() - shown_at >= 1.0):
                    console.print(line, soft_wrap=True, highlight=False, markup=False)
                    last, shown_at = line, time.monotonic()
                if final:
                    break
    except (httpx.HTTPError, ClientError):
        status = dict(obj.call(routes.SOURCES_SCAN_GET, job_id=job_id))
    finally:
        client.close()
    return status


def follow(obj: CliContext, job_id: str, console: Console, show: bool) -> dict[str, Any]:
    """Stream the job's server-sent events, redrawing the progress table; return the final status.

    When the console is not a terminal (a pipe, a log, ``--json`` with stderr redirected) progress is printed
    as plain lines instead, since a live table cannot redraw there.
    """
    status: dict[str, Any] = dict(obj.call(routes.SOURCES_SCAN_GET, job_id=job_id))
    if not console.is_terminal and (obj.as_json or show):
        return _follow_plain(obj, job_id, console, status)
    client = obj.client()
    title = f"import {job_id}"
    try:
        with Live(progress_table(status, title), console=console, refresh_per_second=4, transient=not show) as live:
            with client.stream_events(routes.SOURCES_SCAN_EVENTS, job_id=job_id) as events:
                for event in events:
                    status = dict(event)
                    live.update(progress_table(status, title))
                    if status["state"] in FINAL_STATES:
                        break
    except (httpx.HTTPError, ClientError):
        status = dict(obj.call(routes.SOURCES_SCAN_GET, job_id=job_id))  # stream dropped: fall back to one status read
    finally:
        client.close()
    return status


@click.command("import")
@click.option("--source", "sources", multiple=True, help="Only these sources (repeatable): claude_code, codex, ...")
@click.option("--deep", is_flag=True, help="Full mode: re-read all history, not just what is new (asks first).")
@click.option("--since", help="Only conversations with messages at or after this ISO date-time.")
@click.option("--dry-run", is_flag=True, help="Count what would be imported; write nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation (deep scan).")
@pass_ctx
def import_history(
    obj: CliContext, sources: tuple[str, ...], deep: bool, since: str | None, dry_run: bool, yes: bool
) -> None:
    """Import history from every detected agent (or --source X) into memory."""
    if since and "T" not in since:
        since = f"{since}T00:00:00Z"
    if deep and not yes:
        if not sys.stdin.isatty():
            raise click.UsageError("--deep re-reads all history; confirm with --yes when not interactive")
        click.confirm("Deep scan re-reads all of your agents' history. Continue?", abort=True)
    body = strip_none(
        {
            "sources": list(sources) or None,
            "mode": "full" if deep else "incremental",
            "confirm": deep or None,
            "since": since,
            "dryRun": dry_run or None,
            "stopOnDisconnect": True,  # if this command dies, its import stops instead of blocking the next one
        }
    )
    console = make_console(stderr=obj.as_json)
    status = start_and_follow(obj, body, console, show=not obj.as_json)
    if obj.as_json:
        emit_json(status)
        return
    totals = status["totals"]
    console.print()
    verb = "Would add" if status.get("dryRun") else "Added"
    console.print(
        f"{verb} {totals['turnsAdded']} turns from {totals['messagesScanned']} messages "
        f"({totals['turnsExisting']} already imported, {totals['turnsWaiting']} waiting for an answer, "
        f"{totals['failed']} failed)."
    )
    skipped = skipped_table(status)
    if skipped is not None:
        console.print(skipped)
    for hint in history_hints(status):
        console.print(hint, markup=False, highlight=False)
    errors = [error for part in status.get("sources", []) for error in part.get("errors", [])]
    for error in errors[:10]:
        console.print(f"[red]failed:[/] {error}", markup=True, highlight=False)
    if status["state"] == "failed" or totals["failed"] or errors:
        fail(status.get("error") or "some history failed to import; run the import again to retry it")


@click.group("sources", invoke_without_command=True)
@click.pass_context
def sources(ctx: click.Context) -> None:
    """List detected agents (default), or add / remove a custom agent."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_sources)


@sources.command("list")
@pass_ctx
def list_sources(obj: CliContext) -> None:
    """Detected agents, their history paths, last sync and imported turn counts."""
    result = obj.call(routes.SOURCES)
    if obj.as_json:
        emit_json(result)
        return
    if not result["sources"]:
        click.echo("No agent history found. Known sources: " + ", ".join(result["known"]))
        return
    table = Table()
    for column in ("source", "paths", "last sync", "imported turns"):
        table.add_column(column)
    for row in result["sources"]:
        table.add_row(row["source"], "\n".join(row["paths"]), row["lastSyncAt"] or "never", str(row["importedTurns"]))
    make_console().print(table)
    for error in result.get("recipeErrors") or []:
        click.echo(f"warning: {error}", err=True)


def _pairs(values: tuple[str, ...], option: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        key, sep, path = value.partition("=")
        if not sep or not key or not path:
            raise click.BadParameter(f"expected FIELD=path, got {value!r}", param_hint=option)
        pairs[key.strip()] = path.strip()
    return pairs


@sources.command("add")
@click.argument("name")
@click.option("--history", "history", type=click.Path(), help="Absolute path of the agent's history (file or dir).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="jsonl", show_default=True)
@click.option(
    "--map",
    "maps",
    multiple=True,
    help="FIELD=dot.path (role, content, createdAt, conversationId, "
    "messageId, workspacePath); role and content default to the same names.",
)
@click.option("--role-map", "role_maps", multiple=True, help="RAW=role, e.g. human=user (repeatable).")
@click.option("--records-path", help="json format: dot path to the array of records.")
@click.option("--query", help="sqlite format: one SELECT returning the mapped columns.")
@click.option(
    "--timestamp-format",
    type=click.Choice(["auto", "iso", "unix_seconds", "unix_milliseconds"]),
    default="auto",
    show_default=True,
)
@click.option("--no-import", is_flag=True, help="Save the recipe only.")
@pass_ctx
def add_source(
    obj: CliContext,
    name: str,
    history: str | None,
    fmt: str,
    maps: tuple[str, ...],
    role_maps: tuple[str, ...],
    records_path: str | None,
    query: str | None,
    timestamp_format: str,
    no_import: bool,
) -> None:
    """Add another agent: verify it is installed, save a recipe for its history, import its latest 500 turns."""
    source_id = re.sub(r"[^a-z0-9_]", "_", normalise_name(name))
    if source_id in ADAPTERS:
        raise click.UsageError(f"{name} is built in; just run `memmy-memory import --source {source_id}`")
    installed = discover_installation(name, os.environ)
    if history is None:
        if installed is None:
            fail(
                f"{name} was not found on this machine (no executable, app or package with that name); "
                "to continue anyway, give the history location with --history /absolute/path"
            )
        raise click.UsageError(f"found {installed}; give its history location with --history /absolute/path")
    path = Path(history).expanduser()
    if not path.is_absolute() or not path.exists():
        fail(f"{history}: expected an existing absolute path")
    fields = {"role": "role", "content": "content", **_pairs(maps, "--map")}
    try:
        recipe = Recipe.from_json(
            {
                "name": source_id,
                "format": fmt,
                "path": str(path),
                "fields": fields,
                "roleMap": _pairs(role_maps, "--role-map"),
                "recordsPath": records_path,
                "query": query,
                "timestampFormat": timestamp_format,
            }
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    stats = ScanStats()
    conversations = list(RecipeAdapter(recipe).conversations(os.environ, stats))
    if not conversations:
        fail(
            f"no messages could be read from {path} with this recipe (skipped: {dict(stats.skipped)}, "
            f"errors: {stats.errors[:3]}); check --format and --map"
        )
    config = obj.config()
    target = recipes_dir(config.home) / f"{source_id}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(recipe.to_json(), indent=2) + "\n", encoding="utf-8")
    messages = sum(len(c.messages) for c in conversations)
    click.echo(
        f"✓ saved {target} ({len(conversations)} conversations, {messages} messages readable"
        + (f"; installed at {installed}" if installed else "; installation not found, using your path")
        + ")"
    )
    if no_import:
        return
    started = obj.call(routes.SOURCES_SCAN, {"sources": [source_id]})
    status = follow(obj, started["jobId"], make_console(), show=True)
    click.echo(f"Added {status['totals']['turnsAdded']} turns from {source_id}.")


@sources.command("remove")
@click.argument("name")
@pass_ctx
def remove_source(obj: CliContext, name: str) -> None:
    """Forget a custom agent's recipe (its imported memories are kept)."""
    source_id = re.sub(r"[^a-z0-9_]", "_", normalise_name(name))
    target = recipes_dir(obj.config().home) / f"{source_id}.json"
    if not target.exists():
        fail(f"no custom agent named {name}")
    target.unlink()
    click.echo(f"✓ removed the {source_id} recipe; its imported memories are kept")
