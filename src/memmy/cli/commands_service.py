"""``memmy-memory service install|uninstall|status``: keep the daemon up after login."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import click

from memmy.cli.context import CliContext, pass_ctx
from memmy.cli.output import emit_json, fail
from memmy.config import memmy_home
from memmy.integrations.launcher import CLI_SHIM, shim_changes, shim_dir
from memmy.integrations.plan import Plan
from memmy.integrations.service_unit import other_platform_instructions, plan_unit, unit_path


def _run(program: str, *args: str) -> tuple[int, str]:
    """Run a service manager command if it exists; (exit code, output)."""
    if shutil.which(program) is None:
        return 127, f"{program} not found"
    done = subprocess.run([program, *args], capture_output=True, text=True, timeout=20)
    return done.returncode, (done.stdout + done.stderr).strip()


def _systemctl(*args: str) -> tuple[int, str]:
    """Run ``systemctl --user`` if it exists; (exit code, output)."""
    return _run("systemctl", "--user", *args)


@click.group()
def service() -> None:
    """Run the memory service at login (systemd user unit on Linux, launchd agent on macOS)."""


def _launcher(env: dict[str, str]) -> tuple[str, Path]:
    """Write the stable launchers (as ``init`` does); return the CLI launcher and the log directory."""
    home = memmy_home(env)
    Plan("memmy-launcher", shim_changes(home, sys.executable, install=True)).apply()
    return str(shim_dir(home) / CLI_SHIM), home / "logs"


platform_option = click.option("--platform", default=sys.platform, hidden=True, help="Pretend to run on this OS.")


@service.command("install")
@click.option("--start/--no-start", default=True, help="Enable and start it now (systemctl --user / launchctl).")
@platform_option
@pass_ctx
def service_install(obj: CliContext, start: bool, platform: str) -> None:
    """Write the systemd user unit (Linux) or launchd agent (macOS), and start it."""
    env = dict(os.environ)
    launcher, log_dir = _launcher(env)
    if platform != "darwin" and not platform.startswith("linux"):
        click.echo(other_platform_instructions(launcher))
        return
    plan = plan_unit(env, True, launcher, log_dir, platform)
    plan.apply()
    path = unit_path(env, platform)
    click.echo(f"✓ wrote {path}")
    if not start:
        click.echo(plan.notes[0])
        return
    if platform == "darwin":
        code, output = _run("launchctl", "bootstrap", f"gui/{os.getuid()}", str(path))
        loaded = "✓ loaded (launchctl print gui/$(id -u)/dev.memmy.memory)"
        click.echo(loaded if code == 0 else f"could not load it ({output}); {plan.notes[0]}")
        return
    code, output = _systemctl("daemon-reload")
    if code == 0:
        code, output = _systemctl("enable", "--now", "memmy")
    if code != 0:
        click.echo(f"could not start it automatically ({output}); {plan.notes[0]}")
        return
    click.echo("✓ enabled and started (systemctl --user status memmy)")


@service.command("uninstall")
@platform_option
@pass_ctx
def service_uninstall(obj: CliContext, platform: str) -> None:
    """Stop and remove the unit or launchd agent (memories are kept)."""
    env = dict(os.environ)
    if platform != "darwin" and not platform.startswith("linux"):
        click.echo("Remove the scheduled task you created for memmy (schtasks /Delete /TN memmy).")
        return
    path = unit_path(env, platform)
    if platform == "darwin":
        _run("launchctl", "bootout", f"gui/{os.getuid()}", str(path))
    else:
        _systemctl("disable", "--now", "memmy")
    plan_unit(env, False, "", memmy_home(env) / "logs", platform).apply()
    click.echo(f"✓ removed {path}")


@service.command("status")
@pass_ctx
def service_status(obj: CliContext) -> None:
    """Is the unit installed, and is the daemon answering?"""
    path = unit_path(os.environ)
    code, output = _systemctl("is-active", "memmy")
    client = obj.client()
    try:
        health = client.request("GET", "/health")
        answering = True
    except Exception:  # noqa: BLE001 - any failure means "not answering"
        health, answering = None, False
    finally:
        client.close()
    result = {
        "unitFile": str(path),
        "installed": path.exists(),
        "systemd": output if code != 127 else None,
        "answering": answering,
        "version": health.get("version") if health else None,
    }
    if obj.as_json:
        emit_json(result)
        return
    click.echo(f"unit file: {path} ({'installed' if path.exists() else 'not installed'})")
    if code != 127:
        click.echo(f"systemd:   {output}")
    click.echo(f"daemon:    {'answering' if answering else 'not answering'} at {client.url}")
    if not answering and not path.exists():
        fail("the memory service is not running; start it with `memmy-memory serve` or `memmy-memory service install`")
