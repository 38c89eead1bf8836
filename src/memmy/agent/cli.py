"""The ``memmy`` command: the TUI (bare ``memmy``), ``onboard``, ``status``, ``agent``, ``serve``, ``workbench``,
``sessions``, ``channels``."""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from memmy import __version__
from memmy.agent.config import DEFAULT_SESSION, PROVIDERS, AgentConfig, load_agent_config, write_agent_sections
from memmy.agent.sessions import SessionStore
from memmy.cli.lazy import LazyGroup
from memmy.errors import MemmyError

if TYPE_CHECKING:  # the loop, the providers' SDKs, MCP and Textual load in the commands that use them
    from memmy.agent.loop import TurnEvent

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CONFIG = 3
EXIT_INTERRUPTED = 130


def _config(ctx: click.Context) -> AgentConfig:
    try:
        return load_agent_config(ctx.obj.get("config"))
    except MemmyError as exc:
        click.echo(f"memmy: {exc}", err=True)
        ctx.exit(EXIT_CONFIG)
        raise


def session_choice(session: str | None, standalone: bool, project: str | None) -> tuple[str, str | None]:
    """(session name, project path) from the mutually exclusive ``--session/--standalone/--project``."""
    if sum(bool(x) for x in (session, standalone, project)) > 1:
        raise click.UsageError("--session, --standalone and --project are mutually exclusive; pick one")
    if standalone:
        return f"cli:standalone-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}", None
    if project:
        path = os.path.abspath(os.path.expanduser(project))
        if not os.path.isdir(path):
            raise click.BadParameter(f"{project} is not a directory", param_hint="--project")
        return f"cli:project:{path}", path
    return session or DEFAULT_SESSION, None


#: Commands in modules of their own, imported when they run (see memmy.cli.lazy).
LAZY_COMMANDS = {
    "channels": (
        "memmy.agent.channels.cli",
        "channels",
        "Chat apps the agent answers in (Telegram, Discord, Feishu, DingTalk, WeCom for WeChat, iMessage).",
    ),
    "service": (
        "memmy.agent.gateway_service",
        "service",
        "Run `memmy serve` (workbench, API, chat channels) at login: systemd user unit or launchd agent.",
    ),
    "schedule": (
        "memmy.agent.schedule_cli",
        "schedule",
        "Tasks `memmy serve` runs at a time or on a cron schedule, each in its own session.",
    ),
}


@click.group(cls=LazyGroup, lazy_commands=LAZY_COMMANDS, invoke_without_command=True)
@click.option(
    "--config", "config_file", type=click.Path(dir_okay=False), help="Config file (default ~/.memmy/config.yaml)."
)
@click.option("--session", help="Resume (or create) the session NAME, e.g. cli:work.")
@click.option("--standalone", is_flag=True, help="Start a new standalone session.")
@click.option("--project", type=click.Path(file_okay=False), help="A session bound to a project directory.")
@click.option("--no-memory", is_flag=True, help="Run without the memory daemon.")
@click.version_option(__version__, prog_name="memmy")
@click.pass_context
def cli(
    ctx: click.Context,
    config_file: str | None,
    session: str | None,
    standalone: bool,
    project: str | None,
    no_memory: bool,
) -> None:
    """memmy: a terminal agent with memory. Bare `memmy` opens the full-screen TUI."""
    ctx.ensure_object(dict)
    ctx.obj["config"] = config_file
    if ctx.invoked_subcommand is not None:
        return
    name, path = session_choice(session, standalone, project)
    config = _config(ctx)
    if config.default is None:
        if not sys.stdin.isatty():
            click.echo("memmy: " + "; ".join(config.problems), err=True)
            ctx.exit(EXIT_CONFIG)
        click.echo("memmy: no model configured yet; starting `memmy onboard`", err=True)
        from memmy.agent.onboard import run_onboard

        if run_onboard(config_file, False) != 0:
            ctx.exit(EXIT_CONFIG)
        config = _config(ctx)
    from memmy.agent.tui.app import MemmyApp

    app = MemmyApp(config, session_name=name, project=path, memory=not no_memory, config_file=config_file)
    app.run()
    ctx.exit(app.return_code or 0)


@cli.command()
@click.option("--defaults", is_flag=True, help="Write the config and workspace non-interactively.")
@click.pass_context
def onboard(ctx: click.Context, defaults: bool) -> None:
    """Set up models, providers and tools (a menu with a connection test), or `--defaults`."""
    from memmy.agent.onboard import run_onboard

    ctx.exit(run_onboard(ctx.obj.get("config"), defaults))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Config, workspace, model, provider reachability, memory daemon and tokens."""
    config = _config(ctx)
    import asyncio

    report = asyncio.run(_status(config, ctx.obj.get("config")))
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        for key, value in report.items():
            click.echo(f"{key + ':':<12} {value}")
    ctx.exit(0 if report["provider"].startswith("reachable") else EXIT_FAILED)


async def _status(config: AgentConfig, config_file: str | None) -> dict[str, Any]:
    from memmy.agent.onboard import probe_model
    from memmy.agent.runtime import open_memory

    choice = config.default
    memory = open_memory(config, True, config_file)
    try:
        health = await memory.health()
    finally:
        await memory.aclose()
    reachable = "not configured"
    if choice is not None:
        ok, message = await probe_model(choice)
        reachable = f"reachable ({message})" if ok else f"unreachable: {message}"
    return {
        "config": f"{config.path}" + ("" if config.path.exists() else " (missing: run `memmy onboard --defaults`)"),
        "workspace": f"{config.workspace}" + ("" if config.workspace.is_dir() else " (missing)"),
        "model": f"{choice.model} ({choice.name})" if choice else "none: " + "; ".join(config.problems),
        "provider": reachable if choice is None else f"{reachable} — {choice.provider} {choice.api_base}",
        "presets": ", ".join(sorted(config.presets)) or "none",
        "memory": (
            f"running at {memory.settings.url} (v{health.get('version', '?')})"
            if health
            else f"not reachable at {memory.settings.url}: {memory.error}"
        ),
        "token": "memory token set" if memory.settings.token else "no memory token",
        "serve": f"http://{config.serve_host}:{config.serve_port} "
        + ("(token set)" if config.serve_token else "(token created at first `memmy serve`)"),
    }


@cli.command()
@click.option("-m", "--message", help="The message; read from stdin when absent.")
@click.option("--json", "as_json", is_flag=True, help="Print {answer, status, toolCalls, usage, memory} as JSON.")
@click.option("--session", help="Session to continue (default cli:direct).")
@click.option("--standalone", is_flag=True, help="A new standalone session.")
@click.option("--project", type=click.Path(file_okay=False), help="A session bound to a project directory.")
@click.option("--model", "preset", help="Model preset for this turn.")
@click.option("--yes", is_flag=True, help="Allow shell commands without asking (tools.exec.approval: allow).")
@click.option("--no-memory", is_flag=True, help="Run without the memory daemon.")
@click.pass_context
def agent(
    ctx: click.Context,
    message: str | None,
    as_json: bool,
    session: str | None,
    standalone: bool,
    project: str | None,
    preset: str | None,
    yes: bool,
    no_memory: bool,
) -> None:
    """Send one turn (from --message or stdin) and print the answer. Exit 0 ok, 1 failed, 2 usage, 3 config, 130 ^C."""
    if message is None and not sys.stdin.isatty():
        message = sys.stdin.read()
    if not message or not message.strip():
        click.echo("memmy agent: no message (use --message TEXT or pipe it on stdin)", err=True)
        ctx.exit(EXIT_USAGE)
    assert message is not None
    config = _config(ctx)
    if yes:
        config = replace(config, tools=replace(config.tools, exec_approval="allow"))
    if config.default is None and not preset:
        click.echo("memmy agent: " + "; ".join(config.problems), err=True)
        ctx.exit(EXIT_CONFIG)
    name, path = session_choice(session, standalone, project)
    try:
        import asyncio

        code = asyncio.run(
            _one_turn(config, ctx.obj.get("config"), name, path, message, as_json, preset, not no_memory)
        )
    except KeyboardInterrupt:
        click.echo("\nmemmy: stopped; the session is kept", err=True)
        code = EXIT_INTERRUPTED
    ctx.exit(code)


async def _ask(command: str) -> bool:
    import asyncio

    return await asyncio.to_thread(click.confirm, f"\nmemmy wants to run: {command}\nAllow?", default=False, err=True)


async def _one_turn(
    config: AgentConfig,
    config_file: str | None,
    name: str,
    project: str | None,
    message: str,
    as_json: bool,
    preset: str | None,
    memory: bool,
) -> int:
    streamed: list[bool] = []

    def emit(event: TurnEvent) -> None:
        if event.kind == "text" and not as_json:
            click.echo(event.text, nl=False)
            streamed.append(True)
        elif event.kind == "tool_call" and not as_json:
            click.echo(f"\n⚙ {event.text} {event.data.get('arguments', '')[:120]}", err=True)
        elif event.kind in ("notice", "compaction") and not as_json:
            click.echo(f"memmy: {event.text.splitlines()[0] if event.text else event.kind}", err=True)

    from memmy.agent.runtime import open_runtime

    approve = _ask if sys.stdin.isatty() and config.tools.exec_approval == "ask" else None
    runtime = await open_runtime(
        config, name, project, approve=approve, emit=emit, memory=memory, config_file=config_file
    )
    try:
        for problem in runtime.hub.problems:
            click.echo(f"memmy: {problem}", err=True)
        if preset:
            try:
                runtime.agent.use_preset(preset)
            except KeyError:
                click.echo(f"memmy agent: no model preset {preset!r} (agents.presets)", err=True)
                return EXIT_CONFIG
        result = await runtime.agent.run_turn(message)
    finally:
        await runtime.close()
    if as_json:
        recall = result.recall
        click.echo(
            json.dumps(
                {
                    "answer": result.answer,
                    "status": result.status,
                    "error": result.error,
                    "session": name,
                    "toolCalls": result.tool_calls,
                    "usage": result.usage,
                    "memory": {
                        "state": runtime.memory.state if runtime.memory else "off",
                        "injected": recall.markdown if recall else "",
                        "memoryIds": recall.memory_ids if recall else [],
                    },
                },
                ensure_ascii=False,
            )
        )
    else:
        if streamed:
            click.echo()
        if result.error:
            click.echo(f"memmy: {result.error}", err=True)
    return 0 if result.status == "succeeded" else EXIT_FAILED


@cli.command()
@click.option("--host", help="Bind address (default serve.host or 127.0.0.1).")
@click.option("--port", type=int, help="Port (default serve.port or 18990).")
@click.pass_context
def serve(ctx: click.Context, host: str | None, port: int | None) -> None:
    """The long-lived agent process: the workbench at / and the OpenAI-compatible API with memory (/v1)."""
    from memmy.agent.serve import run_server
    from memmy.workbench.app import mounter

    config = _with_token(_config(ctx), "memmy serve")
    run_server(
        config,
        host or config.serve_host,
        port or config.serve_port,
        ctx.obj.get("config"),
        mounter(config, ctx.obj.get("config")),
    )


def _with_token(config: AgentConfig, who: str) -> AgentConfig:
    """The config with ``serve.token`` set, writing a new random one to the config file when it had none."""
    from memmy.agent.serve import serve_token

    if config.serve_token:
        return config
    token = serve_token(config)
    write_agent_sections(config.path, {"serve": {"token": token}})
    click.echo(f"{who}: created a bearer token in {config.path} (serve.token)", err=True)
    return replace(config, serve_token=token)


@cli.command()
@click.option("--no-open", is_flag=True, help="Print the sign-in link instead of opening a browser.")
@click.option("--pet", is_flag=True, help="Open the compact pet page (/pet) instead of the full workbench.")
@click.option("--no-start", is_flag=True, help="Do not start `memmy serve` when it is not running.")
@click.option(
    "--native", is_flag=True, help="A native window (pywebview, the memmy[pet] extra), always on top with --pet."
)
@click.pass_context
def workbench(ctx: click.Context, no_open: bool, pet: bool, no_start: bool, native: bool) -> None:
    """Open the workbench signed in (a one-time link), starting `memmy serve` in the background if needed."""
    from memmy.workbench.launch import LaunchError, sign_in_link

    config = _with_token(_config(ctx), "memmy workbench")
    try:
        link = sign_in_link(
            config, ctx.obj.get("config"), pet=pet, start=not no_start, say=lambda m: click.echo(m, err=True)
        )
    except LaunchError as exc:
        click.echo(f"memmy workbench: {exc}", err=True)
        ctx.exit(EXIT_FAILED)
    click.echo(link)
    if native and not no_open:
        from memmy.workbench import native as window

        if window.available():
            window.open_window(link, pet)
            return
        click.echo(f"memmy workbench: {window.MISSING}; opening the browser instead", err=True)
    if not no_open:
        import webbrowser

        if not webbrowser.open(link):
            click.echo(
                "memmy workbench: no browser could be opened; open the link above (valid 10 minutes, once)", err=True
            )


@cli.group()
def sessions() -> None:
    """Local agent sessions."""


@sessions.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def sessions_list(ctx: click.Context, as_json: bool) -> None:
    """Saved sessions, most recent first."""
    config = _config(ctx)
    found = SessionStore(config.home).list()
    if as_json:
        click.echo(
            json.dumps([{"name": s.name, "turns": s.turns, "project": s.project, "updated": s.updated} for s in found])
        )
        return
    if not found:
        click.echo("no sessions yet (run `memmy` or `memmy agent --message ...`)")
    for item in found:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(item.updated))
        click.echo(f"{item.name:<40} {item.turns:>4} turns  {when}  {item.project or ''}".rstrip())




def main() -> None:
    """Console entry point."""
    cli(prog_name="memmy")


__all__ = ["cli", "main", "PROVIDERS"]
