"""``memmy service install|uninstall|status``: keep ``memmy serve`` (the agent process that owns the chat
channels, the seeds' "gateway") running after login: a systemd user unit ``memmy-gateway.service`` on Linux, a
launchd agent ``dev.memmy.gateway`` on macOS. It runs this install's interpreter (``python -m memmy.agent serve``)
after the memory service (``memmy.service``, from ``memmy-memory service install``), is restarted when it fails,
and reads the channels' secrets (the ``${ENV}`` references in config.yaml) from ``$MEMMY_HOME/gateway.env``,
since a service does not see the variables a login shell exports."""

from __future__ import annotations

import contextlib
import os
import plistlib
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import click

from memmy.agent.config import AgentConfig, load_agent_config
from memmy.errors import MemmyError

UNIT_NAME = "memmy-gateway.service"
LAUNCHD_LABEL = "dev.memmy.gateway"
ENV_NAMES = ("MEMMY_HOME", "MEMMY_CONFIG")
ENV_FILE_HEADER = (
    "# Variables for the memmy-gateway service (`memmy serve` at login), one KEY=value a line: the secrets that\n"
    "# config.yaml names as ${ENV} references, e.g. TELEGRAM_BOT_TOKEN=123456:ABC-...\n"
)


def unit_path(env: Mapping[str, str], platform: str = sys.platform) -> Path:
    """systemd: ``$XDG_CONFIG_HOME/systemd/user/memmy-gateway.service``; macOS: ``~/Library/LaunchAgents/…``."""
    home = Path(env.get("HOME") or Path.home())
    if platform == "darwin":
        return home / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
    return Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "systemd" / "user" / UNIT_NAME


def command(python: str, config_file: str | None) -> list[str]:
    """The service's command line: this interpreter running ``memmy serve``."""
    return [python, "-m", "memmy.agent", *(["--config", config_file] if config_file else []), "serve"]


def unit_text(argv: list[str], env_file: Path, env: Mapping[str, str]) -> str:
    """The systemd user unit."""
    lines = [
        "[Unit]",
        "Description=memmy serve: the agent with memory, its workbench and chat channels",
        "After=network-online.target memmy.service",
        "Wants=memmy.service",
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={shlex.join(argv)}",
        f"EnvironmentFile=-{env_file}",  # '-': a missing file is fine
        *(f"Environment={name}={env[name]}" for name in ENV_NAMES if env.get(name)),
        "Restart=on-failure",
        "RestartSec=5",
        "TimeoutStopSec=20",
        "",
        "[Install]",
        "WantedBy=default.target",
        "",
    ]
    return "\n".join(lines)


def plist_text(argv: list[str], env_file: Path, env: Mapping[str, str], log_dir: Path) -> str:
    """The launchd agent (launchd reads no environment file: a shell sources it, then becomes ``memmy serve``)."""
    script = f"set -a; [ -f {shlex.quote(str(env_file))} ] && . {shlex.quote(str(env_file))}; exec {shlex.join(argv)}"
    data: dict[str, object] = {
        "Label": LAUNCHD_LABEL,
        "ProgramArguments": ["/bin/sh", "-c", script],
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "ProcessType": "Background",
        "StandardOutPath": str(log_dir / "gateway.out.log"),
        "StandardErrorPath": str(log_dir / "gateway.err.log"),
    }
    extra = {name: env[name] for name in ENV_NAMES if env.get(name)}
    if extra:
        data["EnvironmentVariables"] = extra
    return plistlib.dumps(data, sort_keys=False).decode("utf-8")


def render(config: AgentConfig, env: Mapping[str, str], platform: str, config_file: str | None) -> tuple[Path, str]:
    """Where the unit goes and its text, for this platform."""
    argv = command(sys.executable, config_file)
    env_file = config.home / "gateway.env"
    if platform == "darwin":
        return unit_path(env, platform), plist_text(argv, env_file, env, config.home / "logs")
    return unit_path(env, platform), unit_text(argv, env_file, env)


def _run(*argv: str) -> tuple[int, str]:
    """Run a service manager command when it exists: (exit code, output); 127 when it does not."""
    if shutil.which(argv[0]) is None:
        return 127, f"{argv[0]} not found"
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    return done.returncode, (done.stdout + done.stderr).strip()


def _config(ctx: click.Context) -> AgentConfig:
    try:
        return load_agent_config((ctx.find_root().obj or {}).get("config"))
    except MemmyError as exc:
        raise click.ClickException(str(exc)) from None


platform_option = click.option("--platform", default=sys.platform, hidden=True, help="Pretend to run on this OS.")


@click.group()
def service() -> None:
    """Run `memmy serve` (workbench, API, chat channels) at login: systemd user unit or launchd agent."""


@service.command("install")
@click.option("--start/--no-start", default=True, help="Enable and start it now (systemctl --user / launchctl).")
@platform_option
@click.pass_context
def install(ctx: click.Context, start: bool, platform: str) -> None:
    """Write the unit (Linux) or launchd agent (macOS) for `memmy serve`, and start it."""
    try:
        install_service(_config(ctx), (ctx.find_root().obj or {}).get("config"), platform, start)
    except MemmyError as exc:
        raise click.ClickException(str(exc)) from None


def install_service(config: AgentConfig, config_file: str | None, platform: str, start: bool) -> None:
    """Write the unit or launchd agent for ``memmy serve`` (and its secrets file), and start it when ``start``
    (``memmy service install``, and ``memmy onboard``'s last question); raises MemmyError on an OS it cannot."""
    if platform != "darwin" and not platform.startswith("linux"):
        raise MemmyError("memmy service knows systemd (Linux) and launchd (macOS); elsewhere run `memmy serve`")
    path, text = render(config, os.environ, platform, config_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    click.echo(f"wrote {path}")
    env_file = config.home / "gateway.env"
    if not env_file.exists():  # 0600 from the start: it is where the channels' secrets go
        env_file.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(ENV_FILE_HEADER)
    click.echo(f"the channels' secrets go in {env_file} (KEY=value lines, e.g. TELEGRAM_BOT_TOKEN=…)")
    steps: list[tuple[str, ...]]
    if platform == "darwin":
        manual = f"launchctl bootstrap gui/$(id -u) {path}"
        steps = [("launchctl", "bootstrap", f"gui/{os.getuid()}", str(path))]
        watch = f"launchctl print gui/$(id -u)/{LAUNCHD_LABEL}"
    else:
        manual = f"systemctl --user daemon-reload && systemctl --user enable --now {UNIT_NAME}"
        steps = [("systemctl", "--user", "daemon-reload"), ("systemctl", "--user", "enable", "--now", UNIT_NAME)]
        watch = f"systemctl --user status {UNIT_NAME}"
    if not start:
        click.echo(f"start it with: {manual}")
        return
    for step in steps:
        code, output = _run(*step)
        if code != 0:
            click.echo(f"could not start it ({output}); start it with: {manual}")
            return
    click.echo(f"started ({watch})")


@service.command("uninstall")
@platform_option
def uninstall(platform: str) -> None:
    """Stop and remove the unit or launchd agent (config, sessions and memory stay)."""
    path = unit_path(os.environ, platform)
    if path.exists():
        if platform == "darwin":
            _run("launchctl", "bootout", f"gui/{os.getuid()}", str(path))
        else:
            _run("systemctl", "--user", "disable", "--now", UNIT_NAME)
        path.unlink()
    click.echo(f"removed {path}")


@service.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@platform_option
@click.pass_context
def status(ctx: click.Context, as_json: bool, platform: str) -> None:
    """Is the unit installed and active, and is `memmy serve` answering?"""
    import json

    config = _config(ctx)
    path = unit_path(os.environ, platform)
    code, output = (
        _run("launchctl", "print", f"gui/{os.getuid()}/{LAUNCHD_LABEL}")
        if platform == "darwin"
        else _run("systemctl", "--user", "is-active", UNIT_NAME)
    )
    url = f"http://{config.serve_host}:{config.serve_port}"
    answering = False
    import httpx  # only `service status` asks: `memmy status` and `onboard` import this module

    with contextlib.suppress(httpx.HTTPError):
        answering = httpx.get(f"{url}/health", timeout=3).status_code == 200
    manager = None if code == 127 else (output.splitlines()[0] if output else str(code))
    result = {"unitFile": str(path), "installed": path.exists(), "manager": manager, "answering": answering, "url": url}
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"unit file: {path} ({'installed' if result['installed'] else 'not installed'})")
    if manager is not None:
        click.echo(f"manager:   {manager}")
    click.echo(f"memmy serve: {'answering' if answering else 'not answering'} at {url}")
