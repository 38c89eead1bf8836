"""A team server from both sides: ``memmy-memory users`` (the owner adds, lists and revokes people),
``memmy-memory team`` (a laptop opts a project into the team scope; ``$MEMMY_HOME/team.json``) and
``memmy-memory sync`` (deliver the turns this machine queued while the team server was unreachable)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from memmy.cli.context import CliContext, pass_ctx
from memmy.cli.output import fail
from memmy.daemon_client import routes


@click.group("users")
def users() -> None:
    """The people of a team server (the owner's token only): add, list, revoke."""


@users.command("add")
@click.argument("name")
@pass_ctx
def users_add(obj: CliContext, name: str) -> None:
    """Add a person and print their token (shown this once; only its hash is stored)."""
    result = obj.call(routes.ADMIN_USERS_POST, {"name": name})
    obj.output(
        result,
        f"Added {result['name']}. Their token (shown once, give it to them privately):\n{result['token']}\n"
        f"On their machine: memmy-memory init --url <this server's https URL> --token {result['token']}",
    )


@users.command("list")
@pass_ctx
def users_list(obj: CliContext) -> None:
    """Everyone, revoked people included."""
    result = obj.call(routes.ADMIN_USERS_GET)
    lines = [
        f"{m['name']:<24} added {m['createdAt']}" + (f"  revoked {m['revokedAt']}" if m["revokedAt"] else "")
        for m in result["items"]
    ]
    obj.output(result, "\n".join(lines) or "No people yet: memmy-memory users add NAME")


@users.command("revoke")
@click.argument("name")
@pass_ctx
def users_revoke(obj: CliContext, name: str) -> None:
    """Refuse the person's token from the next request on (their memories stay, under their name)."""
    result = obj.call(routes.ADMIN_USERS_REVOKE, name=name)
    obj.output(result, f"Revoked {result['name']} at {result['revokedAt']}: their token is refused from now on.")


@click.command("sync")
@pass_ctx
def sync(obj: CliContext) -> None:
    """Deliver the turns queued here while the memory server was unreachable, oldest first, each once."""
    from memmy.hook.outbox import Outbox
    from memmy.hook.runtime import memmy_home, send_request, settings

    outbox = Outbox.default(memmy_home())
    report = outbox.deliver(settings(), deadline_s=300.0, send=send_request)
    result = {"delivered": report.delivered, "left": report.left, "failed": report.failed, "error": report.error}
    if report.left and obj.as_json:
        obj.output(result, "")
        raise SystemExit(1)
    if report.left:
        fail(f"delivered {report.delivered}, {report.left} still queued: {report.error or 'server unreachable'}")
    obj.output(result, f"delivered {report.delivered} queued turn(s); the queue is empty")


def _team_file() -> Path:
    from memmy.hook.runtime import memmy_home

    return Path(memmy_home()) / "team.json"


def read_team_file() -> dict[str, Any]:
    """``$MEMMY_HOME/team.json`` as a dict (empty when missing or broken)."""
    try:
        data = json.loads(_team_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_team_file(data: dict[str, Any]) -> Path:
    """Replace ``team.json`` atomically (mode 0600); returns its path."""
    path = _team_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.chmod(0o600)
    tmp.replace(path)
    return path


def _project_root(path: str | None) -> str:
    start = Path(path or os.getcwd()).expanduser().resolve()
    return str(next((c for c in (start, *start.parents) if (c / ".git").exists()), start))


@click.group("team")
def team() -> None:
    """Which projects on this machine share their memories with the team (opt-in, per project)."""


@team.command("share")
@click.argument("project")
@click.option("--path", "folder", type=click.Path(file_okay=False), help="The project folder (default: here).")
@pass_ctx
def team_share(obj: CliContext, project: str, folder: str | None) -> None:
    """Share this project's memories with the team as PROJECT (the same name on every teammate's machine)."""
    root = _project_root(folder)
    data = read_team_file()
    projects = dict(data.get("projects") or {})
    projects[root] = project.strip()
    path = write_team_file({**data, "projects": projects})
    obj.output(
        {"path": root, "project": project, "file": str(path)},
        f"{root} now shares with team project {project!r}: hooks, MCP and the agent started there write team "
        "memories and read the team's (besides your own).",
    )


@team.command("unshare")
@click.option("--path", "folder", type=click.Path(file_okay=False), help="The project folder (default: here).")
@pass_ctx
def team_unshare(obj: CliContext, folder: str | None) -> None:
    """Stop sharing this project (what was shared stays shared; new memories are private again)."""
    root = _project_root(folder)
    data = read_team_file()
    projects = {k: v for k, v in (data.get("projects") or {}).items() if k != root}
    write_team_file({**data, "projects": projects})
    obj.output({"path": root, "shared": False}, f"{root} no longer shares new memories with the team.")


@team.command("show")
@pass_ctx
def team_show(obj: CliContext) -> None:
    """The shared projects and the CA file this machine uses for the team server."""
    data = read_team_file()
    projects = data.get("projects") or {}
    lines = [f"{root}  ->  {name}" for root, name in sorted(projects.items())] or ["No shared projects."]
    lines.append(f"CA: {data.get('ca') or 'the system certificates'}")
    obj.output(data, "\n".join(lines))
