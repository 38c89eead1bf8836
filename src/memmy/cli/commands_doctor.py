"""``memmy-memory doctor``: check the store file offline (no daemon needed) and, with ``--repair``, fix what can
be fixed in place; one line per finding with the command that fixes it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from memmy.cli.context import CliContext, pass_ctx
from memmy.cli.output import emit_json, fail
from memmy.config import load_config
from memmy.errors import MemmyError

if TYPE_CHECKING:
    from memmy.service.store_health import Finding


def finding_line(finding: Finding) -> str:
    """``error  fts_damaged  message`` and, indented below, ``fix: command``."""
    return f"{finding.severity:<7} {finding.code:<16} {finding.message}\n{'':<25}fix: {finding.fix}"


@click.command("doctor")
@click.option("--repair", "do_repair", is_flag=True, help="Fix what can be fixed in place (the full-text index).")
@click.option("--db", "db_path", type=click.Path(dir_okay=False), help="SQLite file (default: from config).")
@pass_ctx
def doctor(obj: CliContext, do_repair: bool, db_path: str | None) -> None:
    """Check the store file (damage, full-text index, free disk space); exit 1 when a problem remains."""
    # Imported here so other commands never pay for the service layer at start-up.
    from memmy.service.store_health import check_store, repair

    try:
        path = Path(load_config(obj.config_path, db_override=db_path).storage.sqlite_path)
        findings = check_store(path)
        repaired: list[str] = []
        if do_repair and any(f.repairable for f in findings):
            repaired = repair(path)
            findings = check_store(path)
    except MemmyError as exc:
        fail(exc.message)
        return
    errors = [f for f in findings if f.severity == "error"]
    if obj.as_json:
        findings_json = [f.to_json() for f in findings]
        emit_json({"path": str(path), "ok": not errors, "repaired": repaired, "findings": findings_json})
    else:
        for line in repaired:
            click.echo(f"repaired {line}")
        for finding in findings:
            click.echo(finding_line(finding))
        if not findings:
            click.echo(f"ok      store            {path} passed quick_check and the full-text index check")
        elif any(f.repairable for f in errors) and not do_repair:
            click.echo("run `memmy-memory doctor --repair` to fix what can be fixed in place")
    if errors:
        raise SystemExit(1)
