"""``memmy-memory import`` and ``memmy-memory sources``: history import through the daemon, with live progress."""

from __future__ import annotations

import sys
from typing import Any

import click
import httpx
from rich.console import Console
from rich.live import Live
from rich.table import Table

from memmy.cli.client import ClientError
from memmy.cli.context import CliContext, pass_ctx, strip_none
from memmy.cli.output import emit_json, fail

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


def follow(obj: CliContext, job_id: str, console: Console, show: bool) -> dict[str, Any]:
    """Stream the job's server-sent events, redrawing the progress table; return the final status."""
    client = obj.client()
    status: dict[str, Any] = obj.call("GET", f"/sources/scan/{job_id}")
    title = f"import {job_id}"
    try:
        with Live(progress_table(status, title), console=console, refresh_per_second=4, transient=not show) as live:
            with client.stream_events(f"/sources/scan/{job_id}/events") as events:
                for event in events:
                    status = event
                    live.update(progress_table(status, title))
                    if status["state"] in FINAL_STATES:
                        break
    except KeyboardInterrupt:
        obj.call("POST", f"/sources/scan/{job_id}/stop", {})
        console.print("[yellow]Stopped. Turns written so far are kept; run the import again to continue.[/]")
        raise SystemExit(130) from None
    except (httpx.HTTPError, ClientError):
        status = obj.call("GET", f"/sources/scan/{job_id}")  # stream dropped: fall back to one status read
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
        }
    )
    started = obj.call("POST", "/sources/scan", body)
    console = Console(stderr=obj.as_json)
    status = follow(obj, started["jobId"], console, show=not obj.as_json)
    if obj.as_json:
        emit_json(status)
        return
    totals = status["totals"]
    verb = "Would add" if status.get("dryRun") else "Added"
    console.print(
        f"{verb} {totals['turnsAdded']} turns from {totals['messagesScanned']} messages "
        f"({totals['turnsExisting']} already imported, {totals['turnsWaiting']} waiting for an answer, "
        f"{totals['failed']} failed)."
    )
    skipped = skipped_table(status)
    if skipped is not None:
        console.print(skipped)
    if status["state"] == "failed" or totals["failed"]:
        fail(status.get("error") or "some turns failed to import; run the import again to retry them")


@click.command("sources")
@pass_ctx
def sources(obj: CliContext) -> None:
    """List detected agents, their history paths, last sync and imported turn counts."""
    result = obj.call("GET", "/sources")
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
    Console().print(table)
