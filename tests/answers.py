"""Helpers for reading the service's typed answers in tests."""

from typing import TypeVar

T = TypeVar("T")


def must(value: T | None) -> T:
    """The value of an answer field typed optional that this test knows is set (e.g. the id of a stored memory)."""
    assert value is not None
    return value
