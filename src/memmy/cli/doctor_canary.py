"""``memmy-memory doctor --canary``: an end-to-end check of each installed agent's hooks, the one to run after a host
upgrade. For Claude Code, Codex and Cursor it runs the exact command line ``init`` wrote into the agent's hooks
file, as the agent would (through the shell, with a JSON payload on stdin):

1. write: the prompt hook, then the stop hook (Cursor: prompt, answer, stop) of a turn that holds a unique marker;
2. find it stored: the daemon has a trace of that agent with the marker;
3. recall: the prompt hook of a second turn asks about the marker; the daemon's recall log shows the trace was
   injected (and for Claude Code and Codex the hook's output carries it);
4. remove: ``POST /api/v1/admin/canary/purge`` deletes every row of both turns (sessions, raw turns, traces,
   vectors, jobs, recall and API log rows), and the hook state files of the two sessions are removed.

A missing hook entry, a command that fails (a missing launcher), a hook that runs but stores nothing (another
endpoint or token) and a trace that is not recalled are each one finding with the command that fixes it.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memmy.cli.client import ClientSettings
from memmy.daemon_client import DaemonClient, DaemonError, routes
from memmy.domain import CANARY_PREFIX
from memmy.hook.runtime import State, short_hash
from memmy.integrations.agents.hooked import CLAUDE_CODE, CODEX, CURSOR, JsonHookInstaller
from memmy.integrations.check import memmy_hook_commands
from memmy.service.store_health import Finding

#: Per agent: the prompt event, the answer event (Cursor only) and the stop event, as installed by ``init``.
EVENTS: dict[str, tuple[str, str | None, str]] = {
    "claude_code": ("UserPromptSubmit", None, "Stop"),
    "codex": ("UserPromptSubmit", None, "Stop"),
    "cursor": ("beforeSubmitPrompt", "afterAgentResponse", "stop"),
}
INSTALLERS = (CLAUDE_CODE, CODEX, CURSOR)
HOOK_TIMEOUT_S = 30.0
EMBED_WAIT_S = 30.0


class CanaryFailed(Exception):
    """One step of a canary failed: the finding to report."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.message)
        self.finding = finding


def hook_commands(installer: JsonHookInstaller, env: Mapping[str, str]) -> tuple[Path, dict[str, str]]:
    """The agent's hooks file and, per event, the memmy command installed there (the first one)."""
    path, commands = memmy_hook_commands(installer, env)
    found: dict[str, str] = {}
    for event, command in commands:
        found.setdefault(event, command)
    return path, found


def installed_agents(env: Mapping[str, str]) -> list[JsonHookInstaller]:
    """Hook agents memmy is installed into: a memmy hook in their hooks file, or memmy's skill in their folder."""
    return [
        installer
        for installer in INSTALLERS
        if hook_commands(installer, env)[1] or (installer.root(env) / "skills" / "memmy-memory" / "SKILL.md").is_file()
    ]


def session_id(agent: str, session_key: str) -> str:
    """The daemon session id the hook derives from the host's session key (``memmy.hook.runtime.on_prompt``)."""
    return f"{agent}-memory-{short_hash(agent, session_key)}"


@dataclass
class Canary:
    """One agent's canary run."""

    installer: JsonHookInstaller
    commands: dict[str, str]
    hooks_file: Path
    client: DaemonClient
    env: dict[str, str]
    workspace: str
    marker: str = ""
    said: list[str] = field(default_factory=list)  # what the hooks printed on stderr (they exit 0 to fail open)

    @property
    def agent(self) -> str:
        """The agent's name (``claude_code``, ``codex``, ``cursor``)."""
        return self.installer.name

    def fail(self, message: str) -> CanaryFailed:
        """A failed step as a finding, fixed by re-installing the agent's hooks."""
        fix = f"memmy-memory init --agent {self.agent}"
        return CanaryFailed(Finding("canary_failed", "error", f"{self.agent}: {message}", fix))

    def run(self) -> Finding:
        """Write, find, recall, remove; the finding that says how it went."""
        self.marker = f"{CANARY_PREFIX}{secrets.token_hex(5)}"
        keys = (f"{self.marker}-write", f"{self.marker}-recall")
        try:
            self._check_installed()
            self._turn(keys[0], f"memmy canary check {self.marker}: which word proves the memory hooks work?")
            memory_id = self._stored()
            self._wait_embedded(memory_id)
            output = self._turn(keys[1], f"memmy canary recall: what is the canary word {self.marker} for?")
            self._recalled(memory_id, output)
        except CanaryFailed as failed:
            self._remove(keys)
            return failed.finding
        except DaemonError as exc:
            self._remove(keys)
            return self.fail(f"the daemon stopped answering during the canary ({type(exc).__name__}: {exc})").finding
        left = self._remove(keys)
        if left:
            return self.fail(f"the canary went through but could not be removed: {left}").finding
        prompt, _, stop = EVENTS[self.agent]
        return Finding(
            "canary_ok",
            "info",
            f"{self.agent}: a canary turn went through the installed {prompt} and {stop} hooks, was stored, "
            "recalled through the same hook and removed",
            "",
        )

    def _check_installed(self) -> None:
        missing = [event for event in EVENTS[self.agent] if event and event not in self.commands]
        if missing:
            raise self.fail(f"no memmy {' / '.join(missing)} hook in {self.hooks_file} (the entry was removed)")

    def _hook(self, event: str | None, payload: dict[str, Any]) -> str:
        """Run the installed command for ``event`` as the agent does; its stdout."""
        if event is None:
            return ""
        command = self.commands[event]
        try:
            done = subprocess.run(
                command,
                shell=True,  # noqa: S602 - the agent runs this exact command line through the shell too
                input=json.dumps({**payload, "hook_event_name": event}),
                capture_output=True,
                text=True,
                env=self.env,
                cwd=self.workspace,
                timeout=HOOK_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            raise self.fail(f"the {event} hook ({command}) did not finish in {HOOK_TIMEOUT_S:.0f} s") from None
        said = done.stderr.strip().splitlines()
        if done.returncode != 0:
            raise self.fail(f"the {event} hook `{command}` fails (exit {done.returncode}): {(said or ['?'])[-1]}")
        if said:
            self.said.append(f"{event}: {said[-1]}")
        return done.stdout

    def _turn(self, session_key: str, prompt: str) -> str:
        """One whole turn through the hooks; the prompt hook's output."""
        prompt_event, answer_event, stop_event = EVENTS[self.agent]
        base: dict[str, Any] = {"session_id": session_key, "cwd": self.workspace, "transcript_path": None}
        if self.agent == "cursor":
            base = {"conversation_id": session_key, "generation_id": f"{session_key}-g", "transcript_path": None}
            base["workspace_roots"] = [self.workspace]
        answer = f"The memory hooks work: the canary word is {self.marker}."
        output = self._hook(prompt_event, {**base, "prompt": prompt})
        self._hook(answer_event, {**base, "text": answer})
        self._hook(stop_event, {**base, "last_assistant_message": answer, "status": "completed"})
        return output

    def _stored(self) -> str:
        body = {"query": self.marker, "scope": "pooled", "limit": 10}
        for hit in self.client.call(routes.MEMORY_SEARCH, body)["hits"]:
            detail = self.client.call(routes.MEMORY_GET, memory_id=str(hit["id"]))
            if self.marker in str(detail.get("content")) and detail.get("sourceAgent") == self.agent:
                return str(hit["id"])
        why = f"; they said: {' | '.join(self.said)}" if self.said else ""
        raise self.fail(
            "the hooks ran but the canary turn was not stored: they do not reach this daemon (see the hook "
            f"findings above: endpoint or token in hook.json){why}"
        )

    def _wait_embedded(self, memory_id: str) -> None:
        deadline = time.monotonic() + EMBED_WAIT_S
        while time.monotonic() < deadline:
            items = self.client.call(routes.MEMORY_PROCESSING_STATUS, {"memoryIds": [memory_id]})["items"]
            states = [item.get("state") for item in items]
            if not states or states[0] in ("ready", "ready_text_only", "failed"):
                return
            time.sleep(0.2)

    def _recalled(self, memory_id: str, output: str) -> None:
        prompt_event = EVENTS[self.agent][0]
        events = self.client.call(routes.LOGS, params={"kind": "recalls", "limit": 20})["items"]
        injected = any(
            self.marker in str(event.get("query")) and memory_id in (event.get("injectedIds") or []) for event in events
        )
        if not injected:
            raise self.fail(f"the canary was stored ({memory_id}) but not recalled through the {prompt_event} hook")
        if self.agent != "cursor" and self.marker not in output:  # Cursor's hooks cannot inject text
            raise self.fail(f"the {prompt_event} hook recalled the canary but did not hand it to the agent")

    def _remove(self, keys: tuple[str, ...]) -> str | None:
        """Purge both turns and their hook state files; None when done, else what went wrong."""
        for key in keys:
            State(self.agent, f"{key}\x00session").clear()
        sessions = [session_id(self.agent, key) for key in keys]
        try:
            self.client.call(routes.ADMIN_CANARY_PURGE, {"marker": self.marker, "sessionIds": sessions})
        except DaemonError as exc:
            return exc.message if exc.status is not None else f"{type(exc).__name__}: {exc}"
        return None


def canary_findings(settings: ClientSettings, env: Mapping[str, str] | None = None) -> list[Finding]:
    """One finding per installed hook agent: ``canary_ok`` (info) or ``canary_failed`` (error, with its fix)."""
    environ = dict(os.environ if env is None else env)
    agents = installed_agents(environ)
    if not agents:
        return [
            Finding(
                "canary_none",
                "warning",
                "no agent has memmy's hooks installed",
                "memmy-memory init --agent claude_code",
            )
        ]
    findings = []
    client = DaemonClient(settings.url, token=settings.token, timeout_s=30.0)
    try:
        with tempfile.TemporaryDirectory(prefix="memmy-canary-") as workspace:
            for installer in agents:
                path, commands = hook_commands(installer, environ)
                findings.append(Canary(installer, commands, path, client, environ, workspace).run())
    finally:
        client.close()
    return findings
