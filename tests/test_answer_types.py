"""Every public method of every ops group returns a declared type, never a bare ``dict[str, Any]`` or ``Any``: the
answers the HTTP API sends are the ``TypedDict``s of ``memmy/commands/answers.py`` (the OpenAPI document and the
daemon client read the same types)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any, get_args, get_origin

from memmy.commands.answers import Items

#: The packages whose ``*Ops`` classes (and the service's ``StoreOwnership``) are the service's use cases.
OPS_PACKAGES = ("memmy.service", "memmy.jobs", "memmy.dream", "memmy.keys")
EXTRA_CLASSES = ("StoreOwnership",)


def ops_classes() -> Iterator[type]:
    """Every ops class defined in :data:`OPS_PACKAGES`."""
    for package in OPS_PACKAGES:
        module = importlib.import_module(package)
        names = [package] + [
            f"{package}.{info.name}" for info in pkgutil.iter_modules(module.__path__) if not info.ispkg
        ]
        for name in names:
            for cls_name, cls in vars(importlib.import_module(name)).items():
                defined_here = inspect.isclass(cls) and cls.__module__ == name
                if defined_here and (cls_name.endswith("Ops") or cls_name in EXTRA_CLASSES):
                    yield cls


def untyped(hint: object) -> bool:
    """``Any``, or a plain dict/mapping of ``Any`` values, at the top or inside a list, tuple or union."""
    if hint is Any:
        return True
    origin, args = get_origin(hint), get_args(hint)
    if origin in (dict, Mapping) and args and args[-1] is Any:
        return True
    if origin in (list, tuple, typing.Union, types.UnionType):
        return any(untyped(arg) for arg in args)
    return False


def public_methods(cls: type) -> Iterator[tuple[str, Any]]:
    """(qualified name, return hint) of each public method, inherited ones included."""
    for name, function in inspect.getmembers(cls, inspect.isfunction):
        if not name.startswith("_"):
            hints = typing.get_type_hints(function, vars(importlib.import_module(function.__module__)))
            yield function.__qualname__, hints.get("return", Any)


def test_the_finder_sees_every_ops_group() -> None:
    found = {cls.__name__ for cls in ops_classes()}
    expected = {"MemoryOps", "RecallOps", "TurnOps", "PanelOps", "GovernanceOps", "ValidityOps", "DataOps"}
    assert expected | {"ImportOps", "KeyOps", "DreamOps", "StoreOwnership"} <= found, found


def test_no_public_ops_method_returns_an_untyped_dict() -> None:
    offenders = sorted({qualname for cls in ops_classes() for qualname, hint in public_methods(cls) if untyped(hint)})
    assert offenders == [], f"return a TypedDict of memmy.commands.answers instead: {offenders}"


def test_the_check_catches_an_untyped_answer() -> None:
    class ProbeOps:
        def typed(self) -> Items:
            raise NotImplementedError

        def loose(self) -> dict[str, Any]:
            raise NotImplementedError

        def listed(self) -> list[dict[str, Any]] | None:
            raise NotImplementedError

    flagged = {name.rsplit(".", 1)[-1] for name, hint in public_methods(ProbeOps) if untyped(hint)}
    assert flagged == {"loose", "listed"}
