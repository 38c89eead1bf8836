"""Stable launchers in ``$MEMMY_HOME/bin``: what hooks, MCP registrations and the service unit call.

Agents keep a command line for years; a checkout's ``.venv/bin/python3`` does not live that long. So every
installed piece calls one of two small POSIX shell shims, and only the shims name the interpreter:

- ``memmy-hook <agent> <event>`` runs the hook and fails open (exit 0 with a note on stderr) when no install is
  found, so a broken install never blocks an agent's prompt. The hook runtime imports only the standard library
  and memmy itself, so the launcher skips ``site`` (``-S``: no site-packages scan, no ``.pth`` files, a few
  milliseconds of every prompt) and ``runpy`` (``-c`` running what ``-m memmy.hook`` runs), and puts the
  directory that holds the ``memmy`` package on ``PYTHONPATH`` instead; when that directory no longer holds the
  runtime it falls back to a normal start (``python -m memmy.hook``);
- ``memmy-memory ...`` runs the CLI (``python -m memmy``), e.g. ``memmy-memory --source codex mcp``.

Each shim tries the interpreter recorded by the last ``init``, then any ``memmy-memory`` on ``PATH`` (a pipx or
``uv tool`` install), so moving or reinstalling memmy keeps working, and re-running ``init`` rewrites the
recorded interpreter.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from memmy.integrations.plan import FileChange, change

HOOK_SHIM = "memmy-hook"
CLI_SHIM = "memmy-memory"
SHIM_MODE = 0o755
PYTHON_LINE = "MEMMY_PYTHON="
PACKAGE_LINE = "MEMMY_PACKAGE_DIR="
#: The hook's fast start: ``-S`` skips ``site`` (the runtime needs nothing from site-packages but memmy itself,
#: which ``PYTHONPATH`` names); ``-c`` instead of ``-m`` skips ``runpy`` (``importlib.util``, ``contextlib``...);
#: ``-P`` keeps the current directory off ``sys.path`` (a project's ``json.py`` never shadows the runtime's).
#: Used only while the recorded directory still holds the hook runtime.
_FAST_HOOK = """{package_line}
if [ -x "$MEMMY_PYTHON" ] && [ -f "$MEMMY_PACKAGE_DIR/memmy/hook/runtime.py" ]; then
  PYTHONPATH="$MEMMY_PACKAGE_DIR${{PYTHONPATH:+:$PYTHONPATH}}"; export PYTHONPATH
  exec "$MEMMY_PYTHON" -S -P -c {fast_code} "$@"
fi
"""
#: What ``python -m memmy.hook`` runs, as a ``-c`` program (its ``sys.argv[0]`` is ``-c``).
FAST_HOOK_CODE = "import sys; from memmy.hook.runtime import main; main(sys.argv)"

_SHIM = """#!/bin/sh
# memmy launcher written by `memmy-memory init` (do not edit: re-run init after moving or reinstalling memmy).
# Agents' hooks, MCP registrations and the service call this file; only this file names the interpreter.
{python_line}
{fast_path}if [ -x "$MEMMY_PYTHON" ]; then exec "$MEMMY_PYTHON" -m {module} "$@"; fi
# The recorded install is gone: use a memmy-memory found on PATH (pipx, uv tool, pip --user), if any.
self_dir=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
old_ifs=$IFS; IFS=:
for dir in $PATH; do
  [ -n "$dir" ] && [ "$dir" != "$self_dir" ] && [ -x "$dir/memmy-memory" ] || continue
  candidate=$(sed -n '1s/^#![ ]*//p' "$dir/memmy-memory")
  case $candidate in
    */bin/sh|*/bin/bash|'') candidate=$(sed -n "s/^'''exec' '\\([^']*\\)'.*/\\1/p" "$dir/memmy-memory" | head -n 1) ;;
  esac
  if [ -x "$candidate" ]; then IFS=$old_ifs; exec "$candidate" -m {module} "$@"; fi
done
IFS=$old_ifs
echo "memmy: no memmy install found (recorded: $MEMMY_PYTHON); reinstall memmy, then run: memmy-memory init" >&2
exit {missing_exit}
"""


def shim_dir(memmy_home: Path) -> Path:
    """``$MEMMY_HOME/bin``."""
    return memmy_home / "bin"


def package_dir() -> str:
    """The directory that holds the installed ``memmy`` package (site-packages, or ``src`` of a checkout)."""
    return str(Path(__file__).resolve().parents[2])


def shim_text(python: str, module: str, fail_open: bool, package: str | None = None) -> str:
    """One launcher script recording ``python``; ``fail_open`` exits 0 when no install is found.

    With ``package`` (the directory holding ``memmy``) the script first tries ``python -S`` with that directory
    on ``PYTHONPATH``: only for the hook, whose runtime imports nothing outside the standard library and memmy.
    """
    fast = (
        _FAST_HOOK.format(package_line=f"{PACKAGE_LINE}{shlex.quote(package)}", fast_code=shlex.quote(FAST_HOOK_CODE))
        if package
        else ""
    )
    return _SHIM.format(
        python_line=f"{PYTHON_LINE}{shlex.quote(python)}",
        fast_path=fast,
        module=module,
        missing_exit=0 if fail_open else 127,
    )


def shim_changes(memmy_home: Path, python: str, install: bool) -> list[FileChange]:
    """Write (or delete) both launchers."""
    directory = shim_dir(memmy_home)
    return [
        change(
            directory / HOOK_SHIM,
            shim_text(python, "memmy.hook", True, package_dir()) if install else None,
            SHIM_MODE,
        ),
        change(directory / CLI_SHIM, shim_text(python, "memmy", False) if install else None, SHIM_MODE),
    ]


def recorded_python(shim: Path) -> str | None:
    """The interpreter a launcher records, or None when the file is missing or not a memmy launcher."""
    try:
        text = shim.read_text(encoding="utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(PYTHON_LINE):
            parts = shlex.split(line[len(PYTHON_LINE) :])
            return parts[0] if parts else None
    return None
