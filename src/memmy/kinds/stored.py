"""A kind's payload as stored: one section of ``Memory.properties`` read into a frozen dataclass and back.

Readers coerce what older rows may hold (a missing key, ``null``, a number stored as text) to the field's type.
Writing back starts from the section as it was read and changes only the fields whose value differs from what
was read, so a payload that was not changed is written back byte for byte (no migration, ever).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Self

#: A stored section: the JSON object under one key of ``Memory.properties``.
Section = Mapping[str, Any]


def section_of(properties: Mapping[str, Any], key: str) -> dict[str, Any]:
    """A copy of the section ``key`` of ``properties`` ({} when there is none or it is not an object)."""
    value = properties.get(key)
    return dict(value) if isinstance(value, Mapping) else {}


def text(value: Any, default: str = "") -> str:
    """A stored value as text; missing, ``null`` and "" read as ``default``."""
    return str(value) if value not in (None, "") else default


def number(value: Any, default: float = 0.0) -> float:
    """A stored value as a float; what is not a number reads as ``default``."""
    if isinstance(value, bool):
        return default
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def maybe_number(value: Any) -> float | None:
    """A stored number, None when it is missing or not a number (the reader picks its own default)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def count(value: Any, default: int = 0) -> int:
    """A stored value as an int; what is not a number reads as ``default``."""
    try:
        return int(value) if value not in (None, "") and not isinstance(value, bool) else default
    except (TypeError, ValueError):
        return default


def strings(value: Any) -> tuple[str, ...]:
    """A stored list (or one string) as a tuple of strings; a missing one is empty."""
    if isinstance(value, str):
        return (value,) if value else ()
    return tuple(str(v) for v in value or ())


def records(value: Any) -> tuple[Mapping[str, Any], ...]:
    """The JSON objects of a stored list (other entries are skipped)."""
    return tuple(v for v in value or () if isinstance(v, Mapping)) if isinstance(value, list | tuple) else ()


def entries(value: Any) -> tuple[str | Mapping[str, Any], ...]:
    """The strings and JSON objects of a stored list (a structured fact or step, or its text)."""
    if not isinstance(value, list | tuple):
        return ()
    return tuple(v if isinstance(v, Mapping) else str(v) for v in value if v is not None)


def plain(value: Any) -> Any:
    """A field value as JSON stores it: tuples become lists, mappings dicts."""
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    return value


@dataclasses.dataclass(frozen=True)
class Stored:
    """Base of a kind's payload: ``KEY`` names its section, ``NAMES`` maps each field to its stored name."""

    KEY: ClassVar[str] = ""
    NAMES: ClassVar[dict[str, str]] = {}

    #: The section as it was read (the keys no field models are written back unchanged).
    stored: Section = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def read(cls, section: Section) -> Self:
        """The payload of a stored section (subclasses coerce each field)."""
        raise NotImplementedError

    @classmethod
    def of(cls, properties: Mapping[str, Any]) -> Self:
        """The payload of a memory's properties (an empty section reads as the defaults)."""
        return cls.read(section_of(properties, cls.KEY))

    def section(self) -> dict[str, Any]:
        """The section to store: as read, with every field that changed since written under its stored name."""
        read_back = type(self).read(self.stored)
        out = dict(self.stored)
        for name, key in self.NAMES.items():
            value = getattr(self, name)
            if value != getattr(read_back, name):
                out[key] = plain(value)
        return out

    def to_properties(self, properties: Mapping[str, Any]) -> dict[str, Any]:
        """``properties`` with this payload's section replaced (none added for an empty payload)."""
        section = self.section()
        if not section and self.KEY not in properties:
            return dict(properties)
        return {**properties, self.KEY: section}

    def changed(self, **changes: Any) -> Self:
        """A copy with ``changes`` (field names) applied; the stored section travels along."""
        return dataclasses.replace(self, **changes)
