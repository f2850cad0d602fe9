"""``workers.bridge.gc``: a pass at the interval, or soon after ``collect_soon``."""

from __future__ import annotations

import asyncio
from typing import Any

from workers.bridge.gc import GarbageCollector


async def test_collect_soon_runs_a_pass_before_the_interval() -> None:
    gc = GarbageCollector(None, None, None, interval_seconds=3600)  # type: ignore[arg-type]
    gc.soon_seconds = 0.01
    passes: list[int] = []

    async def run_once(*_: Any) -> None:
        passes.append(1)

    gc.run_once = run_once  # type: ignore[method-assign]
    task = asyncio.create_task(gc.run())
    await asyncio.sleep(0.05)
    assert passes == [], "nothing before the interval"
    gc.collect_soon()
    gc.collect_soon()
    await asyncio.sleep(0.1)
    task.cancel()
    assert passes == [1], "one pass for both calls"
