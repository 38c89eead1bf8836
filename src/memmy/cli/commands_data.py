"""``memmy-memory export | import-store | wipe | logs``: the user's data, through the running daemon."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from memmy.cli.context import CliContext, pass_ctx, strip_none
from memmy.daemon_client import routes

json_flag = click.option("--json", "as_json", is_flag=True, help="Print raw JSON.")


def _who(obj: CliContext) -> dict[str, str]:
    """Audit rows name the CLI as the actor unless ``--source`` says otherwise."""
    return {"source": obj.source or "cli"}


def _use_json(obj: CliContext, as_json: bool) -> None:
    if as_json:
        obj.as_json = True


def _table_lines(counts: dict[str, Any]) -> list[str]:
    return [f"  {name:<28} {value}" for name, value in counts.items() if value]


@click.command("export")
@click.option("--out", type=click.Path(dir_okay=False), help="Archive to write (default ~/.memmy/exports/…zip).")
@click.option("--no-raw", is_flag=True, help="Leave out the raw conversation turns (memories only).")
@json_flag
@pass_ctx
def export(obj: CliContext, out: str | None, no_raw: bool, as_json: bool) -> None:
    """Write the whole store to one portable archive (consistent while the daemon runs)."""
    _use_json(obj, as_json)
    body = strip_none({"out": str(Path(out).expanduser().resolve()) if out else None, "raw": not no_raw})
    result = obj.call(routes.ADMIN_EXPORT, body, params=_who(obj))
    total = sum(result["counts"].values())
    lines = [f"Exported {total} rows to {result['path']} ({result['bytes']} bytes)", *_table_lines(result["counts"])]
    obj.output(result, "\n".join(lines))


@click.command("import-store")
@click.argument("archive", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--on-conflict",
    type=click.Choice(["skip", "replace", "error"]),
    default="skip",
    show_default=True,
    help="A row that already exists: keep it, overwrite it, or refuse the whole import.",
)
@click.option("--dry-run", is_flag=True, help="Only count what would be added and what conflicts.")
@json_flag
@pass_ctx
def import_store(obj: CliContext, archive: str, on_conflict: str, dry_run: bool, as_json: bool) -> None:
    """Merge or restore an archive made by `memmy-memory export`."""
    _use_json(obj, as_json)
    body = {"path": str(Path(archive).resolve()), "onConflict": on_conflict, "dryRun": dry_run}
    result = obj.call(routes.ADMIN_IMPORT, body, params=_who(obj))
    head = "Dry run: would add" if dry_run else "Added"
    lines = [f"{head} {result['added']} rows; {result['conflicts']} already present ({on_conflict})."]
    for name, row in result["tables"].items():
        if row["new"] or row["conflicts"]:
            lines.append(f"  {name:<28} +{row['new']}  ={row['conflicts']}")
    obj.output(result, "\n".join(lines))


@click.command("wipe")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--no-backup", is_flag=True, help="Do not write a backup archive first.")
@json_flag
@pass_ctx
def wipe(obj: CliContext, yes: bool, no_backup: bool, as_json: bool) -> None:
    """Remove every memory and all history from the store (config and tokens are kept)."""
    _use_json(obj, as_json)
    if not yes:
        note = "" if no_backup else " A backup archive is written first."
        click.confirm(f"Remove every memory, session, episode and import record?{note}", abort=True, err=True)
    result = obj.call(routes.ADMIN_WIPE, {"confirm": True, "backup": not no_backup}, params=_who(obj))
    removed = result["removed"]
    lines = [f"Removed {sum(removed.values())} rows:", *_table_lines(removed)]
    lines.append(f"Backup: {result['backup']}" if result["backup"] else "No backup was written.")
    lines.append("Kept: " + ", ".join(result["kept"]))
    obj.output(result, "\n".join(lines))


def _log_line(kind: str, item: Mapping[str, Any]) -> str:
    if kind == "audit":
        actor = item["actor"].get("source", "?")
        return f"{item['createdAt']}  {item['action']:<18} {actor:<14} {item['targetKind'] or ''} {item['targetId']}"
    if kind == "changes":
        return (
            f"{item['createdAt']}  #{item['seq']:<6} {item['changeType']:<12} {item['memoryId']} "
            f"v{item['version']} ({item['source']})"
        )
    if kind == "recalls":
        ids = ", ".join(item["injectedIds"][:5])
        return f"{item['createdAt']}  {item['request'].get('mode', '?'):<10} {item['query'][:60]!r} -> {ids}"
    ok = "ok " if item["success"] else "ERR"
    return f"{item['calledAt']}  {ok} {item['toolName']:<14} {item['sourceAgent'] or '':<12} {item['durationMs']} ms"


def _cursor(kind: str, item: Mapping[str, Any]) -> int:
    return int(item["n"] if kind == "audit" else item["seq"] if kind == "changes" else item["id"])


@click.command("logs")
@click.option("--audit", "kind", flag_value="audit", default=True, help="Governance actions (default).")
@click.option("--api", "kind", flag_value="api", help="memory_add / memory_search calls.")
@click.option("--changes", "kind", flag_value="changes", help="The memory change log.")
@click.option("--recalls", "kind", flag_value="recalls", help="Recall events (turn start and search).")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new rows (Ctrl-C to stop).")
@json_flag
@pass_ctx
def logs(obj: CliContext, kind: str, limit: int, follow: bool, as_json: bool) -> None:
    """Show the audit, API, change or recall log, newest last."""
    _use_json(obj, as_json)
    if follow and kind == "recalls":
        raise click.UsageError("--follow works with --audit, --api and --changes")
    result = obj.call(routes.LOGS, params={"kind": kind, "limit": limit})
    items = list(reversed(result["items"]))
    if not follow:
        obj.output(result, "\n".join(_log_line(kind, i) for i in items) or f"No {kind} log rows.")
        return
    cursor = max((_cursor(kind, i) for i in items), default=0)
    for item in items:
        click.echo(json.dumps(item, ensure_ascii=False) if obj.as_json else _log_line(kind, item))
    try:
        while True:
            time.sleep(1.0)
            page = obj.call(routes.LOGS, params={"kind": kind, "after": cursor, "limit": 500})
            for item in page["items"]:
                cursor = max(cursor, _cursor(kind, item))
                click.echo(json.dumps(item, ensure_ascii=False) if obj.as_json else _log_line(kind, item), nl=True)
    except KeyboardInterrupt:
        return


COMMANDS = (export, import_store, wipe, logs)
