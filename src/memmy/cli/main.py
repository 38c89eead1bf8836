"""``memmy-memory``: the command line for people, scripts and agents.

Every client command talks to the daemon over HTTP (one code path, one error mapping); ``serve`` and
``init`` are the only commands that touch the store directly.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from memmy import __version__
from memmy.cli.client import ClientSettings
from memmy.cli.context import CliContext, list_option, pass_ctx, strip_none
from memmy.cli.lazy import LazyGroup
from memmy.cli.output import emit_error, emit_json, fail, format_debug, format_health, format_hits, format_memory
from memmy.daemon_client import routes
from memmy.errors import MemmyError

#: The commands that live in modules of their own, loaded only when one of them runs (or asks for its own
#: help): name -> (module, attribute, the short help ``memmy-memory --help`` lists). A test checks each short help
#: against the command's own, so the listing cannot drift from the code.
LAZY_COMMANDS: dict[str, tuple[str, str, str]] = {
    "confirm": ("memmy.cli.commands_keys", "confirm", "Confirm a fact is still current (refreshes its freshness)."),
    "correct": (
        "memmy.cli.commands_keys",
        "correct",
        "Replace a fact with a new version; the old one stays in the history but is no longer recalled.",
    ),
    "doctor": (
        "memmy.cli.commands_doctor",
        "doctor",
        "Check config, daemon and token, installed hooks, the store (integrity, full-text and vector index, disk "
        "space) and the embedding model; one line per finding with the command that fixes it; exit 1 on an error.",
    ),
    "dream": (
        "memmy.cli.commands_dream",
        "dream",
        "Consolidate recent memories (merge duplicates, archive stale or contradicted ones); every pass can be "
        "restored exactly.",
    ),
    "episodes": (
        "memmy.cli.commands_evolve",
        "episodes",
        "List recent episodes with their reward and the policies they produced.",
    ),
    "export": (
        "memmy.cli.commands_data",
        "export",
        "Write the whole store to one portable archive (consistent while the daemon runs).",
    ),
    "feedback": (
        "memmy.cli.commands_evolve",
        "feedback",
        "Give feedback on a memory id (trace_/policy_/skill_…) or an episode id (episode_…).",
    ),
    "forget": (
        "memmy.cli.commands_keys",
        "forget",
        "Forget a memory for good: it is deleted and a tombstone keeps its text out (adds, captures, re-imports "
        "are refused) until `tombstones restore`.",
    ),
    "history": ("memmy.cli.commands_keys", "history", "The version chain of a memory, oldest first."),
    "import": (
        "memmy.cli.commands_import",
        "import_history",
        "Import history from every detected agent (or --source X) into memory.",
    ),
    "import-store": (
        "memmy.cli.commands_data",
        "import_store",
        "Merge or restore an archive made by `memmy-memory export`.",
    ),
    "init": (
        "memmy.cli.commands_agents",
        "init",
        "Write ~/.memmy/config.yaml, create the database, and install hooks/plugins/skills/MCP into your agents.",
    ),
    "jobs": (
        "memmy.cli.commands_evolve",
        "jobs",
        "Evolution jobs and per-status counts (what the background worker is doing).",
    ),
    "keys": (
        "memmy.cli.commands_keys",
        "keys",
        "The associative key graph: recall by key clusters, walk Key -> Memory -> Key, remember under keys.",
    ),
    "logs": ("memmy.cli.commands_data", "logs", "Show the audit, API, change or recall log, newest last."),
    "mcp": (
        "memmy.cli.commands_mcp",
        "mcp",
        "Serve the MCP tools on stdin/stdout (for Claude Code, Codex, Cursor, ...), backed by the daemon.",
    ),
    "migrate": (
        "memmy.cli.commands_migrate",
        "migrate",
        "Copy the whole store to PostgreSQL (--to postgresql://…) or back to a SQLite file, compared table by table.",
    ),
    "model": (
        "memmy.cli.commands_model",
        "model",
        "The local embedding model (all-MiniLM-L6-v2): fetch its weights once, show where they are.",
    ),
    "panel": (
        "memmy.cli.commands_panel",
        "panel",
        "Open the Memory panel in the browser (prints the one-time sign-in link, valid 10 minutes, used once).",
    ),
    "remove": (
        "memmy.cli.commands_agents",
        "remove",
        "Remove memmy's hooks, plugins, skills and instruction blocks from agents (memories are kept).",
    ),
    "resume": (
        "memmy.cli.commands_resume",
        "resume",
        "List up to five earlier tasks matching QUERY; with --pick N, print that task's turns to continue it.",
    ),
    "service": (
        "memmy.cli.commands_service",
        "service",
        "Run the memory service at login (systemd user unit on Linux, launchd agent on macOS).",
    ),
    "session": ("memmy.cli.commands_session", "session", "Open and close agent sessions."),
    "sources": (
        "memmy.cli.commands_import",
        "sources",
        "List detected agents (default), or add / remove a custom agent.",
    ),
    "tombstones": (
        "memmy.cli.commands_keys",
        "tombstones",
        "Forgotten values: list them (the default), or restore one so it may come back.",
    ),
    "turn": ("memmy.cli.commands_session", "turn", "Record turn start (recall) and turn completion (capture)."),
    "wipe": (
        "memmy.cli.commands_data",
        "wipe",
        "Remove every memory and all history from the store (config and tokens are kept).",
    ),
    "worker": ("memmy.cli.commands_evolve", "worker", "The background worker (embeddings and evolution jobs)."),
    "users": (
        "memmy.cli.commands_team",
        "users",
        "The people of a team server (the owner's token only): add, list, revoke.",
    ),
    "team": (
        "memmy.cli.commands_team",
        "team",
        "Which projects on this machine share their memories with the team (opt-in, per project).",
    ),
    "sync": (
        "memmy.cli.commands_team",
        "sync",
        "Deliver the turns queued here while the memory server was unreachable, oldest first, each once.",
    ),
}

JSON_FLAGS = ("--json", "-j")


class JsonAnywhereGroup(LazyGroup):
    """The root group: ``--json`` / ``-j`` is accepted before or after any subcommand (``search foo --json``), and
    the commands of :data:`LAZY_COMMANDS` are imported only when they run."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Move every ``--json`` / ``-j`` before a ``--`` separator to the front, where the group reads it."""
        cut = args.index("--") if "--" in args else len(args)
        head, tail = args[:cut], args[cut:]
        if any(arg in JSON_FLAGS for arg in head):
            args = ["--json", *(arg for arg in head if arg not in JSON_FLAGS), *tail]
        return super().parse_args(ctx, args)

    def main(  # type: ignore[override]
        self,
        args: list[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Under ``--json`` every error, a usage error included, is one JSON object on stderr (exit status 1, or
        click's 2 for a usage error); without it click reports errors as usual."""
        argv = list(sys.argv[1:] if args is None else args)
        head = argv[: argv.index("--")] if "--" in argv else argv
        if not standalone_mode or not any(arg in JSON_FLAGS for arg in head):
            return super().main(argv, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            kind = "usage_error" if isinstance(exc, click.UsageError) else "error"
            emit_error(exc.format_message(), kind, as_json=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            emit_error("aborted", "aborted", as_json=True)
            sys.exit(1)
        except (SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:  # an unexpected failure: still one JSON object, never a traceback
            emit_error(f"{type(exc).__name__}: {exc}", "internal", as_json=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(
    cls=JsonAnywhereGroup, lazy_commands=LAZY_COMMANDS, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(__version__, "-v", "--version", prog_name="memmy-memory")
@click.option("--url", envvar=None, help="Daemon URL (default: config storage.endpoint or http://127.0.0.1:18960).")
@click.option("--token", help="Bearer token (default: MEMMY_MEMORY_TOKEN or config storage.token).")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="Config file (default: $MEMMY_CONFIG or ~/.memmy/config.yaml).",
)
@click.option("--source", help="Calling agent, e.g. claude_code, codex, cursor.")
@click.option("--user-id", "--user_id", "user_id", help="User namespace (sent as x-memmy-user-id).")
@click.option("--json", "-j", "as_json", is_flag=True, help="Print raw JSON.")
@click.pass_context
def cli(
    ctx: click.Context,
    url: str | None,
    token: str | None,
    config_path: str | None,
    source: str | None,
    user_id: str | None,
    as_json: bool,
) -> None:
    """memmy-memory: one local memory shared by all your coding agents."""
    ctx.obj = CliContext(url, token, config_path, source, user_id, as_json)


@cli.command()
@click.option("--host", help="Bind address (default 127.0.0.1).")
@click.option("--port", type=int, help="Port (default 18960).")
@click.option("--db", "db_path", type=click.Path(dir_okay=False), help="SQLite file (overrides config).")
@click.option("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]))
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), help="Serve HTTPS with this certificate.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), help="The certificate's private key.")
@click.option("--behind-proxy", is_flag=True, help="A TLS reverse proxy is in front (docs/team.md).")
@pass_ctx
def serve(
    obj: CliContext,
    host: str | None,
    port: int | None,
    db_path: str | None,
    log_level: str,
    tls_cert: str | None,
    tls_key: str | None,
    behind_proxy: bool,
) -> None:
    """Run the memory service in the foreground (Ctrl-C or SIGTERM to stop)."""
    # One BLAS thread: a single query embedding is latency-bound, and with the cores shared (agents, builds)
    # multi-threaded BLAS made it 10x slower in our measurements. Set before numpy loads; users may override.
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, "1")
    # Imported here so client commands never pay for uvicorn and the embedding stack at start-up.
    from memmy.cli.commands_model import fetch_for_local_provider
    from memmy.config import load_config
    from memmy.server.run import TlsFiles
    from memmy.server.run import serve as run_server

    try:
        config = load_config(obj.config_path, db_override=db_path)
        warning = fetch_for_local_provider(config.embedding.provider)
        if warning:  # the service still runs (full-text recall); vectors wait for the weights
            click.echo(f"warning: {warning}", err=True)
        tls = TlsFiles.of(tls_cert, tls_key)
        run_server(config, host=host, port=port, log_level=log_level, tls=tls, behind_proxy=behind_proxy)
    except MemmyError as exc:
        fail(exc.message)


@cli.command()
@pass_ctx
def health(obj: CliContext) -> None:
    """Check that the daemon is up and show its storage and model state."""
    result = obj.call(routes.HEALTH)
    obj.output(result, format_health(result))


@cli.command()
@pass_ctx
def status(obj: CliContext) -> None:
    """Counts per layer, sources and the embedding queue."""
    overview = obj.call(routes.PANEL_OVERVIEW)
    health_info = obj.call(routes.HEALTH)
    counts = overview["counts"]
    lines = [
        f"L1 traces: {counts['memories']}   L2 policies: {counts['experiences']}   "
        f"L3 world models: {counts['worldModels']}   Skills: {counts['skills']}",
        "Sources: " + (", ".join(f"{s['source']} {s['count']}" for s in overview["sourceDistribution"]) or "none"),
        f"Embedding queue: {health_info['embeddingQueue']['pending']} pending, "
        f"{health_info['embeddingQueue']['failed']} failed",
        "Agents:",
    ]
    agents = agent_status(obj)
    for row in agents:
        lines.append(
            f"  {row['agent']:<12} {'installed' if row['installed'] else '-':<10} "
            f"last capture: {row['lastCapture'] or 'never'}   last recall: {row['lastRecall'] or 'never'}"
        )
    obj.output({"overview": overview, "health": health_info, "agents": agents}, "\n".join(lines))


def agent_status(obj: CliContext) -> list[dict[str, Any]]:
    """Per detected agent: memmy installed or not, last captured turn, last recall."""
    from memmy.integrations.registry import INSTALLERS

    env = dict(os.environ)
    rows = []
    for name, installer in INSTALLERS.items():
        if not installer.detected(env):
            continue
        installed = (installer.root(env) / "skills" / "memmy-memory" / "SKILL.md").exists()
        items = obj.call(routes.PANEL_ITEMS, params={"sourceAgent": name, "pageSize": 1})["items"]
        logs = obj.call(routes.MEMORY_LOGS, params={"tools": "memory_search", "sourceAgent": name, "limit": 1})
        rows.append(
            {
                "agent": name,
                "installed": installed,
                "lastCapture": items[0]["createdAt"] if items else None,
                "lastRecall": logs["logs"][0]["calledAt"] if logs["logs"] else None,
            }
        )
    return rows


@cli.command()
@click.argument("query", required=False)
@click.option("--query", "query_opt", help="Search text (or pass it as the argument).")
@click.option("--layers", help="Comma-separated layers: L1,L2,L3,Skill.")
@click.option("--limit", type=click.IntRange(1, 100), default=10, show_default=True)
@click.option(
    "--scope",
    type=click.Choice(["auto", "pooled", "project", "agent"]),
    help="Which memories to search (default: config defaultScope; auto = this repository when inside one).",
)
@click.option("--session-id", help="Session the search belongs to.")
@click.option("--verbose", is_flag=True, help="Show candidates, channels, drops and statuses.")
@pass_ctx
def search(
    obj: CliContext,
    query: str | None,
    query_opt: str | None,
    layers: str | None,
    limit: int,
    scope: str | None,
    session_id: str | None,
    verbose: bool,
) -> None:
    """Search memories (full-text + vectors, fused)."""
    text = query_opt or query
    if not text:
        raise click.UsageError('give a query: memmy-memory search "what to find"')
    body = strip_none(
        {
            "query": text,
            "layers": list_option(layers),
            "limit": limit,
            "scope": scope,
            "sessionId": session_id,
            "verbose": verbose or None,
        }
    )
    result: dict[str, Any] = dict(obj.call(routes.MEMORY_SEARCH, body))
    if scope is None and "scope:project" in (result.get("status") or []):
        # Inside a repository the daemon searched this project only; a person at the CLI expects everything,
        # this project first. So the other projects' hits follow, and the output says where they come from.
        pooled = obj.call(routes.MEMORY_SEARCH, strip_none({**body, "scope": "pooled", "verbose": None}))
        here = {hit["id"] for hit in result.get("hits") or []}
        others = [hit for hit in pooled.get("hits") or [] if hit["id"] not in here]
        room = max(0, limit - len(here))
        result = {**result, "hits": (result.get("hits") or []) + others[:room], "otherProjectHits": len(others)}
        result["projectHits"] = len(here)
    human = format_hits(result)
    if verbose and result.get("debug"):
        human += "\n" + format_debug(result["debug"])
    obj.output(result, human)


@cli.command()
@click.argument("content", required=False)
@click.option("--content", "content_opt", help="Memory text (or pass it as the argument; '-' reads stdin).")
@click.option("--layer", type=click.Choice(["L1", "L2", "L3", "Skill"], case_sensitive=False), default="L1")
@click.option("--title")
@click.option("--tags", help="Comma-separated or JSON array.")
@click.option("--session-id")
@click.option("--turn-id")
@click.option("--global", "is_global", is_flag=True, help="Visible from every project.")
@pass_ctx
def add(
    obj: CliContext,
    content: str | None,
    content_opt: str | None,
    layer: str,
    title: str | None,
    tags: str | None,
    session_id: str | None,
    turn_id: str | None,
    is_global: bool,
) -> None:
    """Store a durable fact, preference, decision or procedure."""
    text = content_opt or content
    if text == "-":
        text = sys.stdin.read()
    if not text or not text.strip():
        raise click.UsageError('give the content: memmy-memory add "what to remember"')
    body = strip_none(
        {
            "content": text,
            "layer": layer,
            "title": title,
            "tags": list_option(tags),
            "sessionId": session_id,
            "turnId": turn_id,
            "visibility": "global" if is_global else None,
        }
    )
    result = obj.call(routes.MEMORY_ADD, body)
    if result.get("tombstoned"):
        obj.refuse("tombstoned", result["summary"], tombstoneId=result.get("tombstoneId"))
    verb = "Already stored as" if result.get("deduplicated") else "Added"
    if result.get("restored"):
        verb = "Restored (it was deleted)"
    obj.output(result, f"{verb} {result['id']} ({result['memoryLayer']}): {result['summary']}")


@cli.command()
@click.argument("memory_id", required=False)
@click.option("--id", "id_opt")
@click.option("--verbose", is_flag=True, help="Print the full detail as JSON.")
@pass_ctx
def get(obj: CliContext, memory_id: str | None, id_opt: str | None, verbose: bool) -> None:
    """Show one memory."""
    target = id_opt or memory_id
    if not target:
        raise click.UsageError("give a memory id: memmy-memory get <id>")
    result = obj.call(routes.MEMORY_GET, memory_id=target)
    if verbose and not obj.as_json:
        emit_json(result)
        return
    obj.output(result, format_memory(result))


@cli.command()
@click.argument("memory_id", required=False)
@click.option("--id", "id_opt")
@click.option("--reason", help="Why (kept in the audit log).")
@pass_ctx
def delete(obj: CliContext, memory_id: str | None, id_opt: str | None, reason: str | None) -> None:
    """Delete (hide) a memory: no longer recalled or listed; `restore` undoes it, and adding the same text
    again brings it back. To keep a value out for good, use `forget`."""
    target = id_opt or memory_id
    if not target:
        raise click.UsageError("give a memory id: memmy-memory delete <id>")
    result = obj.call(routes.MEMORY_DELETE, strip_none({"reason": reason}), memory_id=target)
    obj.output(result, f"Deleted {result['id']} (undo: memmy-memory restore {result['id']})")


@cli.command()
@click.argument("memory_id")
@click.option("--reason", help="Why (kept in the audit log).")
@pass_ctx
def restore(obj: CliContext, memory_id: str, reason: str | None) -> None:
    """Bring back a deleted memory (a forgotten one needs `tombstones restore` first)."""
    result = obj.call(routes.MEMORY_RESTORE, strip_none({"reason": reason}), memory_id=memory_id)
    obj.output(result, f"Restored {result['id']}")


@cli.command("reload-config")
@click.option("--reason")
@pass_ctx
def reload_config(obj: CliContext, reason: str | None) -> None:
    """Hot-reload config.yaml in the running daemon."""
    result = obj.call(routes.ADMIN_RELOAD_CONFIG, strip_none({"reason": reason}))
    human = "Config reloaded." + (f" Changed: {', '.join(result['changed'])}." if result["changed"] else " No change.")
    for warning in result.get("warnings") or []:
        human += f"\nwarning: {warning}"
    if result.get("requiresRestart"):
        human += "\nStorage settings changed: restart the daemon (memmy-memory serve) to apply them."
    obj.output(result, human)


@cli.command()
@click.argument("method", type=click.Choice(["GET", "POST", "DELETE"], case_sensitive=False))
@click.argument("path")
@click.option("--body", help="JSON body, a file path, or '-' for stdin.")
@pass_ctx
def raw(obj: CliContext, method: str, path: str, body: str | None) -> None:
    """Send any request to the API and print the JSON answer."""
    payload: Any = None
    if body is not None:
        text = sys.stdin.read() if body == "-" else body
        try:
            if body != "-" and Path(body).is_file():
                text = Path(body).read_text(encoding="utf-8")
            payload = json.loads(text)
        except (json.JSONDecodeError, OSError) as exc:
            raise click.BadParameter(f"--body is not valid JSON: {exc}") from None
    emit_json(obj.request(method.upper(), path, payload))


@cli.command("token")
@pass_ctx
def token_command(obj: CliContext) -> None:
    """Print the service token this CLI sends (--token, then MEMMY_MEMORY_TOKEN, then storage.token)."""
    settings = ClientSettings.resolve(url=obj.url, token=obj.token, user_id=None, source=None, config=obj.config())
    if not settings.token:
        fail("no service token yet: `memmy-memory init` (or `serve`) creates one in ~/.memmy/config.yaml")
    obj.output({"token": settings.token}, str(settings.token))


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script, e.g. ``eval "$(memmy-memory completion bash)"`` in ~/.bashrc."""
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    if completer is None:  # pragma: no cover - the three choices are all built into click
        raise click.UsageError(f"no completion for {shell}")
    click.echo(completer(cli, {}, "memmy-memory", "_MEMMY_MEMORY_COMPLETE").source())


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="memmy-memory")
