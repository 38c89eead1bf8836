"""``memmy-memory service install|uninstall|status``: keep the daemon up after login."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import click

from memmy.cli.context import CliContext, pass_ctx
from memmy.cli.output import emit_json, fail
from memmy.integrations.service_unit import other_platform_instructions, plan_unit, unit_path


def _systemctl(*args: str) -> tuple[int, str]:
    """Run ``systemctl --user`` if it exists; (exit code, output)."""
    if shutil.which("systemctl") is None:
        return 127, "systemctl not found"
    done = subprocess.run(["systemctl", "--user", *args], capture_output=True, text=True, timeout=20)
    return done.returncode, (done.stdout + done.stderr).strip()


@click.group()
def service() -> None:
    """Run the memory service at login (systemd user unit on Linux)."""


@service.command("install")
@click.option("--start/--no-start", default=True, help="Enable and start the unit now (systemctl --user).")
@pass_ctx
def service_install(obj: CliContext, start: bool) -> None:
    """Write the systemd user unit (and enable it)."""
    if not sys.platform.startswith("linux"):
        click.echo(other_platform_instructions())
        return
    plan = plan_unit(dict(os.environ), install=True)
    plan.apply()
    click.echo(f"✓ wrote {unit_path(os.environ)}")
    if start:
        code, output = _systemctl("daemon-reload")
        if code == 0:
            code, output = _systemctl("enable", "--now", "memmy")
        if code != 0:
            click.echo(f"could not start it automatically ({output}); {plan.notes[0]}")
            return
        click.echo("✓ enabled and started (systemctl --user status memmy)")
    else:
        click.echo(plan.notes[0])


@service.command("uninstall")
@pass_ctx
def service_uninstall(obj: CliContext) -> None:
    """Disable and remove the unit (memories are kept)."""
    if not sys.platform.startswith("linux"):
        click.echo("Remove the launchd agent / scheduled task you created for memmy.")
        return
    _systemctl("disable", "--now", "memmy")
    plan_unit(dict(os.environ), install=False).apply()
    click.echo(f"✓ removed {unit_path(os.environ)}")


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
    click.echo(f"daemon:    {'answering' if answering else 'not answering'} at {client.settings.url}")
    if not answering and not path.exists():
        fail("the memory service is not running; start it with `memmy-memory serve` or `memmy-memory service install`")
