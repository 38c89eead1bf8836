"""``memmy onboard``: a menu-driven setup in three steps, each slot with a real connection test (1. the primary
model and embedding, 2. the memory models: summary and skill evolution, 3. optional speech to text and image
generation), or ``--defaults`` (non-interactive: write whatever is missing, keep what is there, create the
workspace)."""

from __future__ import annotations

import asyncio
import secrets
import sys
from typing import Any

import click

from memmy.agent.config import PROVIDERS, AgentConfig, ModelChoice, load_agent_config, write_agent_sections
from memmy.agent.gateway_service import install_service
from memmy.agent.providers import ProviderError, _status_message
from memmy.agent.slots import Slot, slot_patch, test_slot
from memmy.config import config_path, read_config_file
from memmy.errors import MemmyError

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

    if choice.kind == "gemini":
        return await _probe_gemini(choice, timeout_s)
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


async def _probe_gemini(choice: ModelChoice, timeout_s: float) -> tuple[bool, str]:
    """List the Gemini API's models through ``google-genai``."""
    from memmy.agent.providers import gemini_client, gemini_error

    client = gemini_client(choice.api_key, choice.api_base, timeout_s, 0)
    try:
        count = len([model async for model in await client.aio.models.list()])
    except Exception as exc:  # the SDK's APIError and the transport's errors alike
        where = f"{choice.provider} ({choice.api_base or 'default endpoint'})"
        return False, str(gemini_error(where, f"providers.{choice.provider}.apiKey", timeout_s, exc))
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
    if not defaults:
        _offer_service(config, config_file)
    click.echo("next: `memmy status`, then `memmy`")
    return 0


def _offer_service(config: AgentConfig, config_file: str | None) -> None:
    """The optional last step: ``memmy serve`` (workbench, chat channels) at login, as ``memmy service install``
    does it. No by default, and no answer (the end of the input) is no: the config is already saved."""
    try:
        wanted = click.confirm("Start `memmy serve` (workbench and chat channels) at login?", default=False)
    except click.Abort:
        wanted = False
    if not wanted:
        click.echo("at login:  no (later: `memmy service install`)")
        return
    try:
        install_service(config, config_file, sys.platform, start=True)
    except MemmyError as exc:
        click.echo(f"at login:  not set up: {exc}")


def _menu(existing: dict[str, Any], sections: dict[str, Any]) -> dict[str, Any]:
    click.echo("Step 1/3: the primary model and embedding")
    sections = _primary(existing, sections)
    if not sections:
        return {}
    primary = sections["agents"]["defaults"]
    entry = sections["providers"][primary["provider"]]
    spec = PROVIDERS[primary["provider"]]
    base, key = str(entry.get("apiBase") or ""), str(entry.get("apiKey") or "")
    if spec.kind == "gemini" and not base.endswith("/openai"):
        base = (base or spec.api_base).rstrip("/") + "/v1beta/openai"  # the memory models speak Chat Completions
    openai_kind = spec.kind in ("openai", "gemini")
    slots = [_embedding(base, key)]
    click.echo("Step 2/3: memory models (summaries and skill evolution)")
    slots += _memory_models(primary["model"], base, key, openai_kind)
    click.echo("Step 3/3: optional speech to text and image generation (chat and memory never need them)")
    for name, label, model in (
        ("asr", "speech to text (ASR)", "whisper-1"),
        ("image", "image generation", "gpt-image-1"),
    ):
        if click.confirm(f"Set up {label}?", default=False):
            slots.append(_remote(name, model, base, key))
    memory: dict[str, Any] = {}
    for slot in slots:
        if not _tested(slot):
            return {}
        patch = slot_patch(slot)
        for top, value in patch.items():
            memory.setdefault(top, {}).update(value)
    return {**sections, **memory}


def _remote(name: str, model: str, base: str, key: str) -> Slot:
    """An OpenAI-compatible slot, the primary model's endpoint and key offered as defaults."""
    model = click.prompt(f"  {name} model id", default=model)
    base = click.prompt(f"  {name} endpoint (apiBase)", default=base or "https://api.openai.com/v1")
    key = click.prompt(f"  {name} API key (or ${{ENV_NAME}})", default=key, show_default=False)
    return Slot(
        name, "openai_compatible" if name in ("embedding", "summary", "evolution") else "openai", model, base, key
    )


def _embedding(base: str, key: str) -> Slot:
    click.echo("  Embedding: 1. the built-in local model (no key, nothing leaves the machine)")
    click.echo("             2. an OpenAI-compatible endpoint")
    if click.prompt("  Embedding", type=click.IntRange(1, 2), default=1) == 1:
        return Slot("embedding", "local", "all-MiniLM-L6-v2", "", "")
    return _remote("embedding", "text-embedding-3-small", base, key)


def _memory_models(model: str, base: str, key: str, openai_kind: bool) -> list[Slot]:
    click.echo("  1. the primary model  2. another OpenAI-compatible model  3. off (heuristics only)")
    choice = click.prompt("  Memory models", type=click.IntRange(1, 3), default=1 if openai_kind else 3)
    if choice == 1 and not openai_kind:
        click.echo("  the memory service speaks the OpenAI-compatible protocol only; choose 2 or 3")
        choice = click.prompt("  Memory models", type=click.IntRange(2, 3), default=3)
    if choice == 3:
        return []
    if choice == 2:
        other = _remote("summary", model, base, key)
        model, base, key = other.model, other.api_base, other.api_key
    return [Slot(name, "openai_compatible", model, base, key) for name in ("summary", "evolution")]


def _tested(slot: Slot) -> bool:
    """Test a slot; on failure ask whether to save it anyway."""
    if not slot.remote:
        return True
    click.echo(f"Testing {slot.name} ...")
    ok, message = asyncio.run(test_slot(slot.resolved()))
    click.echo(("ok: " if ok else "failed: ") + message)
    return ok or click.confirm("Save anyway?", default=False)


def _primary(existing: dict[str, Any], sections: dict[str, Any]) -> dict[str, Any]:
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
