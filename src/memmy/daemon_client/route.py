"""One daemon route as the client sees it: method, path template and (as a type parameter) its answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar
from urllib.parse import quote

#: The answer a route's JSON decodes to (a ``TypedDict`` of :mod:`memmy.commands.answers`).
T_co = TypeVar("T_co", covariant=True)


@dataclass(frozen=True, slots=True)
class Route(Generic[T_co]):
    """``method`` + ``path`` (``/api/v1/memory/{memory_id}``); ``Route[MemoryDetail]`` says what it answers."""

    method: str
    path: str

    def url(self, **values: str) -> str:
        """The path with each ``{name}`` filled (percent-encoded: an id never adds a path segment)."""
        path = self.path
        for name, value in values.items():
            if "{" + name + "}" not in path:
                raise KeyError(f"{self.path} has no {{{name}}}")
            path = path.replace("{" + name + "}", quote(value, safe=""))
        if "{" in path:
            raise KeyError(f"{self.path}: fill every {{name}} (got {sorted(values)})")
        return path
