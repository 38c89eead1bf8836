"""``memmy service``: the login service of ``memmy serve`` (the process that owns the chat channels), rendered
into the test's HOME and checked (``systemd-analyze verify`` where it exists, else parsed); nothing is enabled."""

from __future__ import annotations

import configparser
import os
import plistlib
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from memmy.agent.cli import cli
from tests.agent_stubs import run_model_stub


def _install(platform: str) -> str:
    done = CliRunner().invoke(cli, ["service", "install", "--no-start", "--platform", platform])
    assert done.exit_code == 0, done.output
    return done.output


def test_the_systemd_unit_runs_memmy_serve_and_verifies(isolated_home: Path, tmp_path: Path) -> None:
    output = _install("linux")
    unit = isolated_home / ".config" / "systemd" / "user" / "memmy-gateway.service"
    assert "systemctl --user daemon-reload && systemctl --user enable --now memmy-gateway.service" in output
    parser = configparser.ConfigParser(strict=True, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(unit.read_text())
    assert parser.sections() == ["Unit", "Service", "Install"]
    argv = shlex.split(parser["Service"]["ExecStart"])
    assert argv == [sys.executable, "-m", "memmy.agent", "serve"]
    assert parser["Service"]["EnvironmentFile"] == f"-{isolated_home / '.memmy' / 'gateway.env'}"
    assert parser["Service"]["Restart"] == "on-failure" and "memmy.service" in parser["Unit"]["After"]
    assert parser["Install"]["WantedBy"] == "default.target"
    # the command the unit runs is a real one: it answers --help with the serve command
    shown = subprocess.run([*argv[:-1], "serve", "--help"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "long-lived agent process" in shown.stdout
    if shutil.which("systemd-analyze") is not None:
        runtime = tmp_path / "runtime"
        runtime.mkdir(mode=0o700)
        env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
        checked = subprocess.run(
            ["systemd-analyze", "verify", "--user", str(unit)], capture_output=True, text=True, env=env, timeout=60
        )
        assert checked.returncode == 0 and not checked.stderr.strip(), checked.stderr  # warnings name a bad key


def test_the_launchd_agent_sources_the_secrets_and_keeps_serve_alive(isolated_home: Path) -> None:
    _install("darwin")
    plist = isolated_home / "Library" / "LaunchAgents" / "dev.memmy.gateway.plist"
    data = plistlib.loads(plist.read_bytes())
    assert data["Label"] == "dev.memmy.gateway" and data["RunAtLoad"] is True
    assert data["KeepAlive"] == {"SuccessfulExit": False}
    shell, flag, script = data["ProgramArguments"]
    assert (shell, flag) == ("/bin/sh", "-c")
    env_file = isolated_home / ".memmy" / "gateway.env"
    assert f". {env_file}" in script and script.endswith(f"exec {sys.executable} -m memmy.agent serve")
    env_file.write_text("GATEWAY_PROBE=from-the-env-file\n")
    probe = script.replace(f"exec {sys.executable} -m memmy.agent serve", 'echo "$GATEWAY_PROBE"')
    assert (
        subprocess.run(["/bin/sh", "-c", probe], capture_output=True, text=True).stdout.strip() == "from-the-env-file"
    )
    assert str(isolated_home / ".memmy" / "logs" / "gateway.err.log") == data["StandardErrorPath"]


def test_uninstall_removes_the_unit_and_status_reports_it(isolated_home: Path) -> None:
    _install("linux")
    unit = isolated_home / ".config" / "systemd" / "user" / "memmy-gateway.service"
    runner = CliRunner()
    shown = runner.invoke(cli, ["service", "status", "--json", "--platform", "linux"])
    assert shown.exit_code == 0 and '"installed": true' in shown.output and '"answering": false' in shown.output
    assert runner.invoke(cli, ["service", "uninstall", "--platform", "linux"]).exit_code == 0
    assert not unit.exists()


@pytest.mark.parametrize("platform", ["win32"])
def test_other_systems_are_told_what_to_run(isolated_home: Path, platform: str) -> None:
    done = CliRunner().invoke(cli, ["service", "install", "--no-start", "--platform", platform])
    assert done.exit_code == 1 and "memmy serve" in done.output


def _onboard(answers: str) -> subprocess.CompletedProcess[str]:
    # only this interpreter's directory on PATH: no systemctl, so the unit is written and never started here
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    program = "from memmy.agent.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", program, "onboard"], input=answers, capture_output=True, text=True, env=env, timeout=120
    )


def test_onboard_offers_serve_at_login_and_installs_it_when_asked(isolated_home: Path) -> None:
    unit = isolated_home / ".config" / "systemd" / "user" / "memmy-gateway.service"
    with run_model_stub() as stub:
        steps = f"1\nstub-model\n{stub.openai_url}\nsk-key\nallow\n" + "\n" * 4  # the model steps, defaults after
        declined = _onboard(steps + "\n")  # the default answer is no
        assert declined.returncode == 0, declined.stdout + declined.stderr
        assert "at login?" in declined.stdout and "at login:  no (later: `memmy service install`)" in declined.stdout
        assert not unit.exists()
        accepted = _onboard(steps + "y\n")
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert f"wrote {unit}" in accepted.stdout and "could not start it (systemctl not found)" in accepted.stdout
    assert "ExecStart=" in unit.read_text() and "memmy.agent serve" in unit.read_text()
    assert (isolated_home / ".memmy" / "gateway.env").exists()
