"""``memmy-memory dream run | log | show | restore``: thin wrappers over ``/api/v1/dream/...``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from memmy.cli.context import CliContext, pass_ctx
from memmy.daemon_client import routes

ACTION_ORDER = ("merge", "supersede", "archive_stale", "archive_contradicted")

json_flag = click.option("--json", "as_json", is_flag=True, help="Print raw JSON.")


def _counts(stats: Mapping[str, Any]) -> str:
    parts = [f"{stats[name]} {name}" for name in ACTION_ORDER if stats.get(name)]
    return ", ".join(parts) or "no changes"


def _change_line(change: Mapping[str, Any]) -> str:
    return f"  {change['seq']:>3}. {change['action']:<20} {change['memoryId']}  {change['reason']}"


def _use_json(obj: CliContext, as_json: bool) -> None:
    if as_json:
        obj.as_json = True


@click.group("dream")
def dream() -> None:
    """Consolidate recent memories (merge duplicates, archive stale or contradicted ones); every pass can be
    restored exactly."""


@dream.command("run")
@click.option("--dry-run", is_flag=True, help="Report what would change; write nothing.")
@json_flag
@pass_ctx
def dream_run(obj: CliContext, dry_run: bool, as_json: bool) -> None:
    """Run one pass now."""
    _use_json(obj, as_json)
    result = obj.call(routes.DREAM_RUN, {"dryRun": dry_run})
    changes = result.get("changes") or []
    stats = result["stats"]
    if result["dryRun"]:
        head = f"Dry run: would make {len(changes)} change(s) ({_counts(stats)}); nothing was written."
    else:
        head = f"Dream {result['id']}: {len(changes)} change(s) ({_counts(stats)})."
        if changes:
            head += f"\nUndo with: memmy-memory dream restore {result['id']}"
    if stats.get("capped"):
        head += f"\nStopped at maxChanges ({stats['maxChanges']}); run again for the rest."
    obj.output(result, "\n".join([head, *(_change_line(c) for c in changes)]))


@dream.command("log")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@json_flag
@pass_ctx
def dream_log(obj: CliContext, limit: int, as_json: bool) -> None:
    """Past passes, newest first."""
    _use_json(obj, as_json)
    result = obj.call(routes.DREAM_LOG, params={"limit": limit})
    lines = [
        f"{d['id']}  {d['startedAt']}  {d['status']:<9} {d['trigger']:<9} {_counts(d['stats'])}"
        + (f"  error: {d['error']}" if d.get("error") else "")
        for d in result["dreams"]
    ] or ["No dreams yet."]
    schedule = result["schedule"]
    if schedule["enabled"]:
        lines.append(f"Scheduled every {schedule['intervalHours']}h; next due {schedule['nextDueAt']}.")
    else:
        lines.append("Scheduled runs are off (config dream.enabled: false).")
    obj.output(result, "\n".join(lines))


@dream.command("show")
@click.argument("dream_id")
@click.option("--verbose", is_flag=True, help="Include the full before/after rows (as JSON).")
@json_flag
@pass_ctx
def dream_show(obj: CliContext, dream_id: str, verbose: bool, as_json: bool) -> None:
    """One pass and every change it made."""
    _use_json(obj, as_json or verbose)
    result = obj.call(routes.DREAM_GET, params={"verbose": "true"} if verbose else None, dream_id=dream_id)
    head = f"{result['id']}  {result['status']}  {result['trigger']}  started {result['startedAt']}"
    if result.get("restoredAt"):
        head += f"  restored {result['restoredAt']}"
    lines = [head, f"{len(result['changes'])} change(s): {_counts(result['stats'])}"]
    for change in result["changes"]:
        lines.append(_change_line(change))
        before, after = change["before"], change["after"]
        lines.append(f"       {before['status']} v{before['version']} -> {after['status']} v{after['version']}")
    obj.output(result, "\n".join(lines))


@dream.command("restore")
@click.argument("dream_id")
@click.option("--force", is_flag=True, help="Overwrite memories that were edited after the dream.")
@json_flag
@pass_ctx
def dream_restore(obj: CliContext, dream_id: str, force: bool, as_json: bool) -> None:
    """Put every memory a pass changed back exactly as it was."""
    _use_json(obj, as_json)
    result = obj.call(routes.DREAM_RESTORE, {"force": force}, dream_id=dream_id)
    lines = [f"Restored {result['id']}: {result['memories']} memories put back."]
    if result["overwritten"]:
        lines.append("Overwrote later edits of: " + ", ".join(result["overwritten"]))
    lines += [f"Skipped {s['memoryId']}: {s['reason']}" for s in result["skipped"]]
    obj.output(result, "\n".join(lines))
