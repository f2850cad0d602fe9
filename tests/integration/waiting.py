"""Waiting on the real stack: poll until a probe holds, fail with its last value. One definition for every suite."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


def eventually(probe: Callable[[], T | None], timeout: float = 60.0, what: str = "", *, interval: float = 0.2) -> T:
    """Poll ``probe`` until it returns something truthy and return that; fail with the last value otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"{what or 'condition'} not met within {timeout}s; last value: {value!r}")
        time.sleep(interval)


async def eventually_async(
    probe: Callable[[], Awaitable[T | None]], timeout: float = 60.0, what: str = "", *, interval: float = 0.2
) -> T:
    """:func:`eventually` for an async probe, sleeping without blocking the event loop."""
    deadline = time.monotonic() + timeout
    value: Any = None
    while True:
        value = await probe()
        if value:
            return value  # type: ignore[no-any-return]
        if time.monotonic() >= deadline:
            pytest.fail(f"{what or 'condition'} not met within {timeout}s; last value: {value!r}")
        await asyncio.sleep(interval)
