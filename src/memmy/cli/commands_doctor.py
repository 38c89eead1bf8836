"""``memmy-memory doctor``: check config, the daemon and its token, installed hooks, the store file (offline, no
daemon needed), the vector index and the embedding model and, with ``--repair``, fix what can be fixed in place;
one line per finding with the command that fixes it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from memmy.cli.context import CliContext, pass_ctx
from memmy.cli.output import emit_json, fail
from memmy.config import load_config
from memmy.errors import MemmyError

if TYPE_CHECKING:
    from memmy.cli.client import ClientSettings
    from memmy.service.store_health import Finding


def finding_line(finding: Finding) -> str:
    """``error  fts_damaged  message`` and, indented below, ``fix: command`` (none for an ``ok`` line)."""
    if finding.severity == "info":
        return f"{'ok':<7} {finding.code:<16} {finding.message}"
    return f"{finding.severity:<7} {finding.code:<16} {finding.message}\n{'':<25}fix: {finding.fix}"


@click.command("doctor")
@click.option(
    "--repair",
    "do_repair",
    is_flag=True,
    help="Fix what can be fixed in place (the full-text index; the vector mirror on PostgreSQL).",
)
@click.option("--db", "db_path", type=click.Path(dir_okay=False), help="SQLite file (default: from config).")
@click.option("--offline", is_flag=True, help="Only the store file's checks and disk space (no daemon, hooks, model).")
@click.option(
    "--canary",
    is_flag=True,
    help="Also send a marker turn through each installed agent's real hooks: stored, recalled, then removed.",
)
@pass_ctx
def doctor(obj: CliContext, do_repair: bool, db_path: str | None, offline: bool, canary: bool) -> None:
    """Check config, daemon and token, installed hooks, the store (integrity, full-text and vector index, disk
    space) and the embedding model; one line per finding with the command that fixes it; exit 1 on an error.
    With --canary, run each installed agent's hooks end to end (after a host upgrade)."""
    # Imported here so other commands never pay for the service layer at start-up.
    from memmy.cli import doctor_checks as checks
    from memmy.cli.client import ClientSettings
    from memmy.service.store_health import check_postgres, check_store, repair, repair_postgres

    try:
        config = load_config(obj.config_path, db_override=db_path)
    except MemmyError as exc:
        findings = [checks.config_finding(Path(obj.config_path or "config.yaml"), exc.message)]
        _report(obj, None, [], findings)
        return
    path = Path(config.storage.sqlite_path)
    postgres = config.storage.backend == "postgres"  # no file: the server's own checks, its indexes rebuilt
    try:
        dsn = config.storage.postgres_dsn
        findings = check_postgres(dsn) if postgres else check_store(path)
        repaired: list[str] = []
        if do_repair and any(f.repairable for f in findings):
            repaired = repair_postgres(dsn, findings) if postgres else repair(path)
            findings = check_postgres(dsn) if postgres else check_store(path)
    except MemmyError as exc:
        fail(exc.message)
        return
    if not offline:
        if not postgres and not any(f.code in ("damaged", "missing") for f in findings):
            findings += checks.vector_findings(path)
        findings += checks.model_findings(config)
        settings = ClientSettings.resolve(
            url=obj.url, token=obj.token, user_id=obj.user_id, source=obj.source, config=config
        )
        findings += checks.daemon_findings(settings, config)
        findings += checks.hook_findings(config, settings.url)
        if canary:
            findings += _canaries(settings, findings)
    _report(obj, config.storage.location, repaired, findings)


def _canaries(settings: ClientSettings, findings: list[Finding]) -> list[Finding]:
    from memmy.cli.doctor_canary import canary_findings
    from memmy.service.store_health import Finding

    down = [f for f in findings if f.code in ("daemon_down", "token_refused")]
    if down:
        return [Finding("canary_skipped", "error", "no canary was sent: the daemon cannot be reached", down[0].fix)]
    return canary_findings(settings)


def _report(obj: CliContext, path: str | None, repaired: list[str], findings: list[Finding]) -> None:
    errors = [f for f in findings if f.severity == "error"]
    if obj.as_json:
        findings_json = [f.to_json() for f in findings]
        emit_json(
            {"path": path, "ok": not errors, "repaired": repaired, "findings": findings_json}
        )
    else:
        for line in repaired:
            click.echo(f"repaired {line}")
        for finding in findings:
            click.echo(finding_line(finding))
        if not [f for f in findings if f.severity != "info"]:
            click.echo(
                f"ok      all              {path} passed quick_check and the full-text and vector index checks; "
                "the daemon, hooks and model are in order"
            )
        elif any(f.repairable for f in errors):
            click.echo("run `memmy-memory doctor --repair` to fix what can be fixed in place")
    if errors:
        raise SystemExit(1)
