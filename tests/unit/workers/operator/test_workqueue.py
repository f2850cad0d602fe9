"""The operator's per-object work queue: one worker per key at a time, failures retried on their own backoff."""

from __future__ import annotations

import asyncio

from workers.operator.workqueue import Key, WorkQueue


async def test_a_failing_key_is_retried_and_never_blocks_another() -> None:
    queue = WorkQueue()
    calls: list[Key] = []

    async def reconcile(key: Key) -> None:
        calls.append(key)
        if key == ("ns", "broken") and calls.count(key) == 1:
            raise RuntimeError("the Controller does not answer")

    worker = asyncio.create_task(queue.serve(reconcile, "NodeSet"))
    queue.add(("ns", "broken"))
    queue.add(("ns", "good"))
    await asyncio.sleep(0.05)
    assert calls == [("ns", "broken"), ("ns", "good")], "the good one ran while the broken one waits"
    await asyncio.sleep(1.2)  # first retry after 1 s
    worker.cancel()
    assert calls.count(("ns", "broken")) == 2


async def test_a_key_marked_while_worked_on_runs_again_once() -> None:
    queue = WorkQueue()
    started, release = asyncio.Event(), asyncio.Event()
    runs = 0

    async def reconcile(key: Key) -> None:
        nonlocal runs
        runs += 1
        started.set()
        await release.wait()

    worker = asyncio.create_task(queue.serve(reconcile, "NodeSet"))
    queue.add(("ns", "a"))
    await started.wait()
    queue.add(("ns", "a"))
    queue.add(("ns", "a"))
    release.set()
    await asyncio.sleep(0.05)
    worker.cancel()
    assert runs == 2


async def test_asking_again_later_keeps_one_timer_per_key_the_earliest() -> None:
    """A reconcile that asks "again in N s" each time it runs (a periodic check) never piles up timers: the
    earliest of the asks wins, and a fired timer can be set again."""
    queue = WorkQueue()
    runs: list[Key] = []

    async def reconcile(key: Key) -> None:
        runs.append(key)

    worker = asyncio.create_task(queue.serve(reconcile, "Accounting"))
    key = ("ns", "slurm")
    for _ in range(20):
        queue.add_later(key, 0.3)
    queue.add_later(key, 0.1)  # earlier: replaces
    queue.add_later(key, 5.0)  # later: ignored
    queue.add_later(("ns", "other"), 0.1)
    assert queue.waiting_later() == 2
    await asyncio.sleep(0.2)
    assert runs.count(key) == 1 and queue.waiting_later() == 0
    await asyncio.sleep(0.3)
    assert runs.count(key) == 1, "the replaced timers never fire"
    queue.add_later(key, 0.05)
    await asyncio.sleep(0.15)
    worker.cancel()
    assert runs.count(key) == 2
