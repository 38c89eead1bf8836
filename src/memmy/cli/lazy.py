"""A click group whose commands are imported only when they run, for command lines that must start at once.

The short help ``--help`` lists for a lazy command is declared beside its import path, so listing the commands
imports nothing; a test checks each declared text against the command's own."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click

#: name -> (module, attribute, short help)
LazyCommands = Mapping[str, tuple[str, str, str]]


class LazyGroup(click.Group):
    """A group with eager commands (``add_command``) and lazy ones (``lazy_commands=``)."""

    def __init__(self, *args: Any, lazy_commands: LazyCommands | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands: LazyCommands = lazy_commands or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command name, the lazy ones included, sorted."""
        return sorted({*self.commands, *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command, importing its module on first use."""
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            module, attribute, _ = self.lazy_commands[cmd_name]
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of ``--help``, with the lazy commands' declared short help (nothing is imported)."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            if name in self.commands:
                command = self.commands[name]
                if not command.hidden:
                    rows.append((name, command.get_short_help_str(limit)))
            else:
                rows.append((name, click.Command(name, help=self.lazy_commands[name][2]).get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)
