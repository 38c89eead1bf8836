"""``memmy onboard``: a menu-driven setup with a real connection test, or ``--defaults`` (non-interactive:
write whatever is missing, keep what is there, create the workspace)."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import click

from memmy.agent.config import PROVIDERS, ModelChoice, load_agent_config, write_agent_sections
from memmy.agent.providers import ProviderError, _status_message
from memmy.config import config_path, read_config_file

DEFAULT_SECTIONS: dict[str, Any] = {
    "agents": {"defaults": {"provider": "openai", "model": "gpt-4o", "memory": True}},
    "providers": {"openai": {"apiKey": "${OPENAI_API_KEY}"}},
    "tools": {
        "web": {"enabled": True, "fetch": {"timeoutS": 30, "maxChars": 60000}},
        "exec": {"enabled": True, "timeout": 60, "approval": "ask"},
        "mcpServers": {},
    },
}


async def probe_model(choice: ModelChoice, timeout_s: float = 10.0) -> tuple[bool, str]:
    """List the provider's models (a cheap authenticated call): (ok, message)."""
    import anthropic
    import openai

    try:
        if choice.kind == "anthropic":
            client_a = anthropic.AsyncAnthropic(
                api_key=choice.api_key or "x", base_url=choice.api_base or None, timeout=timeout_s, max_retries=0
            )
            page_a = await client_a.models.list()
            count = len(page_a.data)
        else:
            client_o = openai.AsyncOpenAI(
                api_key=choice.api_key or "x", base_url=choice.api_base or None, timeout=timeout_s, max_retries=0
            )
            page_o = await client_o.models.list()
            count = len(page_o.data)
    except (openai.OpenAIError, anthropic.AnthropicError) as exc:
        error: ProviderError = _status_message(choice, exc)
        return False, str(error)
    return True, f"{count} models listed"


def _fill_missing(existing: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in defaults.items():
        if key not in existing:
            out[key] = value
        elif isinstance(value, dict) and isinstance(existing[key], dict):
            nested = _fill_missing(existing[key], value)
            if nested:
                out[key] = nested
    return out


def run_onboard(config_file: str | None, defaults: bool) -> int:
    """Run the wizard (or the defaults); returns the exit code."""
    path = config_path(config_file)
    existing = read_config_file(path)
    sections = _fill_missing(existing, DEFAULT_SECTIONS)
    if not (existing.get("serve") or {}).get("token"):
        sections.setdefault("serve", {})["token"] = secrets.token_urlsafe(24)
    if not defaults:
        sections = _menu(existing, sections)
        if not sections:
            return 1
    write_agent_sections(path, sections)
    config = load_agent_config(config_file)
    config.workspace.mkdir(parents=True, exist_ok=True)
    click.echo(f"config:    {path}")
    click.echo(f"workspace: {config.workspace}")
    if config.default is not None:
        click.echo(f"model:     {config.default.model} via {config.default.provider}")
    click.echo("next: `memmy status`, then `memmy`")
    return 0


def _menu(existing: dict[str, Any], sections: dict[str, Any]) -> dict[str, Any]:
    names = list(PROVIDERS)
    click.echo("Choose a provider:")
    for index, name in enumerate(names, start=1):
        spec = PROVIDERS[name]
        click.echo(f"  {index:>2}. {spec.label:<32} {spec.api_base}")
    picked = click.prompt("Provider", type=click.IntRange(1, len(names)), default=1)
    spec = PROVIDERS[names[picked - 1]]
    model = click.prompt("Model id", default=spec.model or "gpt-4o")
    base = click.prompt("Endpoint (apiBase)", default=spec.api_base or "http://127.0.0.1:8000/v1")
    hint = f"${{{spec.key_env}}}" if spec.key_env else ""
    key = click.prompt("API key (or ${ENV_NAME})", default=hint, show_default=bool(hint), hide_input=not hint)
    approval = click.prompt(
        "Shell commands", type=click.Choice(["ask", "allow", "deny"]), default="ask", show_choices=True
    )
    provider_entry: dict[str, Any] = {"apiBase": base}
    if key:
        provider_entry["apiKey"] = key
    sections = {
        **sections,
        "agents": {"defaults": {"provider": spec.name, "model": model}},
        "providers": {spec.name: provider_entry},
        "tools": {**sections.get("tools", {}), "exec": {"approval": approval}},
    }
    trial = {**existing}
    for key_name, value in sections.items():
        trial[key_name] = {**(trial.get(key_name) or {}), **value} if isinstance(value, dict) else value
    choice = _choice_from(trial)
    if choice is not None:
        click.echo("Testing the connection ...")
        ok, message = asyncio.run(probe_model(choice))
        click.echo(("ok: " if ok else "failed: ") + message)
        if not ok and not click.confirm("Save anyway?", default=False):
            return {}
    return sections


def _choice_from(tree: dict[str, Any]) -> ModelChoice | None:
    import os
    import tempfile
    from pathlib import Path

    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump({k: v for k, v in tree.items() if k != "memmyMemory"}), encoding="utf-8")
        try:
            return load_agent_config(str(path), os.environ).default
        except Exception:  # noqa: BLE001 - an unusable trial config just skips the test
            return None
