"""``Coalescer``: a lifecycle's items that arrive while its previous send is under way go together next."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from workers.bridge.signals import Coalescer


class _Sends:
    def __init__(self) -> None:
        self.sent: list[tuple[str, list[int]]] = []
        self.gate = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()

    async def send(self, key: str, items: list[int]) -> None:
        self.sent.append((key, items))
        await self.gate.wait()

    def spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def settle(self) -> None:
        for _ in range(300):
            if not self.tasks:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("sends still under way")


async def test_a_lone_item_goes_at_once_and_a_burst_goes_in_the_next_send_in_order() -> None:
    sends = _Sends()
    out: Coalescer[int] = Coalescer(sends.send, sends.spawn, max_batch=3, interval=0)
    out.put("a", 1)
    await asyncio.sleep(0)
    assert sends.sent == [("a", [1])], "alone: sent without waiting for company"
    for item in range(2, 9):  # arrive while the first send is under way
        out.put("a", item)
    out.put("b", 100)
    await asyncio.sleep(0)
    assert sends.sent == [("a", [1]), ("b", [100])], "one send per key at a time; other keys do not wait"
    assert out.waiting() == 7
    sends.gate.set()
    await sends.settle()
    assert [items for key, items in sends.sent if key == "a"] == [[1], [2, 3, 4], [5, 6, 7], [8]]
    assert out.waiting() == 0
    out.put("a", 9)  # quiet again: a new send at once
    await sends.settle()
    assert sends.sent[-1] == ("a", [9])


async def test_a_failing_send_is_logged_and_the_next_item_is_sent_again() -> None:
    sent: list[list[int]] = []
    tasks: set[asyncio.Task[None]] = set()

    async def send(key: str, items: list[int]) -> None:
        sent.append(items)
        if items == [1]:
            raise RuntimeError("boom")

    def spawn(coro: Any) -> None:
        task = asyncio.create_task(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    out: Coalescer[int] = Coalescer(send, spawn, interval=0)
    out.put("a", 1)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    out.put("a", 2)
    for _ in range(10):
        await asyncio.sleep(0)
    assert sent == [[1], [2]] and out.waiting() == 0


async def test_a_key_sends_at_most_once_per_interval_and_a_quiet_key_at_once() -> None:
    """A burst spread over time (members created one by one, 10 ms apart) still goes in few sends: the key stays
    busy for the interval after each send, and what comes meanwhile waits for the next."""
    sends = _Sends()
    sends.gate.set()
    loop = asyncio.get_running_loop()
    times: list[float] = []

    async def send(key: str, items: list[int]) -> None:
        times.append(loop.time())
        await sends.send(key, items)

    out: Coalescer[int] = Coalescer(send, sends.spawn, interval=0.1)
    start = loop.time()
    for item in range(30):
        out.put("a", item)
        await asyncio.sleep(0.01)
    await sends.settle()
    batches = [items for _, items in sends.sent]
    assert batches[0] == [0] and times[0] - start < 0.05, "the first item at once"
    assert [i for b in batches for i in b] == list(range(30)), "all, once, in order"
    assert 3 <= len(batches) <= 5, batches
    assert all(b - a >= 0.095 for a, b in itertools.pairwise(times)), times
