"""Shared CLI state: global options, the HTTP client, and small option parsers."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar, cast

import click

from memmy.cli.client import ClientError, ClientSettings, connect
from memmy.cli.output import emit_json, fail
from memmy.config import MemmyConfig, load_config
from memmy.daemon_client import DaemonClient, Route
from memmy.errors import MemmyError

T = TypeVar("T")


@dataclass
class CliContext:
    """Global options, resolved lazily so ``--help`` never reads config."""

    url: str | None
    token: str | None
    config_path: str | None
    source: str | None
    user_id: str | None
    as_json: bool

    def config(self) -> MemmyConfig:
        """The effective config (errors become a clean exit 1)."""
        try:
            return load_config(self.config_path)
        except MemmyError as exc:
            fail(exc.message)
            raise  # unreachable

    def client(self) -> DaemonClient:
        """The daemon client for the resolved URL and token."""
        settings = ClientSettings.resolve(
            url=self.url, token=self.token, user_id=self.user_id, source=self.source, config=self.config()
        )
        return connect(settings)

    def call(
        self,
        route: Route[T],
        body: Mapping[str, Any] | None = None,
        *,
        params: Mapping[str, Any] | None = None,
        **path: str,
    ) -> T:
        """One request to a route of the table (its ``{names}`` from ``path``); its typed answer. Daemon errors
        print on stderr and exit 1."""
        return cast(T, self.request(route.method, route.url(**path), body, params))

    def request(self, method: str, path: str, body: Any = None, params: Mapping[str, Any] | None = None) -> Any:
        """One raw request (a path outside the route table: the panel's sign-in, ``memmy-memory api``); daemon
        errors print on stderr and exit 1."""
        client = self.client()
        try:
            return client.request(method, path, body, params)
        except ClientError as exc:
            fail(exc.message, error_code=exc.code, status=exc.status)
        finally:
            client.close()

    def refuse(self, code: str, message: str, **detail: Any) -> NoReturn:
        """A write the daemon answered but did not store (forgotten content): one line on stderr and exit 1; under
        ``--json`` the error object ``{"error": {"code", "message", ...}}`` on stdout, exit 1."""
        if self.as_json:
            emit_json({"error": {"code": code, "message": message, **detail}})
            raise SystemExit(1)
        fail(message)
        raise SystemExit(1)  # unreachable: fail exits

    def output(self, value: Any, human: str) -> None:
        """JSON with ``--json``, else the human text."""
        if self.as_json:
            emit_json(value)
        else:
            click.echo(human)


pass_ctx = click.make_pass_decorator(CliContext)


def list_option(value: str | None) -> list[str] | None:
    """Parse a JSON array or a comma-separated list."""
    if value is None:
        return None
    value = value.strip()
    if value.startswith("["):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"not a JSON array: {exc.msg}") from None
        return [str(v) for v in parsed]
    return [v.strip() for v in value.split(",") if v.strip()]


def strip_none(body: dict[str, Any]) -> dict[str, Any]:
    """Drop keys whose value is None."""
    return {k: v for k, v in body.items() if v is not None}
