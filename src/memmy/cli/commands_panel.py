"""``memmy-memory panel``: sign a browser in to the Memory panel with a one-time link."""

from __future__ import annotations

import webbrowser

import click

from memmy.cli.context import CliContext, pass_ctx


@click.command("panel")
@click.option("--no-open", is_flag=True, help="Only print the link (for machines without a browser).")
@pass_ctx
def panel(obj: CliContext, no_open: bool) -> None:
    """Open the Memory panel in the browser (prints the one-time sign-in link, valid 10 minutes, used once)."""
    result = obj.request("POST", "/panel/sign-in")
    url = str(result["url"])
    if obj.as_json:
        obj.output(result, url)
        return
    click.echo(f"Memory panel sign-in link (one use, {result['expiresInS'] // 60} minutes):\n{url}")
    if not no_open and not webbrowser.open(url):
        click.echo("No browser could be opened here; open the link above on this machine.", err=True)
